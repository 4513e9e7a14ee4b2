"""PostgreSQL repositories of the runs capability: runs and the agent feed.

Every statement comes from ``sql/queries/runs.sql`` and ``sql/queries/agent_feed.sql``
through the generated `turnkeeper.adapters.postgres.queries`. Locks follow the lock order of the
runs capability: the thread row (taken by the message append) before the run row.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

import attrs

from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.postgres.base import Conn, MissingRow, PostgresRepository, members_by_value
from turnkeeper.adapters.postgres.events import PostgresEventLog
from turnkeeper.adapters.postgres.tokens import caller_of
from turnkeeper.application.ports import AgentCursor, TokenFeed, TokenRun
from turnkeeper.domain.events import Event
from turnkeeper.domain.followups import FollowupMode, FollowupState, OpenFollowup
from turnkeeper.domain.runs import AnswerRun, Run, RunState, TriggerKind
from turnkeeper.domain.trigger_report import AcceptedFollowup, TriggerLinks

_RUN_STATE_OF = members_by_value(RunState)
_TRIGGER_KIND_OF = members_by_value(TriggerKind)
_FOLLOWUP_MODE_OF = members_by_value(FollowupMode)
_FOLLOWUP_STATE_OF = members_by_value(FollowupState)


def _run(row: q.RunRow) -> Run:
    return Run(
        id=row.id,
        thread_id=row.thread_id,
        agent_id=row.agent_id,
        state=_RUN_STATE_OF[row.state],
        state_reason=row.state_reason,
        trigger_kind=_TRIGGER_KIND_OF[row.trigger_kind],
        triggering_message_id=row.triggering_message_id,
        triggered_by=row.triggered_by,
        version=row.version,
        cancel_requested=row.cancel_requested,
        cancel_requested_at=row.cancel_requested_at,
        invocation_jti=row.invocation_jti,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


class PostgresRunRepository(PostgresRepository):
    """Runs; satisfies `turnkeeper.application.ports.RunRepository`."""

    async def add(self, run: Run) -> None:
        """Insert a run (a second active run of a thread is a retriable race)."""
        await q.insert_run(
            self._conn,
            id=run.id,
            thread_id=run.thread_id,
            agent_id=run.agent_id,
            state=run.state.value,
            state_reason=run.state_reason,
            trigger_kind=run.trigger_kind.value,
            triggering_message_id=run.triggering_message_id,
            triggered_by=run.triggered_by,
            version=run.version,
            cancel_requested=run.cancel_requested,
            cancel_requested_at=run.cancel_requested_at,
            invocation_jti=run.invocation_jti,
            created_at=run.created_at,
            updated_at=run.updated_at,
        )

    async def get(self, run_id: uuid.UUID) -> Run | None:
        """The run without a lock, or None."""
        row = await q.get_run(self._conn, id=run_id)
        return None if row is None else _run(row)

    async def lock(self, run_id: uuid.UUID) -> Run | None:
        """The run under FOR UPDATE, or None."""
        row = await q.lock_run(self._conn, id=run_id)
        return None if row is None else _run(row)

    async def lock_active(self, run_id: uuid.UUID) -> Run | None:
        """``LockActiveRun``."""
        row = await q.lock_active_run(self._conn, id=run_id)
        return None if row is None else _run(row)

    async def lock_for_token(self, run_id: uuid.UUID, token_hash: bytes) -> TokenRun | None:
        """``LockRunForToken``: the token's caller and the run under FOR UPDATE."""
        row = await q.lock_run_for_token(self._conn, token_hash=token_hash, id=run_id)
        if row is None:
            return None
        caller = caller_of(row.caller, self._conn.info.timezone)
        if row.id is None:
            return TokenRun(caller=caller, run=None)
        # The run's columns follow the caller's in the order of the runs table (RunRow).
        return TokenRun(caller=caller, run=_run(q.RunRow(*attrs.astuple(row, recurse=False)[1:])))

    async def lock_active_in_thread(self, thread_id: uuid.UUID) -> Run | None:
        """The thread's active run under FOR UPDATE, or None."""
        row = await q.lock_active_run_in_thread(self._conn, thread_id=thread_id)
        return None if row is None else _run(row)

    async def lock_for_answer(self, run_id: uuid.UUID) -> AnswerRun | None:
        """``LockRunForAnswer``: the run's facts under FOR SHARE, or None."""
        row = await q.lock_run_for_answer(self._conn, id=run_id)
        if row is None:
            return None
        return AnswerRun(
            id=row.id,
            thread_id=row.thread_id,
            agent_id=row.agent_id,
            state=_RUN_STATE_OF[row.state],
        )

    async def update(self, run: Run) -> None:
        """Store the mutable attributes of a run (queued, see the port)."""
        await q.update_run(
            self._conn,
            state=run.state.value,
            state_reason=run.state_reason,
            version=run.version,
            cancel_requested=run.cancel_requested,
            cancel_requested_at=run.cancel_requested_at,
            invocation_jti=run.invocation_jti,
            updated_at=run.updated_at,
            id=run.id,
        )

    async def lock_queued_before(self, before: datetime, limit: int) -> list[Run]:
        """Queued runs created before a time, FOR UPDATE SKIP LOCKED."""
        rows = await q.lock_runs_created_before(
            self._conn, states=[RunState.QUEUED.value], before=before, max_runs=limit
        )
        return [_run(row) for row in rows]

    async def lock_cancel_unconfirmed_before(self, before: datetime, limit: int) -> list[Run]:
        """Active runs with a cancel requested before a time, FOR UPDATE SKIP LOCKED."""
        rows = await q.lock_runs_cancel_requested_before(
            self._conn,
            states=[RunState.RUNNING.value, RunState.WAITING_INPUT.value],
            before=before,
            max_runs=limit,
        )
        return [_run(row) for row in rows]

    async def lock_running_unchanged_before(self, before: datetime, limit: int) -> list[Run]:
        """Running runs unchanged since before a time, FOR UPDATE SKIP LOCKED."""
        rows = await q.lock_runs_updated_before(
            self._conn, states=[RunState.RUNNING.value], before=before, max_runs=limit
        )
        return [_run(row) for row in rows]

    async def lock_active_of_agent(self, agent_id: uuid.UUID, limit: int) -> list[Run]:
        """An agent's active runs, FOR UPDATE SKIP LOCKED."""
        rows = await q.lock_active_runs_of_agent(self._conn, agent_id=agent_id, max_runs=limit)
        return [_run(row) for row in rows]

    async def lock_active_of_disabled_agents(self, limit: int) -> list[Run]:
        """Active runs of disabled agents, FOR UPDATE SKIP LOCKED."""
        rows = await q.lock_active_runs_of_disabled_agents(self._conn, max_runs=limit)
        return [_run(row) for row in rows]


def _cursor(agent_id: uuid.UUID, row: q.LockAgentCursorRow | None) -> AgentCursor:
    """The cursor LockAgentCursor returned (it always returns one: MissingRow else)."""
    if row is None:
        raise MissingRow(f"cursor of {agent_id}")
    return AgentCursor(acked_seq=row.acked_seq, delivered_seq=row.delivered_seq)


class PostgresAgentFeedRepository(PostgresRepository):
    """Personal events and delivery cursors; satisfies `AgentFeedRepository`.

    Args:
        conn: the unit's connection.
    """

    def __init__(self, conn: Conn) -> None:
        super().__init__(conn)
        self._events = PostgresEventLog(conn)
        #: Told which principal row `set_capabilities` changed, so that the unit's
        #: principal repository forgets what it remembered of it (wired by the unit).
        self.principal_changed: Callable[[uuid.UUID], None] = _ignore

    async def read(self, audience_id: uuid.UUID, after: int, limit: int) -> list[Event]:
        """An agent's personal events after a seq (commit-ordered)."""
        return await self._events.read_personal(audience_id, after, limit)

    async def lock_cursor(self, agent_id: uuid.UUID) -> AgentCursor:
        """The agent's cursor, created on first use, locked for this unit."""
        return _cursor(agent_id, await q.lock_agent_cursor(self._conn, agent_id=agent_id))

    async def lock_cursor_and_read(
        self, agent_id: uuid.UUID, after: int | None, limit: int
    ) -> tuple[AgentCursor, list[Event]]:
        """The cursor locked and the first page after it, in one round trip."""
        locked = await q.start_lock_agent_cursor(self._conn, agent_id=agent_id)
        page = await self._events.start_personal_from_cursor(agent_id, after, limit)
        return _cursor(agent_id, await locked.result()), await page()

    async def lock_cursor_and_read_for_token(
        self, token_hash: bytes, after: int | None, limit: int
    ) -> TokenFeed | None:
        """``LockAgentCursorForToken`` and the first page, in one round trip."""
        locked = await q.start_lock_agent_cursor_for_token(self._conn, token_hash=token_hash)
        page = await self._events.start_personal_from_cursor(
            None, after, limit, token_hash=token_hash
        )
        row = await locked.result()
        return self._token_feed(row, await page())

    async def lock_cursor_for_token(self, token_hash: bytes) -> TokenFeed | None:
        """``LockAgentCursorForToken`` alone."""
        locked = await q.start_lock_agent_cursor_for_token(self._conn, token_hash=token_hash)
        return self._token_feed(await locked.result(), [])

    def _token_feed(
        self, row: q.LockAgentCursorForTokenRow | None, events: list[Event]
    ) -> TokenFeed | None:
        if row is None:
            return None
        caller = caller_of(row.caller, self._conn.info.timezone)
        if row.acked_seq is None or row.delivered_seq is None:
            return TokenFeed(caller=caller, cursor=None, events=[])
        cursor = AgentCursor(acked_seq=row.acked_seq, delivered_seq=row.delivered_seq)
        return TokenFeed(caller=caller, cursor=cursor, events=events)

    async def save_cursor(self, agent_id: uuid.UUID, cursor: AgentCursor) -> None:
        """Store the agent's cursor."""
        await q.save_agent_cursor(
            self._conn,
            acked_seq=cursor.acked_seq,
            delivered_seq=cursor.delivered_seq,
            agent_id=agent_id,
        )

    async def set_capabilities(self, agent_id: uuid.UUID, followups: str | None) -> None:
        """Store the follow-up capability an agent reported.

        Raises:
            MissingRow: for an unknown agent.
        """
        if await q.set_reported_followups(self._conn, followups=followups, id=agent_id) != 1:
            raise MissingRow(f"principal {agent_id}")
        self.principal_changed(agent_id)


def _ignore(principal_id: uuid.UUID) -> None:
    """No one to tell (an agent feed used outside a unit)."""


class PostgresFollowupRepository(PostgresRepository):
    """Follow-up rows; satisfies `turnkeeper.application.ports.FollowupRepository`.

    Settlement statements are set-based (``= ANY(array)``), so ending a run costs the
    same number of statements whatever the number of its follow-ups.
    """

    async def add(
        self, run_id: uuid.UUID, message_id: uuid.UUID, at: datetime, mode: FollowupMode
    ) -> None:
        """Insert a queued follow-up with the run and mode of its acceptance."""
        await q.insert_followup(
            self._conn, run_id=run_id, message_id=message_id, mode=mode.value, at=at
        )

    async def trigger_links(self, message_id: uuid.UUID) -> TriggerLinks:
        """The message's follow-up acceptance and the run it triggered (one statement)."""
        rows = await q.trigger_links_of_message(self._conn, message_id=message_id)
        followup = next(
            (
                AcceptedFollowup(run_id=row.run_id, mode=_FOLLOWUP_MODE_OF[row.mode])
                for row in rows
                if row.link == "followup"
            ),
            None,
        )
        opened = sorted(row.run_id for row in rows if row.link == "run")
        return TriggerLinks(opened_run_id=opened[0] if opened else None, followup=followup)

    async def states(self, run_id: uuid.UUID) -> dict[uuid.UUID, FollowupState]:
        """Every follow-up of a run by message id."""
        rows = await q.list_followups(self._conn, run_id=run_id)
        return {row.message_id: _FOLLOWUP_STATE_OF[row.state] for row in rows}

    async def start_states(
        self, run_id: uuid.UUID
    ) -> Callable[[], Awaitable[dict[uuid.UUID, FollowupState]]]:
        """``ListFollowups`` queued in the pipeline."""
        pending = await q.start_list_followups(self._conn, run_id=run_id)

        async def states() -> dict[uuid.UUID, FollowupState]:
            return {row.message_id: _FOLLOWUP_STATE_OF[row.state] for row in await pending.result()}

        return states

    async def lock(self, run_id: uuid.UUID, message_id: uuid.UUID) -> FollowupState | None:
        """One follow-up's state under FOR UPDATE, or None."""
        state = await q.lock_followup(self._conn, run_id=run_id, message_id=message_id)
        return None if state is None else FollowupState(state)

    async def lock_many(
        self, run_id: uuid.UUID, message_ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, FollowupState]:
        """``LockFollowups``: one statement for all of them."""
        if not message_ids:
            return {}
        rows = await q.lock_followups(self._conn, run_id=run_id, message_ids=list(message_ids))
        return {row.message_id: _FOLLOWUP_STATE_OF[row.state] for row in rows}

    async def lock_open(self, run_id: uuid.UUID) -> list[OpenFollowup]:
        """Open follow-ups with their message facts, locked in message_id order."""
        rows = await q.lock_open_followups(self._conn, run_id=run_id)
        return [
            OpenFollowup(
                message_id=row.message_id,
                thread_seq=row.thread_seq,
                author_id=row.author_id,
                deleted=row.deleted_at is not None,
            )
            for row in rows
        ]

    async def set_states(
        self,
        run_id: uuid.UUID,
        message_ids: Sequence[uuid.UUID],
        state: FollowupState,
        at: datetime,
    ) -> None:
        """Set the state of some follow-ups in one statement."""
        if message_ids:
            await q.set_followup_states(
                self._conn, state=state.value, at=at, run_id=run_id, message_ids=list(message_ids)
            )

    async def move(
        self,
        run_id: uuid.UUID,
        message_ids: Sequence[uuid.UUID],
        new_run_id: uuid.UUID,
        at: datetime,
    ) -> None:
        """Move follow-ups to another run as queued, in one statement."""
        if message_ids:
            await q.move_followups(
                self._conn,
                new_run_id=new_run_id,
                at=at,
                run_id=run_id,
                message_ids=list(message_ids),
            )
