"""Repositories of the world: principals, spaces, channels, threads and grants."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

import attrs

from turnkeeper.application.ports.tokens import ResolvedToken
from turnkeeper.domain.authorization import AccessTarget
from turnkeeper.domain.messaging import Message
from turnkeeper.domain.world import (
    Channel,
    Grant,
    Level,
    Principal,
    ResourceKind,
    Space,
    Thread,
    ThreadState,
)


class PrincipalRepository(Protocol):
    """Principals (their API tokens: `TokenRepository`)."""

    async def add(self, principal: Principal) -> None:
        """Store a new principal.

        Raises:
            DuplicateKey: ``principals_handle_key`` when the handle is taken (a store
                that pipelines its writes may raise it at commit instead).
        """
        ...

    async def get(self, principal_id: uuid.UUID) -> Principal | None:
        """The principal, or None."""
        ...

    async def lock(self, principal_id: uuid.UUID) -> Principal | None:
        """The principal, read under an update lock held until the unit ends, or None.

        For a change that writes the row back whole (`update`): another change of the
        row waits, and one committed while this waited is read, not overwritten.
        """
        ...

    async def get_many(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Principal]:
        """The principals among `ids` that exist, by id."""
        ...

    async def prefetch(self, ids: Sequence[uuid.UUID]) -> None:
        """Start reading principals the unit is about to need, without waiting.

        A later `get` or `get_many` of them then costs no round trip of its own when the
        read arrived with another statement's (ADR 0022); without a later read it is
        wasted work, never a wrong answer.

        Args:
            ids: the principals.
        """
        ...

    async def update(self, principal: Principal) -> None:
        """Store changed attributes of an existing principal."""
        ...

    async def owner(self) -> Principal | None:
        """The owner principal, if one exists."""
        ...

    async def prefetch_owner(self) -> None:
        """Start reading the owner the unit is about to need, without waiting.

        As `prefetch`: a later `owner` then costs no round trip of its own when the read
        arrived with another statement's; a principal written by the unit in between
        drops it.
        """
        ...


class SpaceRepository(Protocol):
    """Spaces."""

    async def add(self, space: Space) -> None:
        """Store a new space."""
        ...

    async def get(self, space_id: uuid.UUID) -> Space | None:
        """The space, or None."""
        ...

    async def list_all(self) -> list[Space]:
        """Every space."""
        ...


class ChannelRepository(Protocol):
    """Channels."""

    async def add(self, channel: Channel) -> None:
        """Store a new channel."""
        ...

    async def get(self, channel_id: uuid.UUID) -> Channel | None:
        """The channel, or None."""
        ...

    async def lock(self, channel_id: uuid.UUID) -> Channel | None:
        """The channel, read under an update lock held until the unit ends, or None.

        For a change that writes the row back whole (`update`): another change of the
        row waits, and one committed while this waited is read, not overwritten.
        """
        ...

    async def update(self, channel: Channel) -> None:
        """Store changed attributes of a channel."""
        ...

    async def list_all(self) -> list[Channel]:
        """Every channel."""
        ...


@attrs.frozen(kw_only=True)
class BucketTake:
    """One token of the author's rate-limit bucket, taken with a post's facts.

    The rule is `turnkeeper.domain.ratelimit.take_token`'s, as in `RateLimitStore.take_token`.

    Attributes:
        limit_class: the class, for example ``rl.message``.
        now: the time of the take.
        burst: the bucket's capacity.
        per_minute: its refill rate.
    """

    limit_class: str
    now: datetime
    burst: int
    per_minute: int


@attrs.frozen(kw_only=True)
class PostFacts:
    """What a message post decides on, read together (`ThreadRepository.post_facts`).

    Attributes:
        target: the thread with its channel and space.
        grants: the author's grants.
        earlier: the message the author stored under the request's client id, or None.
        retry_after: when a `BucketTake` was asked for and the bucket was empty, whole
            seconds until a token is there (the caller must roll the unit back); None
            when a token was taken, none was asked for, or `earlier` is set (a replay
            takes no token).
    """

    target: AccessTarget
    grants: list[Grant]
    earlier: Message | None
    retry_after: int | None = None


@attrs.frozen(kw_only=True)
class HistoryFacts:
    """What a history read decides on and answers with (`ThreadRepository.history_facts`).

    Attributes:
        target: the thread with its channel and space, read before the page, so the page
            holds every message up to the thread's latest_seq it may see.
        grants: the reader's grants.
        messages: the page: messages after the cursor that the reader may see, oldest
            first (read whether or not the grants let the reader see the thread: the
            caller decides, and answers nothing of a page it refuses).
    """

    target: AccessTarget
    grants: list[Grant]
    messages: list[Message]


@attrs.frozen(kw_only=True)
class TokenPostFacts:
    """A post whose author is known by a bearer token only (`ThreadRepository.token_post_facts`).

    Attributes:
        caller: the live token and its principal, the author.
        facts: the post's facts, or None for an unknown thread.
    """

    caller: ResolvedToken
    facts: PostFacts | None


class ThreadRepository(Protocol):
    """Threads and their sequence allocator."""

    async def add(self, thread: Thread) -> None:
        """Store a new thread (latest_seq as given, normally 0)."""
        ...

    async def get(self, thread_id: uuid.UUID) -> Thread | None:
        """The thread, or None (no lock)."""
        ...

    async def allocate_seq(self, thread_id: uuid.UUID) -> int:
        """Take the thread row lock and the next thread_seq.

        ``UPDATE threads SET latest_seq = latest_seq + 1 ... RETURNING latest_seq``: the
        row lock is held until the unit ends, which serializes appends per thread.

        Returns:
            The allocated seq.
        """
        ...

    async def lock_state(self, thread_id: uuid.UUID) -> ThreadState:
        """Take the thread row lock (held until the unit ends) and read the state under it.

        ``SELECT state ... FOR NO KEY UPDATE``, the lock every append and close takes: a
        decision made on this state (reopen or not) cannot race a close, which waits for
        this unit, or has committed and is seen here.

        Returns:
            The thread's state as last committed.
        """
        ...

    async def set_state(self, thread_id: uuid.UUID, state: ThreadState) -> Thread:
        """Open or close a thread (closing takes the row lock, as appends do).

        Returns:
            The thread as the change left it (a post committed while it waited for the
            row moved the frontier).
        """
        ...

    async def reopen(self, thread_id: uuid.UUID) -> bool:
        """Open a done thread, taking its row lock.

        ``UPDATE threads SET state = 'open' WHERE id = $1 AND state = 'done'``: of two
        concurrent posts into a done thread only the first sees a change, so exactly one
        system line is written.

        Returns:
            True when the thread was done and is now open.
        """
        ...

    async def mark_restricted(self, thread_id: uuid.UUID) -> None:
        """Remember that the thread holds a restricted message.

        Called under the unit's lock of the thread row (the thread exists); the write may
        travel with the unit's next statement instead of waiting on its own.
        """
        ...

    async def operated_by(self, agent_id: uuid.UUID) -> list[uuid.UUID]:
        """Ids of the threads whose fixed operator is this agent."""
        ...

    async def target(self, thread_id: uuid.UUID) -> AccessTarget | None:
        """The thread with its channel and space (one read), or None when unknown."""
        ...

    async def locked_target(self, thread_id: uuid.UUID) -> AccessTarget | None:
        """`target` under the thread row lock (held until the unit ends), or None.

        For a change of the thread decided on these facts (a close). The lock is the mode
        of `set_state`; the channel is read as committed when the lock was granted, so a
        change that waited for the thread sees a change of the channel made meanwhile.
        """
        ...

    async def post_facts(
        self,
        thread_id: uuid.UUID,
        author_id: uuid.UUID,
        client_msg_id: str,
        take: BucketTake | None = None,
    ) -> PostFacts | None:
        """Everything a message post decides on, in one round trip, under the thread lock.

        Takes the thread row lock (the one `allocate_seq` takes, held until the unit
        ends) before it reads the rest, so the post sees the thread's state and seq as
        they stay until it commits, and a later `allocate_seq` of the unit costs no
        round trip of its own. With `take`, and unless the author stored a message under
        `client_msg_id` already, one token of the author's bucket is taken after the
        thread lock, in the same round trip (the bucket stays locked until the unit
        ends, as with `RateLimitStore.take_token`). The caller decides on the facts in
        its own order: a unit that fails for any reason rolls the take back with it.

        Args:
            thread_id: the thread.
            author_id: the author (whose grants and earlier message are read).
            client_msg_id: the request's idempotency key.
            take: the token to take, or None.

        Returns:
            The facts, or None for an unknown thread.
        """
        ...

    async def token_post_facts(
        self,
        thread_id: uuid.UUID,
        token_hash: bytes,
        client_msg_id: str,
        take: BucketTake | None = None,
    ) -> TokenPostFacts | None:
        """`post_facts` of the principal of a live token, resolved in the same round trip.

        The caller is read as `TokenRepository.resolve` reads it (committed rows only: a
        revoked token is refused from the moment its revocation committed); for an
        unknown or revoked token nothing is locked or taken (ADR 0026).

        Args:
            thread_id: the thread.
            token_hash: the stored form of the request's bearer token.
            client_msg_id: the request's idempotency key.
            take: the token to take, or None.

        Returns:
            The caller and the facts, or None for an unknown or revoked token.
        """
        ...

    async def history_facts(
        self, thread_id: uuid.UUID, reader_id: uuid.UUID, after_seq: int, limit: int
    ) -> HistoryFacts | None:
        """The thread, the reader's grants and a page of its history, in one round trip.

        What `target`, `GrantRepository.for_principal` and `MessageRepository.list_visible`
        answer, read in this order (the page after the thread, so that a short page
        holds every message the reader may see up to the thread's latest_seq) without
        waiting between them. Nothing is locked.

        Args:
            thread_id: the thread.
            reader_id: the reader (its grants; restricted messages: members and author).
            after_seq: exclusive lower bound of the page's thread_seq.
            limit: at most this many messages.

        Returns:
            The facts, or None for an unknown thread.
        """
        ...


class GrantRepository(Protocol):
    """Grants of levels on spaces and channels."""

    async def add(self, grant: Grant) -> None:
        """Store a grant.

        Raises:
            RetriableConflict: for a second grant of the same principal on the same
                resource (a concurrent unit stored it first: rerun, then change it).
        """
        ...

    async def get(self, grant_id: uuid.UUID) -> Grant | None:
        """The grant, or None."""
        ...

    async def lock(self, grant_id: uuid.UUID) -> Grant | None:
        """The grant, read under an update lock held until the unit ends, or None.

        Of two revocations of one grant, the second waits and then finds none.
        """
        ...

    async def delete(self, grant_id: uuid.UUID) -> None:
        """Remove a grant."""
        ...

    async def for_principal(self, principal_id: uuid.UUID) -> list[Grant]:
        """Every grant of a principal."""
        ...

    async def prefetch(self, principal_ids: Sequence[uuid.UUID]) -> None:
        """Start reading the grants of principals the unit is about to need, without waiting.

        One read for all of them: a later `for_principal` of any of them then costs no
        round trip of its own when the read arrived with another statement's (ADR 0022);
        a grant written by the unit in between drops the read. Without a later read it
        is wasted work, never a wrong answer.

        Args:
            principal_ids: the principals (duplicates and ones already read are fine).
        """
        ...

    async def lock_pair(
        self, principal_id: uuid.UUID, resource_kind: ResourceKind, resource_id: uuid.UUID
    ) -> Grant | None:
        """The grant of a principal on a resource, locked until the unit ends, or None.

        Two units changing the grant of one pair serialize here; two units creating it
        at once meet at the unique key, and the loser's unit is rerun
        (`RetriableConflict`), which then finds the winner's grant.
        """
        ...

    async def set_level(self, grant_id: uuid.UUID, level: Level) -> None:
        """Change the level of an existing grant (same id)."""
        ...

    async def list(
        self, *, principal_id: uuid.UUID | None = None, resource_id: uuid.UUID | None = None
    ) -> list[Grant]:
        """The grants matching both filters (None: any), by id."""
        ...
