"""Repositories that note what a unit of work wrote, for the telemetry of committed changes.

`turnkeeper.application.tracking.TrackedUnit` wraps the unit the `Transactor` opens for
one attempt with these: the event log, the runs, the follow-ups and the audit note what
the use case appended, added, updated or denied in a `ChangeRecords`. The `Transactor`
reads `ChangeRecords.changes` only after the commit succeeded; an attempt that rolls back
or is retried is dropped with its records, so nothing is ever reported twice or for a
change that did not happen.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

from turnkeeper.application.ports import (
    AdminChange,
    AuditLog,
    DenialRecord,
    EventLog,
    FollowupRepository,
    ReaderScope,
    RunRepository,
    TokenRun,
)
from turnkeeper.application.ports.audit import DeniedAction
from turnkeeper.application.telemetry import CommittedChanges, DenialFact, FollowupChange
from turnkeeper.domain.events import Event, NewEvent
from turnkeeper.domain.followups import FollowupMode, FollowupState, OpenFollowup
from turnkeeper.domain.runs import AnswerRun, Run
from turnkeeper.domain.trigger_report import AcceptedFollowup, TriggerLinks

#: The outcome of follow-ups that move to the follow-on run of their ended run.
MOVED = "moved"


class ChangeRecords:
    """What one attempt wrote, in order."""

    def __init__(self) -> None:
        self.events: list[NewEvent] = []
        self.runs_opened: list[Run] = []
        self.runs_updated: list[Run] = []
        self.followups: list[FollowupChange] = []
        self.denials: list[DenialFact] = []
        #: The follow-ups accepted, by message: the run and the mode of the acceptance.
        self.accepted: dict[uuid.UUID, AcceptedFollowup] = {}

    def links_written(self, message_id: uuid.UUID) -> TriggerLinks:
        """What this attempt linked to a message: the run it opened, its acceptance.

        Args:
            message_id: a message the attempt wrote.

        Returns:
            The links as the attempt stored them (the store answers the same after
            commit: a run's triggering message and a follow-up's acceptance never change).
        """
        opened = sorted(r.id for r in self.runs_opened if r.triggering_message_id == message_id)
        return TriggerLinks(
            opened_run_id=opened[0] if opened else None,
            followup=self.accepted.get(message_id),
        )

    @property
    def changes(self) -> CommittedChanges:
        """What the attempt wrote so far (read it after the commit)."""
        return CommittedChanges(
            events=tuple(self.events),
            runs_opened=tuple(self.runs_opened),
            runs_updated=tuple(self.runs_updated),
            followups=tuple(self.followups),
            denials=tuple(self.denials),
        )


class RecordingEvents:
    """The unit's event log, noting every append."""

    def __init__(self, inner: EventLog, records: ChangeRecords) -> None:
        self._inner = inner
        self._records = records

    async def append(self, event: NewEvent) -> None:
        """Append and note the event."""
        await self._inner.append(event)
        self._records.events.append(event)

    async def read(self, scope: ReaderScope, after: int, limit: int) -> list[Event]:
        """The unit's own read."""
        return await self._inner.read(scope, after, limit)


class RecordingRuns:
    """The unit's runs, noting every add and update."""

    def __init__(self, inner: RunRepository, records: ChangeRecords) -> None:
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

    async def lock_active(self, run_id: uuid.UUID) -> Run | None:
        """The unit's own lock."""
        return await self._inner.lock_active(run_id)

    async def lock_for_token(self, run_id: uuid.UUID, token_hash: bytes) -> TokenRun | None:
        """The unit's own lock."""
        return await self._inner.lock_for_token(run_id, token_hash)

    async def lock_active_in_thread(self, thread_id: uuid.UUID) -> Run | None:
        """The unit's own lock."""
        return await self._inner.lock_active_in_thread(thread_id)

    async def lock_for_answer(self, run_id: uuid.UUID) -> AnswerRun | None:
        """The unit's own lock."""
        return await self._inner.lock_for_answer(run_id)

    async def lock_queued_before(self, before: datetime, limit: int) -> list[Run]:
        """The unit's own lock."""
        return await self._inner.lock_queued_before(before, limit)

    async def lock_cancel_unconfirmed_before(self, before: datetime, limit: int) -> list[Run]:
        """The unit's own lock."""
        return await self._inner.lock_cancel_unconfirmed_before(before, limit)

    async def lock_running_unchanged_before(self, before: datetime, limit: int) -> list[Run]:
        """The unit's own lock."""
        return await self._inner.lock_running_unchanged_before(before, limit)

    async def lock_active_of_agent(self, agent_id: uuid.UUID, limit: int) -> list[Run]:
        """The unit's own lock."""
        return await self._inner.lock_active_of_agent(agent_id, limit)

    async def lock_active_of_disabled_agents(self, limit: int) -> list[Run]:
        """The unit's own lock."""
        return await self._inner.lock_active_of_disabled_agents(limit)


class RecordingFollowups:
    """The unit's follow-ups, noting every outcome."""

    def __init__(self, inner: FollowupRepository, records: ChangeRecords) -> None:
        self._inner = inner
        self._records = records

    async def add(
        self, run_id: uuid.UUID, message_id: uuid.UUID, at: datetime, mode: FollowupMode
    ) -> None:
        """Add and note a queued follow-up."""
        await self._inner.add(run_id, message_id, at, mode)
        self._records.followups.append(FollowupChange(outcome=FollowupState.QUEUED.value, count=1))
        self._records.accepted[message_id] = AcceptedFollowup(run_id=run_id, mode=mode)

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

    async def start_states(
        self, run_id: uuid.UUID
    ) -> Callable[[], Awaitable[dict[uuid.UUID, FollowupState]]]:
        """The unit's own read."""
        return await self._inner.start_states(run_id)

    async def lock(self, run_id: uuid.UUID, message_id: uuid.UUID) -> FollowupState | None:
        """The unit's own lock."""
        return await self._inner.lock(run_id, message_id)

    async def lock_many(
        self, run_id: uuid.UUID, message_ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, FollowupState]:
        """The unit's own lock."""
        return await self._inner.lock_many(run_id, message_ids)

    async def lock_open(self, run_id: uuid.UUID) -> list[OpenFollowup]:
        """The unit's own lock."""
        return await self._inner.lock_open(run_id)

    async def trigger_links(self, message_id: uuid.UUID) -> TriggerLinks:
        """The unit's own read."""
        return await self._inner.trigger_links(message_id)


class RecordingAudit:
    """The unit's audit log, noting every denial."""

    def __init__(self, inner: AuditLog, records: ChangeRecords) -> None:
        self._inner = inner
        self._records = records

    async def record_denial(
        self, principal_id: uuid.UUID, action: DeniedAction, reason: str, window_start: datetime
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


__all__ = [
    "MOVED",
    "ChangeRecords",
    "RecordingAudit",
    "RecordingEvents",
    "RecordingFollowups",
    "RecordingRuns",
]
