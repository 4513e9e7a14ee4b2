"""Runs, their follow-ups, and the agents' personal feeds."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Protocol

import attrs

from turnkeeper.application.ports.tokens import ResolvedToken
from turnkeeper.domain.events import Event
from turnkeeper.domain.followups import FollowupMode, FollowupState, OpenFollowup
from turnkeeper.domain.runs import AnswerRun, Run
from turnkeeper.domain.trigger_report import TriggerLinks


@attrs.frozen(kw_only=True)
class TokenRun:
    """A run locked for a caller known by a bearer token only (`RunRepository.lock_for_token`).

    Attributes:
        caller: the live token and its principal.
        run: the run, locked FOR UPDATE until the unit ends, or None for an unknown run.
    """

    caller: ResolvedToken
    run: Run | None


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
        """The run, locked FOR UPDATE until the unit ends, or None.

        Its thread's row is locked first (the order of every unit: thread, then run), so
        that the end of a run, which may append a follow-on run's anchor to the thread,
        never holds the run while an acceptance holds the thread and waits for the run.
        """
        ...

    async def lock_active(self, run_id: uuid.UUID) -> Run | None:
        """The run as `lock` locks it while it has not ended, else None (no lock taken).

        None for an unknown run or one that ended (it never moves again). For readers of
        many runs' events (the agent feed), which skip ended runs: taking their threads
        held people's posts and deadlocked two readers. A run that ends while its lock is
        awaited comes back ended.
        """
        ...

    async def lock_for_token(self, run_id: uuid.UUID, token_hash: bytes) -> TokenRun | None:
        """`lock` for the caller of a live token, resolved in the same round trip.

        The caller is read as `TokenRepository.resolve` reads it (committed rows only: a
        revoked token is refused from the moment its revocation committed); for an
        unknown or revoked token no run is locked (ADR 0026).

        Args:
            run_id: the run.
            token_hash: the stored form of the request's bearer token.

        Returns:
            The caller and the locked run, or None for an unknown or revoked token.
        """
        ...

    async def lock_active_in_thread(self, thread_id: uuid.UUID) -> Run | None:
        """The thread's active run locked FOR UPDATE, or None."""
        ...

    async def lock_for_answer(self, run_id: uuid.UUID) -> AnswerRun | None:
        """``LockRunForAnswer``: the run's facts under FOR SHARE, or None."""
        ...

    async def update(self, run: Run) -> None:
        """Store every mutable attribute of a run (state, reason, version, cancel, jti).

        Called under the unit's lock of the run row (the run exists); the write may
        travel with the unit's next statement instead of waiting on its own.
        """
        ...

    async def lock_queued_before(self, before: datetime, limit: int) -> list[Run]:
        """Queued runs created before `before`, for the queued expiry job.

        Rows are taken FOR UPDATE SKIP LOCKED, oldest first, so that several job runners
        never take the same run, each after its thread's row, also SKIP LOCKED (the
        order of `lock`): a run whose thread is busy waits for the next pass. Likewise
        for the other job queries.
        """
        ...

    async def lock_cancel_unconfirmed_before(self, before: datetime, limit: int) -> list[Run]:
        """Running or waiting runs whose cancel was requested before `before`."""
        ...

    async def lock_running_unchanged_before(self, before: datetime, limit: int) -> list[Run]:
        """Running runs whose last change is older than `before`, for the stall check."""
        ...

    async def lock_active_of_agent(self, agent_id: uuid.UUID, limit: int) -> list[Run]:
        """Active runs of an agent, locked FOR UPDATE SKIP LOCKED."""
        ...

    async def lock_active_of_disabled_agents(self, limit: int) -> list[Run]:
        """Active runs whose agent is disabled, locked FOR UPDATE SKIP LOCKED."""
        ...


class FollowupRepository(Protocol):
    """Follow-up rows of runs (one row per message at most)."""

    async def add(
        self, run_id: uuid.UUID, message_id: uuid.UUID, at: datetime, mode: FollowupMode
    ) -> None:
        """Store a queued follow-up of a run, with the run and mode of its acceptance."""
        ...

    async def trigger_links(self, message_id: uuid.UUID) -> TriggerLinks:
        """What the store links to a message, for its trigger report.

        Its acceptance as a follow-up (the run it was accepted into and the mode recorded
        then) and the run it triggered, if any.
        """
        ...

    async def states(self, run_id: uuid.UUID) -> dict[uuid.UUID, FollowupState]:
        """Every follow-up of a run by message id (for the run document)."""
        ...

    async def start_states(
        self, run_id: uuid.UUID
    ) -> Callable[[], Awaitable[dict[uuid.UUID, FollowupState]]]:
        """`states`, queued in the unit's pipeline as of now; read with what it returns.

        Awaiting the reader waits for the read (with the unit's next round trip): queued
        last and read after the commit (`Transactor.run_then`), it leaves with the COMMIT.

        Args:
            run_id: the run.

        Returns:
            The reader of the states, as `states` would have returned them here.
        """
        ...

    async def lock(self, run_id: uuid.UUID, message_id: uuid.UUID) -> FollowupState | None:
        """The state of one follow-up of a run, locked FOR UPDATE; None when absent."""
        ...

    async def lock_many(
        self, run_id: uuid.UUID, message_ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, FollowupState]:
        """The states of some follow-ups of a run, locked FOR UPDATE in message_id order.

        One statement whatever their number; a message that is no follow-up of the run
        is absent from the answer.
        """
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


@attrs.frozen(kw_only=True)
class TokenFeed:
    """A poll's first round trip for a caller known by a bearer token only.

    Attributes:
        caller: the live token and its principal.
        cursor: the caller's cursor, locked for the unit; None when the caller is not an
            agent (nothing was created or locked for it).
        events: the caller's first page (empty when it is not an agent, or when no page
            was read: `AgentFeedRepository.lock_cursor_for_token`).
    """

    caller: ResolvedToken
    cursor: AgentCursor | None
    events: list[Event]


class AgentFeedRepository(Protocol):
    """Personal events of agents and their delivery cursors."""

    async def read(self, audience_id: uuid.UUID, after: int, limit: int) -> list[Event]:
        """Personal events of an agent after a seq (commit-ordered, never skipping)."""
        ...

    async def lock_cursor(self, agent_id: uuid.UUID) -> AgentCursor:
        """The agent's cursor, locked for this unit (a fresh one when none is stored)."""
        ...

    async def lock_cursor_and_read(
        self, agent_id: uuid.UUID, after: int | None, limit: int
    ) -> tuple[AgentCursor, list[Event]]:
        """`lock_cursor`, then `read` of the first page after it, in one round trip.

        Args:
            agent_id: the agent.
            after: the seq the page starts after; None for the cursor's acknowledged seq.
            limit: at most this many events.

        Returns:
            The locked cursor and the page, as the two calls one after the other would.
        """
        ...

    async def lock_cursor_and_read_for_token(
        self, token_hash: bytes, after: int | None, limit: int
    ) -> TokenFeed | None:
        """`lock_cursor_and_read` for the caller of a live token, in the same round trip.

        The caller is read as `TokenRepository.resolve` reads it (ADR 0026); the cursor is
        created and locked only when the caller is an agent.

        Args:
            token_hash: the stored form of the request's bearer token.
            after: the seq the page starts after; None for the cursor's acknowledged seq.
            limit: at most this many events.

        Returns:
            The caller, its cursor and its first page, or None for an unknown or revoked
            token.
        """
        ...

    async def lock_cursor_for_token(self, token_hash: bytes) -> TokenFeed | None:
        """`lock_cursor` for the caller of a live token, in one round trip (no page).

        Args:
            token_hash: the stored form of the request's bearer token.

        Returns:
            The caller and its cursor (None when it is not an agent), or None for an
            unknown or revoked token.
        """
        ...

    async def save_cursor(self, agent_id: uuid.UUID, cursor: AgentCursor) -> None:
        """Store the agent's cursor."""
        ...

    async def set_capabilities(self, agent_id: uuid.UUID, followups: str | None) -> None:
        """Store the capability an agent reported by heartbeat."""
        ...
