"""PostgreSQL repository of threads, their seq allocator and the facts read with them."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, tzinfo

from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.postgres.base import (
    Conn,
    MissingRow,
    PostgresRepository,
    members_by_value,
    unprefixed,
)
from turnkeeper.adapters.postgres.locked_threads import LockedThreads
from turnkeeper.adapters.postgres.messages import message_of
from turnkeeper.adapters.postgres.principals import PostgresGrantRepository
from turnkeeper.adapters.postgres.ratelimit import refusal
from turnkeeper.adapters.postgres.spaces import channel_of, space_of
from turnkeeper.adapters.postgres.tokens import caller_of
from turnkeeper.application.ports import BucketTake, HistoryFacts, PostFacts, TokenPostFacts
from turnkeeper.domain.authorization import AccessTarget
from turnkeeper.domain.ratelimit import SECONDS_PER_MINUTE, TOLERANCE
from turnkeeper.domain.world import Grant, Level, ResourceKind, Thread, ThreadState, TitleSource

_TITLE_SOURCE_OF = members_by_value(TitleSource)
_THREAD_STATE_OF = members_by_value(ThreadState)


def _thread(row: q.ThreadRow) -> Thread:
    return Thread(
        id=row.id,
        channel_id=row.channel_id,
        is_main=row.is_main,
        title=row.title,
        title_source=_TITLE_SOURCE_OF[row.title_source],
        operator_agent_id=row.operator_agent_id,
        state=_THREAD_STATE_OF[row.state],
        latest_seq=row.latest_seq,
        has_restricted=row.has_restricted,
        created_by=row.created_by,
        created_at=row.created_at,
    )


def _target_of(row: q.GetThreadTargetRow | q.LockThreadTargetRow) -> AccessTarget:
    return AccessTarget(
        space=space_of(unprefixed(row, "s_", q.SpaceRow)),
        channel=channel_of(unprefixed(row, "c_", q.ChannelRow)),
        thread=_thread(unprefixed(row, "t_", q.ThreadRow)),
    )


def _grants_of(principal_id: uuid.UUID, text: str, zone: tzinfo) -> list[Grant]:
    """The grants of `GetPostFacts`' JSON column: [id, kind, resource, level, created_at].

    Times come in the session's zone, as psycopg loads a ``timestamptz`` column.
    """
    return [
        Grant(
            id=uuid.UUID(grant_id),
            principal_id=principal_id,
            resource_kind=ResourceKind(kind),
            resource_id=uuid.UUID(resource_id),
            level=Level.parse(level),
            created_at=datetime.fromisoformat(created_at).astimezone(zone),
        )
        for grant_id, kind, resource_id, level, created_at in json.loads(text)
    ]


class PostgresThreadRepository(PostgresRepository):
    """Threads and their seq allocator; satisfies `ThreadRepository`.

    Args:
        conn: the unit's connection.
        locked: the unit's threads read under their row lock (shared with the
            freshness repository); a fresh one when None.
        grants: the unit's grant repository, told the grants a post's facts read.
    """

    def __init__(
        self,
        conn: Conn,
        locked: LockedThreads | None = None,
        grants: PostgresGrantRepository | None = None,
    ) -> None:
        super().__init__(conn)
        self._locked = locked if locked is not None else LockedThreads(conn)
        self._grants = grants

    async def add(self, thread: Thread) -> None:
        """Store a new thread.

        Args:
            thread: the thread.
        """
        await q.insert_thread(
            self._conn,
            id=thread.id,
            channel_id=thread.channel_id,
            is_main=thread.is_main,
            title=thread.title,
            title_source=thread.title_source.value,
            operator_agent_id=thread.operator_agent_id,
            state=thread.state.value,
            latest_seq=thread.latest_seq,
            has_restricted=thread.has_restricted,
            created_by=thread.created_by,
            created_at=thread.created_at,
        )

    async def get(self, thread_id: uuid.UUID) -> Thread | None:
        """The thread, or None (no lock).

        Args:
            thread_id: the id.

        Returns:
            The thread, or None.
        """
        await self._locked.write()
        row = await q.get_thread(self._conn, id=thread_id)
        return None if row is None else _thread(row)

    async def allocate_seq(self, thread_id: uuid.UUID) -> int:
        """Take the thread row lock (until the unit ends) and the next thread_seq.

        Args:
            thread_id: the thread.

        Returns:
            The allocated seq.

        Raises:
            MissingRow: for an unknown thread.
        """
        if self._locked.latest(thread_id) is not None:
            return self._locked.take(thread_id)
        await self._locked.write()
        seq = await q.allocate_thread_seq(self._conn, id=thread_id)
        if seq is None:
            raise MissingRow(f"thread {thread_id}")
        return seq

    async def lock_state(self, thread_id: uuid.UUID) -> ThreadState:
        """Take the thread row lock (until the unit ends) and read the state under it.

        Args:
            thread_id: the thread.

        Returns:
            The state as last committed.

        Raises:
            MissingRow: for an unknown thread.
        """
        known = self._locked.state(thread_id)
        if known is not None:
            # post_facts read the row under its lock in this unit, and the unit's own
            # changes of the state are noted: no other unit changed it since.
            return known
        await self._locked.write()
        row = await q.lock_thread_state(self._conn, id=thread_id)
        if row is None:
            raise MissingRow(f"thread {thread_id}")
        state = ThreadState(row.state)
        self._locked.remember_state(thread_id, state)
        self._locked.remember(thread_id, row.latest_seq, row.has_restricted)
        return state

    async def set_state(self, thread_id: uuid.UUID, state: ThreadState) -> Thread:
        """Open or close a thread (a close records the frontier it closed at).

        Args:
            thread_id: the thread.
            state: the new state.

        Returns:
            The thread as the UPDATE left it (``RETURNING``, no round trip of its own).

        Raises:
            MissingRow: for an unknown thread.
        """
        await self._locked.write()
        row = await q.set_thread_state(self._conn, id=thread_id, state=state.value)
        if row is None:
            raise MissingRow(f"thread {thread_id}")
        # The UPDATE holds the row lock now: the unit knows the state until it ends.
        self._locked.remember_state(thread_id, state)
        return _thread(row)

    async def reopen(self, thread_id: uuid.UUID) -> bool:
        """Open a done thread, taking its row lock.

        Args:
            thread_id: the thread.

        Returns:
            True when the thread was done and is now open.
        """
        await self._locked.write()
        reopened = await q.reopen_thread(self._conn, id=thread_id) == 1
        if reopened or self._locked.state(thread_id) is not None:
            # Reopened under the row lock, or locked before and not done: open either way.
            self._locked.remember_state(thread_id, ThreadState.OPEN)
        return reopened

    async def mark_restricted(self, thread_id: uuid.UUID) -> None:
        """Remember that the thread holds a restricted message (queued, see the port).

        Args:
            thread_id: the thread.
        """
        await self._locked.write()
        await q.mark_thread_restricted(self._conn, id=thread_id)
        self._locked.mark_restricted(thread_id)

    async def operated_by(self, agent_id: uuid.UUID) -> list[uuid.UUID]:
        """Ids of the threads whose fixed operator is this agent, by id.

        Args:
            agent_id: the agent.

        Returns:
            The thread ids.
        """
        return await q.list_threads_operated_by(self._conn, agent_id=agent_id)

    async def target(self, thread_id: uuid.UUID) -> AccessTarget | None:
        """The thread with its channel and space, read in one statement.

        Args:
            thread_id: the thread.

        Returns:
            The access target, or None for an unknown thread.
        """
        await self._locked.write()
        row = await q.get_thread_target(self._conn, id=thread_id)
        return None if row is None else _target_of(row)

    async def locked_target(self, thread_id: uuid.UUID) -> AccessTarget | None:
        """`target` under the thread row lock, in one statement (``LockThreadTarget``).

        Args:
            thread_id: the thread.

        Returns:
            The access target (the channel read after the lock was granted), or None for
            an unknown thread.
        """
        await self._locked.write()
        row = await q.lock_thread_target(self._conn, id=thread_id)
        return None if row is None else _target_of(row)

    async def history_facts(
        self, thread_id: uuid.UUID, reader_id: uuid.UUID, after_seq: int, limit: int
    ) -> HistoryFacts | None:
        """The thread, the reader's grants and the page, queued in this order, one wait.

        Args:
            thread_id: the thread.
            reader_id: the reader.
            after_seq: exclusive lower bound of the page's thread_seq.
            limit: at most this many messages.

        Returns:
            The facts, or None for an unknown thread.
        """
        await self._locked.write()
        # The unit's grant repository queues (and remembers) the grants' read.
        grant_repository = self._grants or PostgresGrantRepository(self._conn)
        target_row = await q.start_get_thread_target(self._conn, id=thread_id)
        await grant_repository.prefetch([reader_id])
        page_rows = await q.start_list_visible_messages(
            self._conn,
            thread_id=thread_id,
            after_seq=after_seq,
            reader_id=reader_id,
            max_rows=limit,
        )
        row = await target_row.result()
        grants = await grant_repository.for_principal(reader_id)
        messages = [message_of(m) for m in await page_rows.result()]
        if row is None:
            return None
        return HistoryFacts(target=_target_of(row), grants=grants, messages=messages)

    async def post_facts(
        self,
        thread_id: uuid.UUID,
        author_id: uuid.UUID,
        client_msg_id: str,
        take: BucketTake | None = None,
    ) -> PostFacts | None:
        """The thread under its row lock, the author's grants and earlier message.

        One statement (`GetPostFacts`, the take included: it runs on the locked row, so
        the thread lock comes first and the bucket lock after it, the order every unit
        takes them in), queued in the unit's pipeline and read in one round trip (with
        the unit's BEGIN when it is its first). The latest_seq read is remembered for
        `allocate_seq`.

        Args:
            thread_id: the thread.
            author_id: the author.
            client_msg_id: the request's idempotency key.
            take: the token to take (skipped in SQL for a replay), or None.

        Returns:
            The facts, or None for an unknown thread.
        """
        row = await self._post_row(thread_id, author_id, None, client_msg_id, take)
        return None if row is None else await self._facts(row, author_id, take)

    async def token_post_facts(
        self,
        thread_id: uuid.UUID,
        token_hash: bytes,
        client_msg_id: str,
        take: BucketTake | None = None,
    ) -> TokenPostFacts | None:
        """`post_facts` with the caller read by its token in the same statement (ADR 0026)."""
        row = await self._post_row(thread_id, None, token_hash, client_msg_id, take)
        if row is None or row.caller is None:
            return None
        caller = caller_of(row.caller, self._conn.info.timezone)
        return TokenPostFacts(
            caller=caller, facts=await self._facts(row, caller.principal.id, take)
        )

    async def _post_row(
        self,
        thread_id: uuid.UUID,
        author_id: uuid.UUID | None,
        token_hash: bytes | None,
        client_msg_id: str,
        take: BucketTake | None,
    ) -> q.GetPostFactsRow | None:
        await self._locked.write()
        pending = await q.start_get_post_facts(
            self._conn,
            id=thread_id,
            author_id=author_id,
            token_hash=token_hash,
            client_msg_id=client_msg_id,
            limit_class=None if take is None else take.limit_class,
            burst=None if take is None else float(take.burst),
            now=None if take is None else take.now,
            per_minute=None if take is None else float(take.per_minute),
            seconds_per_minute=SECONDS_PER_MINUTE,
            tolerance=TOLERANCE,
        )
        return await pending.result()

    async def _facts(
        self, row: q.GetPostFactsRow, author_id: uuid.UUID, take: BucketTake | None
    ) -> PostFacts | None:
        if row.t_id is None:
            return None
        thread = _thread(unprefixed(row, "t_", q.ThreadRow))
        self._locked.remember(thread.id, thread.latest_seq, thread.has_restricted)
        self._locked.remember_state(thread.id, thread.state)
        grants = _grants_of(author_id, row.grants, self._conn.info.timezone)
        if self._grants is not None:
            self._grants.remember(author_id, grants)
        target = AccessTarget(
            space=space_of(unprefixed(row, "s_", q.SpaceRow)),
            channel=channel_of(unprefixed(row, "c_", q.ChannelRow)),
            thread=thread,
        )
        # A replay (rare: a client's retry) reads its message in a round trip of its own.
        earlier = (
            None if row.earlier_id is None else await q.get_message(self._conn, id=row.earlier_id)
        )
        return PostFacts(
            target=target,
            grants=grants,
            earlier=None if earlier is None else message_of(earlier),
            retry_after=(
                None
                if take is None or row.bucket_tokens is None
                else refusal(row.bucket_tokens, take.per_minute)
            ),
        )
