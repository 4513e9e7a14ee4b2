"""A unit of work that remembers what it wrote, for the telemetry of committed changes.

`RecordingUnit` wraps the unit the `Transactor` opens for one attempt: every repository
is the unit's own, except that the event log, the runs, the follow-ups and the audit
also note what the use case appended, added, updated or denied. The `Transactor` reads
`RecordingUnit.changes` only after the commit succeeded; an attempt that rolls back or
is retried is dropped with its records, so nothing is ever reported twice or for a
change that did not happen.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from turnkeeper.application.ports import (
    AdminChange,
    AgentFeedRepository,
    AuditLog,
    ChannelRepository,
    DenialRecord,
    EventLog,
    FollowupRepository,
    FreshnessRepository,
    GrantRepository,
    MessageRepository,
    PrincipalRepository,
    RateLimitStore,
    ReaderScope,
    RunRepository,
    SpaceRepository,
    ThreadRepository,
    TokenRepository,
    UnitOfWork,
)
from turnkeeper.application.telemetry import CommittedChanges, DenialFact, FollowupChange
from turnkeeper.domain.events import Event, NewEvent
from turnkeeper.domain.followups import FollowupState, OpenFollowup
from turnkeeper.domain.runs import AnswerRun, Run

#: The outcome of follow-ups that move to the follow-on run of their ended run.
MOVED = "moved"


class _Records:
    """What one attempt wrote, in order."""

    def __init__(self) -> None:
        self.events: list[NewEvent] = []
        self.runs_opened: list[Run] = []
        self.runs_updated: list[Run] = []
        self.followups: list[FollowupChange] = []
        self.denials: list[DenialFact] = []


class _RecordingEvents:
    """The unit's event log, noting every append."""

    def __init__(self, inner: EventLog, records: _Records) -> None:
        self._inner = inner
        self._records = records

    async def append(self, event: NewEvent) -> None:
        """Append and note the event."""
        await self._inner.append(event)
        self._records.events.append(event)

    async def read(self, scope: ReaderScope, after: int, limit: int) -> list[Event]:
        """The unit's own read."""
        return await self._inner.read(scope, after, limit)


class _RecordingRuns:
    """The unit's runs, noting every add and update."""

    def __init__(self, inner: RunRepository, records: _Records) -> None:
        self._inner = inner
        self._records = records

    async def add(self, run: Run) -> None:
        """Add and note the run."""
        await self._inner.add(run)
        self._records.runs_opened.append(run)

    async def update(self, run: Run) -> None:
        """Update and note the stored state."""
        await self._inner.update(run)
        self._records.runs_updated.append(run)

    async def get(self, run_id: uuid.UUID) -> Run | None:
        """The unit's own read."""
        return await self._inner.get(run_id)

    async def lock(self, run_id: uuid.UUID) -> Run | None:
        """The unit's own lock."""
        return await self._inner.lock(run_id)

    async def lock_active_in_thread(self, thread_id: uuid.UUID) -> Run | None:
        """The unit's own lock."""
        return await self._inner.lock_active_in_thread(thread_id)

    async def lock_for_answer(self, run_id: uuid.UUID) -> AnswerRun | None:
        """The unit's own lock."""
        return await self._inner.lock_for_answer(run_id)

    async def lock_due(
        self, *, states: Sequence[str], before: datetime, field: str, limit: int
    ) -> list[Run]:
        """The unit's own lock."""
        return await self._inner.lock_due(states=states, before=before, field=field, limit=limit)

    async def lock_active_of_agent(self, agent_id: uuid.UUID, limit: int) -> list[Run]:
        """The unit's own lock."""
        return await self._inner.lock_active_of_agent(agent_id, limit)

    async def lock_active_of_disabled_agents(self, limit: int) -> list[Run]:
        """The unit's own lock."""
        return await self._inner.lock_active_of_disabled_agents(limit)


class _RecordingFollowups:
    """The unit's follow-ups, noting every outcome."""

    def __init__(self, inner: FollowupRepository, records: _Records) -> None:
        self._inner = inner
        self._records = records

    async def add(self, run_id: uuid.UUID, message_id: uuid.UUID, at: datetime) -> None:
        """Add and note a queued follow-up."""
        await self._inner.add(run_id, message_id, at)
        self._records.followups.append(FollowupChange(outcome=FollowupState.QUEUED.value, count=1))

    async def set_states(
        self,
        run_id: uuid.UUID,
        message_ids: Sequence[uuid.UUID],
        state: FollowupState,
        at: datetime,
    ) -> None:
        """Set and note the outcome of every follow-up named."""
        await self._inner.set_states(run_id, message_ids, state, at)
        if message_ids:
            self._records.followups.append(
                FollowupChange(outcome=state.value, count=len(message_ids))
            )

    async def move(
        self,
        run_id: uuid.UUID,
        message_ids: Sequence[uuid.UUID],
        new_run_id: uuid.UUID,
        at: datetime,
    ) -> None:
        """Move and note the follow-ups as moved."""
        await self._inner.move(run_id, message_ids, new_run_id, at)
        if message_ids:
            self._records.followups.append(FollowupChange(outcome=MOVED, count=len(message_ids)))

    async def states(self, run_id: uuid.UUID) -> dict[uuid.UUID, FollowupState]:
        """The unit's own read."""
        return await self._inner.states(run_id)

    async def lock(self, run_id: uuid.UUID, message_id: uuid.UUID) -> FollowupState | None:
        """The unit's own lock."""
        return await self._inner.lock(run_id, message_id)

    async def lock_open(self, run_id: uuid.UUID) -> list[OpenFollowup]:
        """The unit's own lock."""
        return await self._inner.lock_open(run_id)


class _RecordingAudit:
    """The unit's audit log, noting every denial."""

    def __init__(self, inner: AuditLog, records: _Records) -> None:
        self._inner = inner
        self._records = records

    async def record_denial(
        self, principal_id: uuid.UUID, action: str, reason: str, window_start: datetime
    ) -> None:
        """Record and note the denial."""
        await self._inner.record_denial(principal_id, action, reason, window_start)
        self._records.denials.append(DenialFact(action=action, reason=reason))

    async def denials(self, principal_id: uuid.UUID) -> list[DenialRecord]:
        """The unit's own read."""
        return await self._inner.denials(principal_id)

    async def record_change(self, change: AdminChange) -> None:
        """Record an administrative change (no telemetry of its own)."""
        await self._inner.record_change(change)

    async def changes(self, subject_id: uuid.UUID) -> list[AdminChange]:
        """The unit's own read."""
        return await self._inner.changes(subject_id)


class RecordingUnit:
    """A `UnitOfWork` that notes what the use case wrote through it.

    Args:
        inner: the unit opened for this attempt.
    """

    def __init__(self, inner: UnitOfWork) -> None:
        self._inner = inner
        self._records = _Records()
        self._events = _RecordingEvents(inner.events, self._records)
        self._runs: _RecordingRuns | None = None
        self._followups = _RecordingFollowups(inner.followups, self._records)
        self._audit = _RecordingAudit(inner.audit, self._records)

    @property
    def changes(self) -> CommittedChanges:
        """What the attempt wrote so far (read it after the commit)."""
        records = self._records
        return CommittedChanges(
            events=tuple(records.events),
            runs_opened=tuple(records.runs_opened),
            runs_updated=tuple(records.runs_updated),
            followups=tuple(records.followups),
            denials=tuple(records.denials),
        )

    @property
    def principals(self) -> PrincipalRepository:
        """The unit's principals."""
        return self._inner.principals

    @property
    def tokens(self) -> TokenRepository:
        """The unit's API tokens."""
        return self._inner.tokens

    @property
    def spaces(self) -> SpaceRepository:
        """The unit's spaces."""
        return self._inner.spaces

    @property
    def channels(self) -> ChannelRepository:
        """The unit's channels."""
        return self._inner.channels

    @property
    def threads(self) -> ThreadRepository:
        """The unit's threads."""
        return self._inner.threads

    @property
    def grants(self) -> GrantRepository:
        """The unit's grants."""
        return self._inner.grants

    @property
    def messages(self) -> MessageRepository:
        """The unit's messages."""
        return self._inner.messages

    @property
    def events(self) -> EventLog:
        """The unit's event log, noting appends."""
        return self._events

    @property
    def audit(self) -> AuditLog:
        """The unit's audit log, noting denials."""
        return self._audit

    @property
    def buckets(self) -> RateLimitStore:
        """The unit's rate-limit buckets."""
        return self._inner.buckets

    @property
    def runs(self) -> RunRepository:
        """The unit's runs, noting adds and updates."""
        # Built on first use: a unit whose adapter has no runs repository wired fails
        # only when a use case needs one, as the unit itself would.
        if self._runs is None:
            self._runs = _RecordingRuns(self._inner.runs, self._records)
        return self._runs

    @property
    def agent_feed(self) -> AgentFeedRepository:
        """The unit's agent feed."""
        return self._inner.agent_feed

    @property
    def followups(self) -> FollowupRepository:
        """The unit's follow-ups, noting outcomes."""
        return self._followups

    @property
    def freshness(self) -> FreshnessRepository:
        """The unit's freshness allocator."""
        return self._inner.freshness

    async def commit(self) -> None:
        """Commit the unit it wraps."""
        await self._inner.commit()


__all__ = ["MOVED", "RecordingUnit"]
