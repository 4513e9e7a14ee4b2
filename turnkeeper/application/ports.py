"""Ports: the protocols the services need, satisfied by the memory and PostgreSQL adapters.

Every repository lives inside a `UnitOfWork`; nothing is stored until `commit()`, and a
unit left without commit rolls back. Reads inside a unit see the unit's own writes.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Protocol

import attrs

from turnkeeper.domain.authorization import AccessTarget
from turnkeeper.domain.events import Event, NewEvent
from turnkeeper.domain.followups import FollowupState, OpenFollowup
from turnkeeper.domain.messaging import Message, TriggerState
from turnkeeper.domain.runs import AnswerRun, Run, TriggerKind
from turnkeeper.domain.world import Channel, Grant, Principal, Space, Thread, ThreadState


class Clock(Protocol):
    """The only source of time."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


class IdGenerator(Protocol):
    """The only source of ids."""

    def new_id(self) -> uuid.UUID:
        """A fresh UUIDv7."""
        ...


class PrincipalRepository(Protocol):
    """Principals and their API tokens (stored as hashes only)."""

    async def add(self, principal: Principal) -> None:
        """Store a new principal.

        Raises:
            DuplicateKey: when the handle is taken.
        """
        ...

    async def get(self, principal_id: uuid.UUID) -> Principal | None:
        """The principal, or None."""
        ...

    async def get_many(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Principal]:
        """The principals among `ids` that exist, by id."""
        ...

    async def update(self, principal: Principal) -> None:
        """Store changed attributes of an existing principal."""
        ...

    async def add_token(self, principal_id: uuid.UUID, token_hash: bytes, at: datetime) -> None:
        """Store the hash of a new API token for a principal."""
        ...

    async def by_token_hash(self, token_hash: bytes) -> Principal | None:
        """The principal owning a token hash, or None."""
        ...

    async def owner(self) -> Principal | None:
        """The owner principal, if one exists."""
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

    async def update(self, channel: Channel) -> None:
        """Store changed attributes of a channel."""
        ...

    async def list_all(self) -> list[Channel]:
        """Every channel."""
        ...


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

    async def set_state(self, thread_id: uuid.UUID, state: ThreadState) -> None:
        """Open or close a thread."""
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
        """Remember that the thread holds a restricted message."""
        ...

    async def operated_by(self, agent_id: uuid.UUID) -> list[uuid.UUID]:
        """Ids of the threads whose fixed operator is this agent."""
        ...

    async def target(self, thread_id: uuid.UUID) -> AccessTarget | None:
        """The thread with its channel and space (one read), or None when unknown."""
        ...


class GrantRepository(Protocol):
    """Grants of levels on spaces and channels."""

    async def add(self, grant: Grant) -> None:
        """Store a grant.

        Raises:
            DuplicateKey: for a second grant of the same principal on the same resource.
        """
        ...

    async def get(self, grant_id: uuid.UUID) -> Grant | None:
        """The grant, or None."""
        ...

    async def delete(self, grant_id: uuid.UUID) -> None:
        """Remove a grant."""
        ...

    async def for_principal(self, principal_id: uuid.UUID) -> list[Grant]:
        """Every grant of a principal."""
        ...


class MessageRepository(Protocol):
    """Messages."""

    async def add(self, message: Message) -> None:
        """Store a new message.

        Raises:
            RetriableConflict: when (author, client_msg_id) was taken by a concurrent unit.
        """
        ...

    async def get(self, message_id: uuid.UUID) -> Message | None:
        """The message, or None."""
        ...

    async def by_client_id(self, author_id: uuid.UUID, client_msg_id: str) -> Message | None:
        """The message an author stored under a client id, or None."""
        ...

    async def list_visible(
        self, thread_id: uuid.UUID, reader_id: uuid.UUID, after_seq: int, limit: int
    ) -> list[Message]:
        """Messages after a seq that the reader may see, oldest first, at most `limit`."""
        ...

    async def set_trigger_state(
        self, message_id: uuid.UUID, state: TriggerState, reason: str | None
    ) -> Message:
        """Change a message's trigger_state (version + 1) and return the new message."""
        ...

    async def set_trigger_states(
        self, message_ids: Sequence[uuid.UUID], state: TriggerState, reason: str | None
    ) -> list[Message]:
        """Set the trigger_state of several messages in one statement.

        Messages already in that state with that reason are not changed.

        Returns:
            The changed messages (version + 1), ordered by thread_seq then id.
        """
        ...


@attrs.frozen(kw_only=True)
class ReaderScope:
    """What a reader of the shared event feed may see.

    Attributes:
        reader_id: the reading principal (for restricted messages).
        everything: the owner reads every channel.
        channel_ids: channels with read.
        thread_ids: single threads with read (threads an agent operates).
    """

    reader_id: uuid.UUID
    everything: bool = False
    channel_ids: frozenset[uuid.UUID] = frozenset()
    thread_ids: frozenset[uuid.UUID] = frozenset()


class EventLog(Protocol):
    """The append-only event log with a global seq in commit order."""

    async def append(self, event: NewEvent) -> None:
        """Append an event; it becomes visible, with its seq, when the unit commits."""
        ...

    async def read(self, scope: ReaderScope, after: int, limit: int) -> list[Event]:
        """Shared (non-personal) events after a cursor that the scope may read.

        Only events that no running transaction can precede are returned, so a cursor
        never skips an event that commits later.
        """
        ...


@attrs.frozen(kw_only=True)
class DenialRecord:
    """One aggregated audit row.

    Attributes:
        principal_id: who was denied.
        action: the action.
        reason: why.
        window_start: the start of the aggregation window.
        count: denials in the window.
    """

    principal_id: uuid.UUID
    action: str
    reason: str
    window_start: datetime
    count: int


class AuditLog(Protocol):
    """Audit of authorization denials, aggregated per window."""

    async def record_denial(
        self, principal_id: uuid.UUID, action: str, reason: str, window_start: datetime
    ) -> None:
        """Count a denial in the row of its principal, action, reason and window."""
        ...

    async def denials(self, principal_id: uuid.UUID) -> list[DenialRecord]:
        """The aggregated denials of a principal, oldest window first."""
        ...


class RateLimitStore(Protocol):
    """Stored token buckets per principal and class."""

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

        The rule is `turnkeeper.domain.ratelimit.take_token`'s; the bucket stays locked until the
        unit ends, so concurrent takes of one principal serialize, and a principal's
        first take creates a full bucket.

        Args:
            principal_id: the principal.
            limit_class: the class, for example ``rl.message``.
            now: the time of the take.
            burst: the bucket's capacity.
            per_minute: its refill rate.

        Returns:
            None when a token was taken; otherwise whole seconds until one is there (the
            caller must roll the unit back: what a refusal stored is not kept).
        """
        ...


class RunRepository(Protocol):
    """Runs; at most one active run per thread (a partial unique index decides)."""

    async def add(self, run: Run) -> None:
        """Store a new run.

        Raises:
            RetriableConflict: when a concurrent unit opened an active run in the thread.
        """
        ...

    async def get(self, run_id: uuid.UUID) -> Run | None:
        """The run, or None (no lock)."""
        ...

    async def lock(self, run_id: uuid.UUID) -> Run | None:
        """The run, locked FOR UPDATE until the unit ends, or None."""
        ...

    async def lock_active_in_thread(self, thread_id: uuid.UUID) -> Run | None:
        """The thread's active run locked FOR UPDATE, or None."""
        ...

    async def lock_for_answer(self, run_id: uuid.UUID) -> AnswerRun | None:
        """``LockRunForAnswer``: the run's facts under FOR SHARE, or None."""
        ...

    async def update(self, run: Run) -> None:
        """Store every mutable attribute of a run (state, reason, version, cancel, jti)."""
        ...

    async def lock_due(
        self, *, states: Sequence[str], before: datetime, field: str, limit: int
    ) -> list[Run]:
        """Runs in `states` whose `field` is older than `before`, locked for a job.

        `field` is created_at, updated_at or cancel_requested_at; rows are taken FOR
        UPDATE SKIP LOCKED so that several job runners never take the same run.
        """
        ...

    async def lock_active_of_agent(self, agent_id: uuid.UUID, limit: int) -> list[Run]:
        """Active runs of an agent, locked FOR UPDATE SKIP LOCKED."""
        ...

    async def lock_active_of_disabled_agents(self, limit: int) -> list[Run]:
        """Active runs whose agent is disabled, locked FOR UPDATE SKIP LOCKED."""
        ...


class FollowupRepository(Protocol):
    """Follow-up rows of runs (one row per message at most)."""

    async def add(self, run_id: uuid.UUID, message_id: uuid.UUID, at: datetime) -> None:
        """Store a queued follow-up of a run."""
        ...

    async def states(self, run_id: uuid.UUID) -> dict[uuid.UUID, FollowupState]:
        """Every follow-up of a run by message id (for the run document)."""
        ...

    async def lock(self, run_id: uuid.UUID, message_id: uuid.UUID) -> FollowupState | None:
        """The state of one follow-up of a run, locked FOR UPDATE; None when absent."""
        ...

    async def lock_open(self, run_id: uuid.UUID) -> list[OpenFollowup]:
        """The run's queued and delivered follow-ups, locked in message_id order."""
        ...

    async def set_states(
        self,
        run_id: uuid.UUID,
        message_ids: Sequence[uuid.UUID],
        state: FollowupState,
        at: datetime,
    ) -> None:
        """Set the state of some follow-ups of a run (one statement)."""
        ...

    async def move(
        self,
        run_id: uuid.UUID,
        message_ids: Sequence[uuid.UUID],
        new_run_id: uuid.UUID,
        at: datetime,
    ) -> None:
        """Make follow-ups of a run queued follow-ups of another run (one statement)."""
        ...


@attrs.frozen(kw_only=True)
class AgentCursor:
    """Where an agent is in its personal event feed.

    Attributes:
        acked_seq: everything up to here was acknowledged.
        delivered_seq: everything up to here was delivered at least once.
    """

    acked_seq: int = 0
    delivered_seq: int = 0


class AgentFeedRepository(Protocol):
    """Personal events of agents and their delivery cursors."""

    async def read(self, audience_id: uuid.UUID, after: int, limit: int) -> list[Event]:
        """Personal events of an agent after a seq (commit-ordered, never skipping)."""
        ...

    async def lock_cursor(self, agent_id: uuid.UUID) -> AgentCursor:
        """The agent's cursor, locked for this unit (a fresh one when none is stored)."""
        ...

    async def save_cursor(self, agent_id: uuid.UUID, cursor: AgentCursor) -> None:
        """Store the agent's cursor."""
        ...

    async def set_capabilities(self, agent_id: uuid.UUID, followups: str | None) -> None:
        """Store the capability an agent reported by heartbeat."""
        ...


@attrs.frozen(kw_only=True)
class InvocationClaims:
    """The claims of an invocation token.

    Attributes:
        run_id: the run the token is for.
        message_id: the message it was delivered for.
        trigger_kind: message or followup.
        sub: the author the run acts for.
        jti: unique id of this token.
        exp: expiry.
    """

    run_id: uuid.UUID
    message_id: uuid.UUID
    trigger_kind: TriggerKind
    sub: uuid.UUID
    jti: str
    exp: datetime


class TokenSigner(Protocol):
    """Signs and verifies invocation tokens."""

    def sign(self, claims: InvocationClaims) -> str:
        """A signed token carrying the claims."""
        ...

    def verify(self, token: str, now: datetime) -> InvocationClaims:
        """The claims of a valid token.

        Raises:
            InvalidToken: malformed, wrong signature, or expired at `now`.
        """
        ...


class UnitOfWork(Protocol):
    """One transaction over every repository; rolls back unless `commit` is called."""

    @property
    def principals(self) -> PrincipalRepository:
        """The principals repository of this unit."""
        ...

    @property
    def spaces(self) -> SpaceRepository:
        """The spaces repository of this unit."""
        ...

    @property
    def channels(self) -> ChannelRepository:
        """The channels repository of this unit."""
        ...

    @property
    def threads(self) -> ThreadRepository:
        """The threads repository of this unit."""
        ...

    @property
    def grants(self) -> GrantRepository:
        """The grants repository of this unit."""
        ...

    @property
    def messages(self) -> MessageRepository:
        """The messages repository of this unit."""
        ...

    @property
    def events(self) -> EventLog:
        """The events repository of this unit."""
        ...

    @property
    def audit(self) -> AuditLog:
        """The audit repository of this unit."""
        ...

    @property
    def buckets(self) -> RateLimitStore:
        """The buckets repository of this unit."""
        ...

    @property
    def runs(self) -> RunRepository:
        """The runs repository of this unit."""
        ...

    @property
    def agent_feed(self) -> AgentFeedRepository:
        """The agent feed repository of this unit."""
        ...

    @property
    def followups(self) -> FollowupRepository:
        """The follow-ups repository of this unit."""
        ...

    @property
    def freshness(self) -> FreshnessRepository:
        """The freshness gate's allocator and visibility check of this unit."""
        ...

    async def commit(self) -> None:
        """Make every change of the unit durable, atomically."""
        ...


class UnitOfWorkFactory(Protocol):
    """Opens units of work."""

    def __call__(self) -> AbstractAsyncContextManager[UnitOfWork]:
        """A new unit; leaving the context without commit rolls back."""
        ...

    def read_only(self) -> AbstractAsyncContextManager[UnitOfWork]:
        """A unit for reads only: no locks taken, no writes, nothing to commit.

        Each statement sees the latest committed state, exactly as it would inside a READ
        COMMITTED transaction, so a read-only use case needs no transaction of its own
        (which saves PostgreSQL the BEGIN and COMMIT round trips).
        """
        ...


@attrs.frozen(kw_only=True)
class ThreadFrontier:
    """The raw frontier of a thread as the freshness gate reads it after a missed CAS.

    Attributes:
        latest_seq: ``threads.latest_seq``, the thread_seq of the newest message.
        has_restricted: the thread holds (or held) a message with ``restricted_to``, so
            some of its seqs may be invisible to the sender.
    """

    latest_seq: int
    has_restricted: bool


@attrs.frozen(kw_only=True)
class VisibleWindow:
    """One newest-first batch of the freshness gate's visibility check.

    Attributes:
        examined: how many messages the batch looked at (fewer than asked: the range is
            exhausted).
        lowest_seq: the lowest thread_seq it looked at; None when it looked at none.
        newest_visible_seq: the highest thread_seq in the batch the viewer may see; None
            when it may see none of them.
    """

    examined: int
    lowest_seq: int | None = None
    newest_visible_seq: int | None = None


class FreshnessRepository(Protocol):
    """The freshness gate's compare-and-set allocator and its bounded visibility check."""

    async def compare_and_allocate(self, thread_id: uuid.UUID, seen_seq: int) -> int | None:
        """``CasThreadSeq``: allocate the next thread_seq only if the frontier is `seen_seq`.

        ``UPDATE threads SET latest_seq = latest_seq + 1 WHERE id = $1 AND latest_seq =
        $2 RETURNING latest_seq``. On success the thread row lock is held until the unit
        ends, exactly as `ThreadRepository.allocate_seq` holds it.

        Returns:
            The allocated seq (``seen_seq + 1``), or None when the frontier moved on.
        """
        ...

    async def frontier(self, thread_id: uuid.UUID) -> ThreadFrontier:
        """The thread's committed raw frontier (no lock), read after a missed CAS.

        Raises:
            NotFound: for an unknown thread.
        """
        ...

    async def newest_visible(
        self,
        thread_id: uuid.UUID,
        viewer_id: uuid.UUID,
        *,
        after_seq: int,
        through_seq: int,
        batch: int,
    ) -> VisibleWindow:
        """Look at the `batch` newest messages with a seq in (`after_seq`, `through_seq`].

        Returns:
            What the batch saw: how many rows, the lowest seq, and the newest seq among
            them that the viewer may see (not deleted; public, own, or in the audience).
        """
        ...
