"""PostgreSQL repositories: the ports of `turnkeeper.application.ports` over one connection.

Each repository runs the generated statements of `turnkeeper.adapters.postgres.queries` on the
connection of its unit of work (so inside the unit's transaction) and maps rows to the
frozen domain values. Driver errors are translated by the unit (`wrap_errors`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import attrs
import psycopg
from attrs import AttrsInstance

from turnkeeper.adapters.postgres import queries as q
from turnkeeper.application.ports import DenialRecord, ReaderScope
from turnkeeper.domain.authorization import AccessTarget
from turnkeeper.domain.events import Event, EventType, NewEvent
from turnkeeper.domain.messaging import Message, MessageKind, Origin, TriggerState
from turnkeeper.domain.ratelimit import SECONDS_PER_MINUTE, TOLERANCE, retry_after
from turnkeeper.domain.world import (
    BillingMode,
    Channel,
    ChannelBehavior,
    ChannelType,
    Grant,
    Level,
    OperatorMode,
    Principal,
    PrincipalKind,
    ResourceKind,
    Space,
    Thread,
    ThreadState,
    TitleSource,
)

Conn = psycopg.AsyncConnection[Any]


class MissingRow(LookupError):
    """A statement that must touch one row found none (an unknown id: a caller bug)."""


def _principal(row: q.PrincipalRow) -> Principal:
    return Principal(
        id=row.id,
        kind=PrincipalKind(row.kind),
        handle=row.handle,
        display_name=row.display_name,
        is_owner=row.is_owner,
        billing_mode=None if row.billing_mode is None else BillingMode(row.billing_mode),
        holder_id=row.holder_id,
        supports_followups=row.supports_followups,
        enabled=row.enabled,
        reported_followups=row.reported_followups,
        created_at=row.created_at,
    )


def _space(row: q.SpaceRow) -> Space:
    return Space(
        id=row.id,
        name=row.name,
        default_operator_id=row.default_operator_id,
        created_by=row.created_by,
        created_at=row.created_at,
    )


def _channel(row: q.ChannelRow) -> Channel:
    return Channel(
        id=row.id,
        space_id=row.space_id,
        name=row.name,
        type=ChannelType(row.type),
        operator_mode=OperatorMode(row.operator_mode),
        operator_id=row.operator_id,
        behavior=ChannelBehavior(
            free_response=row.free_response,
            allow_mentioned_agents=row.allow_mentioned_agents,
            thread_require_mention=row.thread_require_mention,
        ),
        archived=row.archived,
        main_thread_id=row.main_thread_id,
        created_at=row.created_at,
    )


def _thread(row: q.ThreadRow) -> Thread:
    return Thread(
        id=row.id,
        channel_id=row.channel_id,
        is_main=row.is_main,
        title=row.title,
        title_source=TitleSource(row.title_source),
        operator_agent_id=row.operator_agent_id,
        state=ThreadState(row.state),
        latest_seq=row.latest_seq,
        has_restricted=row.has_restricted,
        created_by=row.created_by,
        created_at=row.created_at,
    )


_Row = TypeVar("_Row", bound=AttrsInstance)


def _unprefixed(row: object, prefix: str, kind: type[_Row]) -> _Row:
    """One table's row out of a joined row whose columns carry the table's prefix."""
    return kind(**{f.name: getattr(row, prefix + f.name) for f in attrs.fields(kind)})


def _grant(row: q.GrantRow) -> Grant:
    return Grant(
        id=row.id,
        principal_id=row.principal_id,
        resource_kind=ResourceKind(row.resource_kind),
        resource_id=row.resource_id,
        level=Level.parse(row.level),
        created_at=row.created_at,
    )


def _message(row: q.MessageRow) -> Message:
    return Message(
        id=row.id,
        thread_id=row.thread_id,
        thread_seq=row.thread_seq,
        author_id=row.author_id,
        origin=Origin(row.origin),
        kind=MessageKind(row.kind),
        content=row.content,
        mentions=tuple(row.mentions),
        reply_to_id=row.reply_to_id,
        restricted_to=None if row.restricted_to is None else tuple(row.restricted_to),
        client_msg_id=row.client_msg_id,
        digest=row.digest,
        trigger_state=None if row.trigger_state is None else TriggerState(row.trigger_state),
        trigger_state_reason=row.trigger_state_reason,
        run_id=row.run_id,
        created_at=row.created_at,
        deleted_at=row.deleted_at,
        version=row.version,
    )


def _event(row: q.EventRow) -> Event:
    return Event(
        seq=row.seq,
        type=EventType(row.type),
        actor_id=row.actor_id,
        actor_kind=row.actor_kind,
        space_id=row.space_id,
        channel_id=row.channel_id,
        thread_id=row.thread_id,
        resource_kind=row.resource_kind,
        resource_id=row.resource_id,
        resource_version=row.resource_version,
        audience_id=row.audience_id,
        restricted_to=None if row.restricted_to is None else tuple(row.restricted_to),
        payload=row.payload,
        created_at=row.created_at,
    )


def _json_default(value: object) -> str:
    """JSON for the non-JSON values services may put in payloads (ids and times)."""
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def payload_json(payload: Mapping[str, Any]) -> str:
    """The JSON text of an event payload as stored (ids and times become strings).

    Args:
        payload: the event payload.

    Returns:
        Compact JSON with sorted keys.
    """
    return json.dumps(
        payload, default=_json_default, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )


def uuid_array_text(ids: Sequence[uuid.UUID] | None) -> str | None:
    """The text form of a ``uuid[]`` (``{a,b}``), None for NULL.

    Args:
        ids: the ids, or None.

    Returns:
        The array literal, or None.
    """
    if ids is None:
        return None
    return "{" + ",".join(str(i) for i in ids) + "}"


class PostgresPrincipalRepository:
    """Principals and their token hashes; satisfies `PrincipalRepository`.

    A principal read once is remembered for the rest of the unit (the repository lives
    as long as its unit): opening a run, accepting a follow-up or delivering an
    invocation needs the same author and agent several times, and each read would be a
    round trip. Principal rows are never locked, so a second read in the same READ
    COMMITTED unit could return a newer version; answering with the first read is the
    outcome of running both reads at that first moment, which is equally valid. The
    unit's own writes replace what it remembers.

    Args:
        conn: the unit's connection.
    """

    def __init__(self, conn: Conn) -> None:
        self._conn = conn
        self._seen: dict[uuid.UUID, Principal] = {}

    def _remember(self, principal: Principal) -> Principal:
        self._seen[principal.id] = principal
        return principal

    def forget(self, principal_id: uuid.UUID) -> None:
        """Drop what the unit remembers of a principal whose row changed elsewhere.

        Args:
            principal_id: the principal.
        """
        self._seen.pop(principal_id, None)

    async def add(self, principal: Principal) -> None:
        """Store a new principal.

        Args:
            principal: the principal.

        Raises:
            DuplicateKey: ``principals_handle_key`` when the handle is taken.
        """
        await q.insert_principal(
            self._conn,
            id=principal.id,
            kind=principal.kind.value,
            handle=principal.handle,
            display_name=principal.display_name,
            is_owner=principal.is_owner,
            billing_mode=None if principal.billing_mode is None else principal.billing_mode.value,
            holder_id=principal.holder_id,
            supports_followups=principal.supports_followups,
            enabled=principal.enabled,
            reported_followups=principal.reported_followups,
            created_at=principal.created_at,
        )
        self._remember(principal)

    async def get(self, principal_id: uuid.UUID) -> Principal | None:
        """The principal, or None.

        Args:
            principal_id: the id.

        Returns:
            The principal, or None.
        """
        seen = self._seen.get(principal_id)
        if seen is not None:
            return seen
        row = await q.get_principal(self._conn, id=principal_id)
        return None if row is None else self._remember(_principal(row))

    async def get_many(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Principal]:
        """The principals among `ids` that exist.

        Args:
            ids: the ids (duplicates and unknown ids are fine).

        Returns:
            The principals by id.
        """
        found = {i: self._seen[i] for i in ids if i in self._seen}
        missing = [i for i in dict.fromkeys(ids) if i not in found]
        if missing:
            for row in await q.get_principals(self._conn, ids=missing):
                found[row.id] = self._remember(_principal(row))
        return found

    async def update(self, principal: Principal) -> None:
        """Store the changed attributes of an existing principal.

        Args:
            principal: the new value.

        Raises:
            MissingRow: when no principal has this id.
        """
        changed = await q.update_principal(
            self._conn,
            id=principal.id,
            kind=principal.kind.value,
            handle=principal.handle,
            display_name=principal.display_name,
            is_owner=principal.is_owner,
            billing_mode=None if principal.billing_mode is None else principal.billing_mode.value,
            holder_id=principal.holder_id,
            supports_followups=principal.supports_followups,
            enabled=principal.enabled,
            reported_followups=principal.reported_followups,
        )
        if changed != 1:
            raise MissingRow(f"principal {principal.id}")
        self._remember(principal)

    async def add_token(self, principal_id: uuid.UUID, token_hash: bytes, at: datetime) -> None:
        """Store the hash of a new API token.

        Args:
            principal_id: the owner of the token.
            token_hash: the hash (never the token).
            at: creation time.
        """
        await q.insert_api_token(
            self._conn, token_hash=token_hash, principal_id=principal_id, created_at=at
        )

    async def by_token_hash(self, token_hash: bytes) -> Principal | None:
        """The principal owning a token hash.

        Args:
            token_hash: the hash.

        Returns:
            The principal, or None.
        """
        row = await q.get_principal_by_token_hash(self._conn, token_hash=token_hash)
        return None if row is None else self._remember(_principal(row))

    async def owner(self) -> Principal | None:
        """The owner principal (the first by id should there be several).

        Returns:
            The owner, or None before the first start.
        """
        row = await q.get_owner(self._conn)
        return None if row is None else _principal(row)


class PostgresSpaceRepository:
    """Spaces; satisfies `SpaceRepository`.

    Args:
        conn: the unit's connection.
    """

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def add(self, space: Space) -> None:
        """Store a new space.

        Args:
            space: the space.
        """
        await q.insert_space(
            self._conn,
            id=space.id,
            name=space.name,
            default_operator_id=space.default_operator_id,
            created_by=space.created_by,
            created_at=space.created_at,
        )

    async def get(self, space_id: uuid.UUID) -> Space | None:
        """The space, or None.

        Args:
            space_id: the id.

        Returns:
            The space, or None.
        """
        row = await q.get_space(self._conn, id=space_id)
        return None if row is None else _space(row)

    async def list_all(self) -> list[Space]:
        """Every space, by id.

        Returns:
            The spaces.
        """
        return [_space(row) for row in await q.list_spaces(self._conn)]


class PostgresChannelRepository:
    """Channels; satisfies `ChannelRepository`.

    Args:
        conn: the unit's connection.
    """

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def add(self, channel: Channel) -> None:
        """Store a new channel.

        Args:
            channel: the channel (its main thread may be stored later in the same unit).
        """
        await q.insert_channel(
            self._conn,
            id=channel.id,
            space_id=channel.space_id,
            name=channel.name,
            type=channel.type.value,
            operator_mode=channel.operator_mode.value,
            operator_id=channel.operator_id,
            free_response=channel.behavior.free_response,
            allow_mentioned_agents=channel.behavior.allow_mentioned_agents,
            thread_require_mention=channel.behavior.thread_require_mention,
            archived=channel.archived,
            main_thread_id=channel.main_thread_id,
            created_at=channel.created_at,
        )

    async def get(self, channel_id: uuid.UUID) -> Channel | None:
        """The channel, or None.

        Args:
            channel_id: the id.

        Returns:
            The channel, or None.
        """
        row = await q.get_channel(self._conn, id=channel_id)
        return None if row is None else _channel(row)

    async def update(self, channel: Channel) -> None:
        """Store the changed attributes of a channel.

        Args:
            channel: the new value.

        Raises:
            MissingRow: when no channel has this id.
        """
        changed = await q.update_channel(
            self._conn,
            id=channel.id,
            name=channel.name,
            operator_mode=channel.operator_mode.value,
            operator_id=channel.operator_id,
            free_response=channel.behavior.free_response,
            allow_mentioned_agents=channel.behavior.allow_mentioned_agents,
            thread_require_mention=channel.behavior.thread_require_mention,
            archived=channel.archived,
            main_thread_id=channel.main_thread_id,
        )
        if changed != 1:
            raise MissingRow(f"channel {channel.id}")

    async def list_all(self) -> list[Channel]:
        """Every channel, by id.

        Returns:
            The channels.
        """
        return [_channel(row) for row in await q.list_channels(self._conn)]


class PostgresThreadRepository:
    """Threads and their seq allocator; satisfies `ThreadRepository`.

    Args:
        conn: the unit's connection.
    """

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

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
        seq = await q.allocate_thread_seq(self._conn, id=thread_id)
        if seq is None:
            raise MissingRow(f"thread {thread_id}")
        return seq

    async def set_state(self, thread_id: uuid.UUID, state: ThreadState) -> None:
        """Open or close a thread.

        Args:
            thread_id: the thread.
            state: the new state.

        Raises:
            MissingRow: for an unknown thread.
        """
        if await q.set_thread_state(self._conn, id=thread_id, state=state.value) != 1:
            raise MissingRow(f"thread {thread_id}")

    async def reopen(self, thread_id: uuid.UUID) -> bool:
        """Open a done thread, taking its row lock.

        Args:
            thread_id: the thread.

        Returns:
            True when the thread was done and is now open.
        """
        return await q.reopen_thread(self._conn, id=thread_id) == 1

    async def mark_restricted(self, thread_id: uuid.UUID) -> None:
        """Remember that the thread holds a restricted message.

        Args:
            thread_id: the thread.

        Raises:
            MissingRow: for an unknown thread.
        """
        if await q.mark_thread_restricted(self._conn, id=thread_id) != 1:
            raise MissingRow(f"thread {thread_id}")

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
        row = await q.get_thread_target(self._conn, id=thread_id)
        if row is None:
            return None
        return AccessTarget(
            space=_space(_unprefixed(row, "s_", q.SpaceRow)),
            channel=_channel(_unprefixed(row, "c_", q.ChannelRow)),
            thread=_thread(_unprefixed(row, "t_", q.ThreadRow)),
        )


class PostgresGrantRepository:
    """Grants; satisfies `GrantRepository`.

    Args:
        conn: the unit's connection.
    """

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def add(self, grant: Grant) -> None:
        """Store a grant.

        Args:
            grant: the grant.

        Raises:
            DuplicateKey: ``grants_principal_resource_key`` for a second grant of the same
                principal on the same resource.
        """
        await q.insert_grant(
            self._conn,
            id=grant.id,
            principal_id=grant.principal_id,
            resource_kind=grant.resource_kind.value,
            resource_id=grant.resource_id,
            level=grant.level.label,
            created_at=grant.created_at,
        )

    async def get(self, grant_id: uuid.UUID) -> Grant | None:
        """The grant, or None.

        Args:
            grant_id: the id.

        Returns:
            The grant, or None.
        """
        row = await q.get_grant(self._conn, id=grant_id)
        return None if row is None else _grant(row)

    async def delete(self, grant_id: uuid.UUID) -> None:
        """Remove a grant (no-op for an unknown id).

        Args:
            grant_id: the id.
        """
        await q.delete_grant(self._conn, id=grant_id)

    async def for_principal(self, principal_id: uuid.UUID) -> list[Grant]:
        """Every grant of a principal, by id.

        Args:
            principal_id: the principal.

        Returns:
            The grants.
        """
        rows = await q.list_grants_for_principal(self._conn, principal_id=principal_id)
        return [_grant(row) for row in rows]


class PostgresMessageRepository:
    """Messages; satisfies `MessageRepository`.

    Args:
        conn: the unit's connection.
    """

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def add(self, message: Message) -> None:
        """Store a new message.

        Args:
            message: the message (its thread_seq allocated by `allocate_seq`).

        Raises:
            RetriableConflict: when (author, client_msg_id) was taken by a concurrent unit
                (translated by the unit from ``messages_author_client_msg_id_key``).
        """
        await q.insert_message(
            self._conn,
            id=message.id,
            thread_id=message.thread_id,
            thread_seq=message.thread_seq,
            author_id=message.author_id,
            origin=message.origin.value,
            kind=message.kind.value,
            content=message.content,
            mentions=list(message.mentions),
            reply_to_id=message.reply_to_id,
            restricted_to=None if message.restricted_to is None else list(message.restricted_to),
            client_msg_id=message.client_msg_id,
            digest=message.digest,
            trigger_state=None if message.trigger_state is None else message.trigger_state.value,
            trigger_state_reason=message.trigger_state_reason,
            run_id=message.run_id,
            created_at=message.created_at,
            deleted_at=message.deleted_at,
            version=message.version,
        )

    async def get(self, message_id: uuid.UUID) -> Message | None:
        """The message, or None.

        Args:
            message_id: the id.

        Returns:
            The message, or None.
        """
        row = await q.get_message(self._conn, id=message_id)
        return None if row is None else _message(row)

    async def by_client_id(self, author_id: uuid.UUID, client_msg_id: str) -> Message | None:
        """The message an author stored under a client id.

        Args:
            author_id: the author.
            client_msg_id: the author's idempotency key.

        Returns:
            The message, or None.
        """
        row = await q.get_message_by_client_id(
            self._conn, author_id=author_id, client_msg_id=client_msg_id
        )
        return None if row is None else _message(row)

    async def list_visible(
        self, thread_id: uuid.UUID, reader_id: uuid.UUID, after_seq: int, limit: int
    ) -> list[Message]:
        """Messages after a seq that the reader may see, oldest first.

        Args:
            thread_id: the thread.
            reader_id: the reader (restricted messages: members and author only).
            after_seq: exclusive lower bound of thread_seq.
            limit: at most this many messages.

        Returns:
            The messages.
        """
        rows = await q.list_visible_messages(
            self._conn,
            thread_id=thread_id,
            after_seq=after_seq,
            reader_id=reader_id,
            max_rows=limit,
        )
        return [_message(row) for row in rows]

    async def set_trigger_states(
        self, message_ids: Sequence[uuid.UUID], state: TriggerState, reason: str | None
    ) -> list[Message]:
        """Set the trigger_state of several messages in one statement.

        Args:
            message_ids: the messages.
            state: the new trigger state.
            reason: its reason.

        Returns:
            The changed messages, ordered by thread_seq then id.
        """
        if not message_ids:
            return []
        rows = await q.set_trigger_states(
            self._conn,
            trigger_state=state.value,
            trigger_state_reason=reason,
            ids=list(message_ids),
        )
        return sorted((_message(row) for row in rows), key=lambda m: (m.thread_seq, m.id))

    async def set_trigger_state(
        self, message_id: uuid.UUID, state: TriggerState, reason: str | None
    ) -> Message:
        """Change a message's trigger_state (version + 1).

        Args:
            message_id: the message.
            state: the new trigger state.
            reason: the reason of a failed or cancelled trigger.

        Returns:
            The changed message.

        Raises:
            MissingRow: for an unknown message.
        """
        row = await q.set_message_trigger_state(
            self._conn, id=message_id, trigger_state=state.value, trigger_state_reason=reason
        )
        if row is None:
            raise MissingRow(f"message {message_id}")
        return _message(row)


class PostgresEventLog:
    """The event log; satisfies `EventLog`.

    Appended events are buffered and written by `flush`, which the unit calls right
    before COMMIT: one statement (`AppendEvents`) allocates the seqs on the counter row
    and inserts the events, so the row lock is held only until the commit, and a later
    allocation waits until this commit is visible. Seq order is therefore commit order,
    and a reader paging by seq never passes an event that is still to commit.

    Args:
        conn: the unit's connection.
    """

    def __init__(self, conn: Conn) -> None:
        self._conn = conn
        self._pending: list[NewEvent] = []

    async def append(self, event: NewEvent) -> None:
        """Buffer an event; it gets its seq and becomes visible when the unit commits.

        Args:
            event: the event.
        """
        self._pending.append(event)

    async def flush(self) -> list[int]:
        """Allocate seqs for the buffered events and insert them (called before COMMIT).

        Returns:
            The seqs given, in append order.
        """
        if not self._pending:
            return []
        events, self._pending = self._pending, []
        last = await q.append_events(
            self._conn,
            offsets=list(range(1, len(events) + 1)),
            types=[e.type.value for e in events],
            actor_ids=[e.actor_id for e in events],
            actor_kinds=[e.actor_kind for e in events],
            space_ids=[e.space_id for e in events],
            channel_ids=[e.channel_id for e in events],
            thread_ids=[e.thread_id for e in events],
            resource_kinds=[e.resource_kind for e in events],
            resource_ids=[e.resource_id for e in events],
            resource_versions=[e.resource_version for e in events],
            audience_ids=[e.audience_id for e in events],
            restricted_tos=[uuid_array_text(e.restricted_to) for e in events],
            payloads=[payload_json(e.payload) for e in events],
            created_ats=[e.created_at for e in events],
        )
        if last is None:
            raise MissingRow("event_counter")
        return list(range(last - len(events) + 1, last + 1))

    def discard(self) -> None:
        """Forget the buffered events (the unit rolls back)."""
        self._pending.clear()

    async def read(self, scope: ReaderScope, after: int, limit: int) -> list[Event]:
        """Shared events after a cursor that the scope may read, in seq order.

        Only committed events are visible, and seqs are allocated in commit order, so an
        event that commits later always gets a seq above every event served now.

        Args:
            scope: what the reader may see.
            after: the cursor (exclusive).
            limit: at most this many events.

        Returns:
            The events.
        """
        rows = await q.read_shared_events(
            self._conn,
            after_seq=after,
            everything=scope.everything,
            channel_ids=sorted(scope.channel_ids),
            thread_ids=sorted(scope.thread_ids),
            reader_id=scope.reader_id,
            max_events=limit,
        )
        return [_event(row) for row in rows]

    async def read_personal(self, audience_id: uuid.UUID, after: int, limit: int) -> list[Event]:
        """One principal's personal events after a cursor, in seq order.

        Args:
            audience_id: the receiving principal.
            after: the cursor (exclusive).
            limit: at most this many events.

        Returns:
            The events.
        """
        rows = await q.read_audience_events(
            self._conn, audience_id=audience_id, after_seq=after, max_events=limit
        )
        return [_event(row) for row in rows]


class PostgresAuditLog:
    """Aggregated denials; satisfies `AuditLog`.

    Args:
        conn: the unit's connection.
    """

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def record_denial(
        self, principal_id: uuid.UUID, action: str, reason: str, window_start: datetime
    ) -> None:
        """Count a denial in its window's row (an atomic upsert).

        Args:
            principal_id: who was denied.
            action: the action.
            reason: why.
            window_start: the start of the aggregation window.
        """
        await q.record_denial(
            self._conn,
            principal_id=principal_id,
            action=action,
            reason=reason,
            window_start=window_start,
        )

    async def denials(self, principal_id: uuid.UUID) -> list[DenialRecord]:
        """The aggregated denials of a principal, oldest window first.

        Args:
            principal_id: the principal.

        Returns:
            The rows.
        """
        rows = await q.list_denials(self._conn, principal_id=principal_id)
        return [
            DenialRecord(
                principal_id=row.principal_id,
                action=row.action,
                reason=row.reason,
                window_start=row.window_start,
                count=row.count,
            )
            for row in rows
        ]


class PostgresRateLimitStore:
    """Token buckets; satisfies `RateLimitStore`.

    One statement per take (`TakeBucketToken`, an upsert that refills and takes in SQL
    under the row lock): the arithmetic of `turnkeeper.domain.ratelimit.take_token` is repeated
    there operation by operation in float8, and
    tests/integration/test_rate_limit_store.py proves both agree on every input
    Hypothesis finds. A principal's first take inserts a full bucket; two first takes
    at once meet on ``rate_buckets_pkey`` and the upsert turns the second into an
    update, so no retry is needed.

    Args:
        conn: the unit's connection.
    """

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def take_token(
        self,
        principal_id: uuid.UUID,
        limit_class: str,
        now: datetime,
        *,
        burst: int,
        per_minute: int,
    ) -> int | None:
        """Take one token, refilling the bucket for the time that passed.

        Args:
            principal_id: the principal.
            limit_class: the class, for example ``rl.message``.
            now: the time of the take.
            burst: the bucket's capacity.
            per_minute: its refill rate.

        Returns:
            None when a token was taken, else whole seconds until one is there.

        Raises:
            MissingRow: when the upsert returned nothing (it always returns its row).
        """
        left = await q.take_bucket_token(
            self._conn,
            principal_id=principal_id,
            limit_class=limit_class,
            burst=float(burst),
            now=now,
            per_minute=float(per_minute),
            seconds_per_minute=SECONDS_PER_MINUTE,
            tolerance=TOLERANCE,
        )
        if left is None:
            raise MissingRow(f"bucket of {principal_id}")
        if left >= 0.0:
            return None
        # A refusal returns minus the missing part, exactly -(1 - tokens) (IEEE
        # subtraction rounds symmetrically), so the wait is the domain's to the bit.
        return retry_after(-left, per_minute=per_minute)
