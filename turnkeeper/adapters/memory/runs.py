"""In-memory repositories of the runs capability: runs, the agent feed and follow-ups.

Units of the memory store run one at a time, so a "lock" is a plain read; unique keys
raise the same application errors as the partial and unique indexes of PostgreSQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

import attrs

from turnkeeper.adapters.memory.tables import FollowupRow, Tables, events_after
from turnkeeper.adapters.memory.tokens import MemoryTokenRepository
from turnkeeper.application.errors import DuplicateKey, RetriableConflict
from turnkeeper.application.ports import AgentCursor, TokenFeed, TokenRun
from turnkeeper.domain.events import Event
from turnkeeper.domain.followups import OPEN_STATES, FollowupMode, FollowupState, OpenFollowup
from turnkeeper.domain.runs import AnswerRun, Run, RunState
from turnkeeper.domain.trigger_report import AcceptedFollowup, TriggerLinks

#: The states LockRunsCancelRequestedBefore takes (a cancel asked and not confirmed).
_CANCEL_UNCONFIRMED = frozenset({RunState.RUNNING, RunState.WAITING_INPUT})


class MemoryRunRepository:
    """Runs; satisfies `turnkeeper.application.ports.RunRepository`.

    Args:
        tables: the tables of the unit of work.
    """

    def __init__(self, tables: Tables) -> None:
        self._t = tables

    async def add(self, run: Run) -> None:
        """Insert a run (a second active run of a thread is a retriable race)."""
        if run.state.active and any(
            r.thread_id == run.thread_id and r.state.active for r in self._t.runs.values()
        ):
            # Same contract as the partial unique index of PostgreSQL.
            raise RetriableConflict("runs_one_active_per_thread", reason="unique_race")
        self._t.runs[run.id] = run
        self._t.run_triggers.setdefault(run.triggering_message_id, run.id)

    async def get(self, run_id: uuid.UUID) -> Run | None:
        """The run, or None."""
        return self._t.runs.get(run_id)

    async def lock(self, run_id: uuid.UUID) -> Run | None:
        """The run, or None (units are serialized: no lock to take)."""
        return self._t.runs.get(run_id)

    async def lock_active(self, run_id: uuid.UUID) -> Run | None:
        """The run while it has not ended, or None (units are serialized: no lock)."""
        run = self._t.runs.get(run_id)
        return run if run is not None and run.state.active else None

    async def lock_for_token(self, run_id: uuid.UUID, token_hash: bytes) -> TokenRun | None:
        """The caller of a live token and the run, or None for an unknown or revoked token."""
        caller = await MemoryTokenRepository(self._t).resolve(token_hash)
        if caller is None:
            return None
        return TokenRun(caller=caller, run=self._t.runs.get(run_id))

    async def lock_active_in_thread(self, thread_id: uuid.UUID) -> Run | None:
        """The active run of a thread, or None."""
        return next(
            (r for r in self._t.runs.values() if r.thread_id == thread_id and r.state.active),
            None,
        )

    async def lock_for_answer(self, run_id: uuid.UUID) -> AnswerRun | None:
        """What an agent answer needs of its run, or None."""
        run = self._t.runs.get(run_id)
        if run is None:
            return None
        return AnswerRun(id=run.id, thread_id=run.thread_id, agent_id=run.agent_id, state=run.state)

    async def update(self, run: Run) -> None:
        """Store the new value of a run."""
        self._t.runs[run.id] = run

    async def lock_queued_before(self, before: datetime, limit: int) -> list[Run]:
        """Queued runs created before a time, oldest first.

        As LockRunsCreatedBefore.
        """
        return self._due(
            lambda r: r.created_at, before, limit, lambda r: r.state is RunState.QUEUED
        )

    async def lock_cancel_unconfirmed_before(self, before: datetime, limit: int) -> list[Run]:
        """Running or waiting runs with a cancel asked before a time, earliest ask first.

        As LockRunsCancelRequestedBefore.
        """
        return self._due(
            lambda r: r.cancel_requested_at,
            before,
            limit,
            lambda r: r.state in _CANCEL_UNCONFIRMED and r.cancel_requested,
        )

    async def lock_running_unchanged_before(self, before: datetime, limit: int) -> list[Run]:
        """Running runs not updated since a time, least recently updated first.

        As LockRunsUpdatedBefore.
        """
        return self._due(
            lambda r: r.updated_at, before, limit, lambda r: r.state is RunState.RUNNING
        )

    def _due(
        self,
        key: Callable[[Run], datetime | None],
        before: datetime,
        limit: int,
        matches: Callable[[Run], bool],
    ) -> list[Run]:
        # The order and the LIMIT of the job queries of sql/queries/runs.sql: by the time
        # the window counts from, so a pass (and a batch smaller than the due set) takes
        # the same runs first, and writes their events in the same order, as PostgreSQL.
        # Those queries name no tie-breaker; the id makes ties reproducible here.
        due = [
            (at, r)
            for r in self._t.runs.values()
            if matches(r) and (at := key(r)) is not None and at < before
        ]
        due.sort(key=lambda entry: (entry[0], entry[1].id))
        return [r for _, r in due[:limit]]

    async def lock_active_of_agent(self, agent_id: uuid.UUID, limit: int) -> list[Run]:
        """Active runs of one agent, by id (LockActiveRunsOfAgent)."""
        found = [r for r in self._t.runs.values() if r.agent_id == agent_id and r.state.active]
        return sorted(found, key=lambda r: r.id)[:limit]

    async def lock_active_of_disabled_agents(self, limit: int) -> list[Run]:
        """Active runs of disabled agents, by id (LockActiveRunsOfDisabledAgents)."""
        found = [
            r
            for r in self._t.runs.values()
            if r.state.active
            and (agent := self._t.principals.get(r.agent_id)) is not None
            and not agent.enabled
        ]
        return sorted(found, key=lambda r: r.id)[:limit]


class MemoryAgentFeedRepository:
    """Personal events and delivery cursors; satisfies `AgentFeedRepository`.

    Args:
        tables: the tables of the unit of work.
        horizon: the seq below which events are final (`MemoryStore.horizon`); every
            event is when None.
    """

    def __init__(self, tables: Tables, horizon: Callable[[], int] | None = None) -> None:
        self._t = tables
        self._horizon = horizon

    async def read(self, audience_id: uuid.UUID, after: int, limit: int) -> list[Event]:
        """An agent's personal events after a seq (below the horizon)."""
        bound = None if self._horizon is None else self._horizon()
        found: list[Event] = []
        for event in events_after(self._t.events, after, bound):
            if event.audience_id == audience_id:
                found.append(event)
                if len(found) >= limit:
                    break
        return found

    async def lock_cursor(self, agent_id: uuid.UUID) -> AgentCursor:
        """The agent's cursor (a new one on first use)."""
        return self._t.cursors.get(agent_id, AgentCursor())

    async def lock_cursor_and_read(
        self, agent_id: uuid.UUID, after: int | None, limit: int
    ) -> tuple[AgentCursor, list[Event]]:
        """The cursor and the first page after it (`after`, or its acknowledged seq)."""
        cursor = await self.lock_cursor(agent_id)
        start = cursor.acked_seq if after is None else after
        return cursor, await self.read(agent_id, start, limit)

    async def lock_cursor_and_read_for_token(
        self, token_hash: bytes, after: int | None, limit: int
    ) -> TokenFeed | None:
        """The caller of a live token, its cursor and first page (an agent's only)."""
        found = await self.lock_cursor_for_token(token_hash)
        if found is None or found.cursor is None:
            return found
        start = found.cursor.acked_seq if after is None else after
        return attrs.evolve(found, events=await self.read(found.caller.principal.id, start, limit))

    async def lock_cursor_for_token(self, token_hash: bytes) -> TokenFeed | None:
        """The caller of a live token and its cursor (an agent's only)."""
        caller = await MemoryTokenRepository(self._t).resolve(token_hash)
        if caller is None:
            return None
        if not caller.principal.is_agent:
            return TokenFeed(caller=caller, cursor=None, events=[])
        cursor = await self.lock_cursor(caller.principal.id)
        return TokenFeed(caller=caller, cursor=cursor, events=[])

    async def save_cursor(self, agent_id: uuid.UUID, cursor: AgentCursor) -> None:
        """Store the agent's cursor."""
        self._t.cursors[agent_id] = cursor

    async def set_capabilities(self, agent_id: uuid.UUID, followups: str | None) -> None:
        """Store the follow-up capability an agent reported."""
        agent = self._t.principals[agent_id]
        self._t.principals[agent_id] = attrs.evolve(agent, reported_followups=followups)


class MemoryFollowupRepository:
    """Follow-up rows; satisfies `turnkeeper.application.ports.FollowupRepository`.

    Args:
        tables: the tables of the unit of work.
    """

    def __init__(self, tables: Tables) -> None:
        self._t = tables

    async def add(
        self, run_id: uuid.UUID, message_id: uuid.UUID, at: datetime, mode: FollowupMode
    ) -> None:
        """Queue a message as a follow-up of a run (once per message)."""
        if message_id in self._t.followups:
            raise DuplicateKey("run_followups_message_key")
        self._t.followups[message_id] = FollowupRow(
            run_id=run_id,
            state=FollowupState.QUEUED,
            created_at=at,
            updated_at=at,
            accepted_run_id=run_id,
            mode=mode,
        )

    async def trigger_links(self, message_id: uuid.UUID) -> TriggerLinks:
        """The message's follow-up acceptance and the run it triggered."""
        row = self._t.followups.get(message_id)
        return TriggerLinks(
            opened_run_id=self._t.run_triggers.get(message_id),
            followup=None
            if row is None
            else AcceptedFollowup(run_id=row.accepted_run_id, mode=row.mode),
        )

    async def states(self, run_id: uuid.UUID) -> dict[uuid.UUID, FollowupState]:
        """The follow-up states of a run, by message id."""
        return {
            message_id: row.state
            for message_id, row in sorted(self._t.followups.items())
            if row.run_id == run_id
        }

    async def start_states(
        self, run_id: uuid.UUID
    ) -> Callable[[], Awaitable[dict[uuid.UUID, FollowupState]]]:
        """The states as of now (units of the memory store run one at a time)."""
        found = await self.states(run_id)

        async def states() -> dict[uuid.UUID, FollowupState]:
            return found

        return states

    async def lock(self, run_id: uuid.UUID, message_id: uuid.UUID) -> FollowupState | None:
        """The state of one follow-up of a run, or None."""
        row = self._t.followups.get(message_id)
        return row.state if row is not None and row.run_id == run_id else None

    async def lock_many(
        self, run_id: uuid.UUID, message_ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, FollowupState]:
        """The states of those of the messages that are follow-ups of the run."""
        found = {}
        for message_id in message_ids:
            row = self._t.followups.get(message_id)
            if row is not None and row.run_id == run_id:
                found[message_id] = row.state
        return found

    async def lock_open(self, run_id: uuid.UUID) -> list[OpenFollowup]:
        """The open follow-ups of a run with what settlement needs of their messages."""
        found = []
        for message_id, row in sorted(self._t.followups.items()):
            if row.run_id != run_id or row.state not in OPEN_STATES:
                continue
            message = self._t.messages[message_id]
            found.append(
                OpenFollowup(
                    message_id=message_id,
                    thread_seq=message.thread_seq,
                    author_id=message.author_id,
                    deleted=message.deleted_at is not None,
                )
            )
        return found

    async def set_states(
        self,
        run_id: uuid.UUID,
        message_ids: Sequence[uuid.UUID],
        state: FollowupState,
        at: datetime,
    ) -> None:
        """Set the state of some follow-ups of a run."""
        for message_id in message_ids:
            row = self._t.followups.get(message_id)
            if row is not None and row.run_id == run_id:
                self._t.followups[message_id] = attrs.evolve(row, state=state, updated_at=at)

    async def move(
        self,
        run_id: uuid.UUID,
        message_ids: Sequence[uuid.UUID],
        new_run_id: uuid.UUID,
        at: datetime,
    ) -> None:
        """Move follow-ups of a run to a new run, queued again."""
        for message_id in message_ids:
            row = self._t.followups.get(message_id)
            if row is not None and row.run_id == run_id:
                self._t.followups[message_id] = attrs.evolve(
                    row, run_id=new_run_id, state=FollowupState.QUEUED, updated_at=at
                )
