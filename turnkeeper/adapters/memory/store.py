"""The in-memory store and its unit of work.

A unit snapshots every table when it starts (values are frozen, so a shallow copy of
each dict is a snapshot) and restores the snapshot unless it commits. One asyncio lock
serializes units; events get their seq at commit, as in PostgreSQL.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import attrs

from turnkeeper.adapters.memory.freshness import MemoryFreshnessRepository
from turnkeeper.application.errors import DuplicateKey, RetriableConflict
from turnkeeper.application.ports import AgentCursor, DenialRecord, ReaderScope, UnitOfWork
from turnkeeper.domain.authorization import AccessTarget
from turnkeeper.domain.events import Event, NewEvent
from turnkeeper.domain.followups import OPEN_STATES, FollowupState, OpenFollowup
from turnkeeper.domain.messaging import Message, TriggerState, visible_to
from turnkeeper.domain.ratelimit import Bucket, take_token
from turnkeeper.domain.runs import AnswerRun, Run, RunState
from turnkeeper.domain.world import Channel, Grant, Principal, Space, Thread, ThreadState


@attrs.frozen(kw_only=True)
class _FollowupRow:
    run_id: uuid.UUID
    state: FollowupState
    created_at: datetime
    updated_at: datetime


@attrs.define
class _Tables:
    principals: dict[uuid.UUID, Principal] = attrs.Factory(dict)
    tokens: dict[bytes, uuid.UUID] = attrs.Factory(dict)
    spaces: dict[uuid.UUID, Space] = attrs.Factory(dict)
    channels: dict[uuid.UUID, Channel] = attrs.Factory(dict)
    threads: dict[uuid.UUID, Thread] = attrs.Factory(dict)
    grants: dict[uuid.UUID, Grant] = attrs.Factory(dict)
    messages: dict[uuid.UUID, Message] = attrs.Factory(dict)
    client_ids: dict[tuple[uuid.UUID, str], uuid.UUID] = attrs.Factory(dict)
    events: list[Event] = attrs.Factory(list)
    denials: dict[tuple[uuid.UUID, str, str, datetime], int] = attrs.Factory(dict)
    buckets: dict[tuple[uuid.UUID, str], Bucket] = attrs.Factory(dict)
    runs: dict[uuid.UUID, Run] = attrs.Factory(dict)
    cursors: dict[uuid.UUID, AgentCursor] = attrs.Factory(dict)
    followups: dict[uuid.UUID, _FollowupRow] = attrs.Factory(dict)

    def snapshot(self) -> _Tables:
        return _Tables(**{f.name: _copy(getattr(self, f.name)) for f in attrs.fields(_Tables)})


def _copy(value: Any) -> Any:
    return list(value) if isinstance(value, list) else dict(value)


class MemoryStore:
    """The shared state of every unit of work of one in-memory database."""

    def __init__(self) -> None:
        self.tables = _Tables()
        self.lock = asyncio.Lock()


class _Principals:
    def __init__(self, t: _Tables) -> None:
        self._t = t

    async def add(self, principal: Principal) -> None:
        if any(p.handle == principal.handle for p in self._t.principals.values()):
            raise DuplicateKey("principals_handle_key")
        self._t.principals[principal.id] = principal

    async def get(self, principal_id: uuid.UUID) -> Principal | None:
        return self._t.principals.get(principal_id)

    async def get_many(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Principal]:
        return {i: self._t.principals[i] for i in ids if i in self._t.principals}

    async def update(self, principal: Principal) -> None:
        self._t.principals[principal.id] = principal

    async def add_token(self, principal_id: uuid.UUID, token_hash: bytes, at: datetime) -> None:
        self._t.tokens[token_hash] = principal_id

    async def by_token_hash(self, token_hash: bytes) -> Principal | None:
        principal_id = self._t.tokens.get(token_hash)
        return None if principal_id is None else self._t.principals.get(principal_id)

    async def owner(self) -> Principal | None:
        owners = sorted((p for p in self._t.principals.values() if p.is_owner), key=lambda p: p.id)
        return owners[0] if owners else None


class _Spaces:
    def __init__(self, t: _Tables) -> None:
        self._t = t

    async def add(self, space: Space) -> None:
        self._t.spaces[space.id] = space

    async def get(self, space_id: uuid.UUID) -> Space | None:
        return self._t.spaces.get(space_id)

    async def list_all(self) -> list[Space]:
        return sorted(self._t.spaces.values(), key=lambda s: s.id)


class _Channels:
    def __init__(self, t: _Tables) -> None:
        self._t = t

    async def add(self, channel: Channel) -> None:
        self._t.channels[channel.id] = channel

    async def get(self, channel_id: uuid.UUID) -> Channel | None:
        return self._t.channels.get(channel_id)

    async def update(self, channel: Channel) -> None:
        self._t.channels[channel.id] = channel

    async def list_all(self) -> list[Channel]:
        return sorted(self._t.channels.values(), key=lambda c: c.id)


class _Threads:
    def __init__(self, t: _Tables) -> None:
        self._t = t

    async def add(self, thread: Thread) -> None:
        self._t.threads[thread.id] = thread

    async def get(self, thread_id: uuid.UUID) -> Thread | None:
        return self._t.threads.get(thread_id)

    async def allocate_seq(self, thread_id: uuid.UUID) -> int:
        thread = self._t.threads[thread_id]
        self._t.threads[thread_id] = attrs.evolve(thread, latest_seq=thread.latest_seq + 1)
        return thread.latest_seq + 1

    async def set_state(self, thread_id: uuid.UUID, state: ThreadState) -> None:
        self._t.threads[thread_id] = attrs.evolve(self._t.threads[thread_id], state=state)

    async def reopen(self, thread_id: uuid.UUID) -> bool:
        thread = self._t.threads[thread_id]
        if thread.state is not ThreadState.DONE:
            return False
        self._t.threads[thread_id] = attrs.evolve(thread, state=ThreadState.OPEN)
        return True

    async def mark_restricted(self, thread_id: uuid.UUID) -> None:
        self._t.threads[thread_id] = attrs.evolve(self._t.threads[thread_id], has_restricted=True)

    async def operated_by(self, agent_id: uuid.UUID) -> list[uuid.UUID]:
        return sorted(t.id for t in self._t.threads.values() if t.operator_agent_id == agent_id)

    async def target(self, thread_id: uuid.UUID) -> AccessTarget | None:
        thread = self._t.threads.get(thread_id)
        if thread is None:
            return None
        channel = self._t.channels[thread.channel_id]
        space = self._t.spaces[channel.space_id]
        return AccessTarget(space=space, channel=channel, thread=thread)


class _Grants:
    def __init__(self, t: _Tables) -> None:
        self._t = t

    async def add(self, grant: Grant) -> None:
        for other in self._t.grants.values():
            if (other.principal_id, other.resource_kind, other.resource_id) == (
                grant.principal_id,
                grant.resource_kind,
                grant.resource_id,
            ):
                raise DuplicateKey("grants_principal_resource_key")
        self._t.grants[grant.id] = grant

    async def get(self, grant_id: uuid.UUID) -> Grant | None:
        return self._t.grants.get(grant_id)

    async def delete(self, grant_id: uuid.UUID) -> None:
        self._t.grants.pop(grant_id, None)

    async def for_principal(self, principal_id: uuid.UUID) -> list[Grant]:
        return sorted(
            (g for g in self._t.grants.values() if g.principal_id == principal_id),
            key=lambda g: g.id,
        )


class _Messages:
    def __init__(self, t: _Tables) -> None:
        self._t = t

    async def add(self, message: Message) -> None:
        if message.client_msg_id is not None:
            key = (message.author_id, message.client_msg_id)
            if key in self._t.client_ids:
                # Same contract as PostgreSQL: the rerun of the unit finds the winner.
                raise RetriableConflict("messages_author_client_msg_id_key", reason="unique_race")
            self._t.client_ids[key] = message.id
        self._t.messages[message.id] = message

    async def get(self, message_id: uuid.UUID) -> Message | None:
        return self._t.messages.get(message_id)

    async def by_client_id(self, author_id: uuid.UUID, client_msg_id: str) -> Message | None:
        message_id = self._t.client_ids.get((author_id, client_msg_id))
        return None if message_id is None else self._t.messages[message_id]

    async def list_visible(
        self, thread_id: uuid.UUID, reader_id: uuid.UUID, after_seq: int, limit: int
    ) -> list[Message]:
        found = sorted(
            (
                m
                for m in self._t.messages.values()
                if m.thread_id == thread_id
                and m.thread_seq > after_seq
                and m.deleted_at is None
                and visible_to(m, reader_id)
            ),
            key=lambda m: m.thread_seq,
        )
        return found[:limit]

    async def set_trigger_states(
        self, message_ids: Sequence[uuid.UUID], state: TriggerState, reason: str | None
    ) -> list[Message]:
        changed = []
        for message_id in dict.fromkeys(message_ids):
            message = self._t.messages.get(message_id)
            if message is None or (
                message.trigger_state is state and message.trigger_state_reason == reason
            ):
                continue
            changed.append(await self.set_trigger_state(message_id, state, reason))
        return sorted(changed, key=lambda m: (m.thread_seq, m.id))

    async def set_trigger_state(
        self, message_id: uuid.UUID, state: TriggerState, reason: str | None
    ) -> Message:
        message = self._t.messages[message_id]
        changed = attrs.evolve(
            message,
            trigger_state=state,
            trigger_state_reason=reason,
            version=message.version + 1,
        )
        self._t.messages[message_id] = changed
        return changed


class _Events:
    def __init__(self, t: _Tables) -> None:
        self._t = t
        self.pending: list[NewEvent] = []

    async def append(self, event: NewEvent) -> None:
        self.pending.append(event)

    async def read(self, scope: ReaderScope, after: int, limit: int) -> list[Event]:
        found: list[Event] = []
        for event in self._t.events:
            if event.seq <= after or event.audience_id is not None:
                continue
            if not scope.everything and not (
                event.channel_id in scope.channel_ids or event.thread_id in scope.thread_ids
            ):
                continue
            if event.restricted_to is not None and scope.reader_id not in event.restricted_to:
                continue
            found.append(event)
            if len(found) >= limit:
                break
        return found

    def flush(self) -> None:
        seq = self._t.events[-1].seq if self._t.events else 0
        for event in self.pending:
            seq += 1
            values = {f.name: getattr(event, f.name) for f in attrs.fields(NewEvent)}
            self._t.events.append(Event(seq=seq, **values))
        self.pending.clear()


class _Audit:
    def __init__(self, t: _Tables) -> None:
        self._t = t

    async def record_denial(
        self, principal_id: uuid.UUID, action: str, reason: str, window_start: datetime
    ) -> None:
        key = (principal_id, action, reason, window_start)
        self._t.denials[key] = self._t.denials.get(key, 0) + 1

    async def denials(self, principal_id: uuid.UUID) -> list[DenialRecord]:
        rows = [
            DenialRecord(principal_id=p, action=a, reason=r, window_start=w, count=c)
            for (p, a, r, w), c in self._t.denials.items()
            if p == principal_id
        ]
        return sorted(rows, key=lambda d: (d.window_start, d.action, d.reason))


class _Buckets:
    def __init__(self, t: _Tables) -> None:
        self._t = t

    async def take_token(
        self,
        principal_id: uuid.UUID,
        limit_class: str,
        now: datetime,
        *,
        burst: int,
        per_minute: int,
    ) -> int | None:
        key = (principal_id, limit_class)
        decision = take_token(self._t.buckets.get(key), now, burst=burst, per_minute=per_minute)
        self._t.buckets[key] = decision.bucket
        return decision.retry_after


class _Runs:
    def __init__(self, t: _Tables) -> None:
        self._t = t

    async def add(self, run: Run) -> None:
        if run.state.active and any(
            r.thread_id == run.thread_id and r.state.active for r in self._t.runs.values()
        ):
            # Same contract as the partial unique index of PostgreSQL.
            raise RetriableConflict("runs_one_active_per_thread", reason="unique_race")
        self._t.runs[run.id] = run

    async def get(self, run_id: uuid.UUID) -> Run | None:
        return self._t.runs.get(run_id)

    async def lock(self, run_id: uuid.UUID) -> Run | None:
        return self._t.runs.get(run_id)

    async def lock_active_in_thread(self, thread_id: uuid.UUID) -> Run | None:
        return next(
            (r for r in self._t.runs.values() if r.thread_id == thread_id and r.state.active),
            None,
        )

    async def lock_for_answer(self, run_id: uuid.UUID) -> AnswerRun | None:
        run = self._t.runs.get(run_id)
        if run is None:
            return None
        return AnswerRun(id=run.id, thread_id=run.thread_id, agent_id=run.agent_id, state=run.state)

    async def update(self, run: Run) -> None:
        self._t.runs[run.id] = run

    async def lock_queued_before(self, before: datetime, limit: int) -> list[Run]:
        return self._due({RunState.QUEUED}, "created_at", before, limit)

    async def lock_cancel_unconfirmed_before(self, before: datetime, limit: int) -> list[Run]:
        states = {RunState.RUNNING, RunState.WAITING_INPUT}
        return self._due(states, "cancel_requested_at", before, limit)

    async def lock_running_unchanged_before(self, before: datetime, limit: int) -> list[Run]:
        return self._due({RunState.RUNNING}, "updated_at", before, limit)

    def _due(self, states: set[RunState], field: str, before: datetime, limit: int) -> list[Run]:
        due = [
            r
            for r in self._t.runs.values()
            if r.state in states and getattr(r, field) is not None and getattr(r, field) < before
        ]
        return sorted(due, key=lambda r: r.id)[:limit]

    async def lock_active_of_agent(self, agent_id: uuid.UUID, limit: int) -> list[Run]:
        found = [r for r in self._t.runs.values() if r.agent_id == agent_id and r.state.active]
        return sorted(found, key=lambda r: r.id)[:limit]

    async def lock_active_of_disabled_agents(self, limit: int) -> list[Run]:
        found = [
            r
            for r in self._t.runs.values()
            if r.state.active
            and (agent := self._t.principals.get(r.agent_id)) is not None
            and not agent.enabled
        ]
        return sorted(found, key=lambda r: r.id)[:limit]


class _AgentFeed:
    def __init__(self, t: _Tables) -> None:
        self._t = t

    async def read(self, audience_id: uuid.UUID, after: int, limit: int) -> list[Event]:
        found = [e for e in self._t.events if e.seq > after and e.audience_id == audience_id]
        return found[:limit]

    async def lock_cursor(self, agent_id: uuid.UUID) -> AgentCursor:
        return self._t.cursors.get(agent_id, AgentCursor())

    async def save_cursor(self, agent_id: uuid.UUID, cursor: AgentCursor) -> None:
        self._t.cursors[agent_id] = cursor

    async def set_capabilities(self, agent_id: uuid.UUID, followups: str | None) -> None:
        agent = self._t.principals[agent_id]
        self._t.principals[agent_id] = attrs.evolve(agent, reported_followups=followups)


class _Followups:
    def __init__(self, t: _Tables) -> None:
        self._t = t

    async def add(self, run_id: uuid.UUID, message_id: uuid.UUID, at: datetime) -> None:
        if message_id in self._t.followups:
            raise DuplicateKey("run_followups_message_key")
        self._t.followups[message_id] = _FollowupRow(
            run_id=run_id, state=FollowupState.QUEUED, created_at=at, updated_at=at
        )

    async def states(self, run_id: uuid.UUID) -> dict[uuid.UUID, FollowupState]:
        return {
            message_id: row.state
            for message_id, row in sorted(self._t.followups.items())
            if row.run_id == run_id
        }

    async def lock(self, run_id: uuid.UUID, message_id: uuid.UUID) -> FollowupState | None:
        row = self._t.followups.get(message_id)
        return row.state if row is not None and row.run_id == run_id else None

    async def lock_open(self, run_id: uuid.UUID) -> list[OpenFollowup]:
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
        for message_id in message_ids:
            row = self._t.followups.get(message_id)
            if row is not None and row.run_id == run_id:
                self._t.followups[message_id] = attrs.evolve(
                    row, run_id=new_run_id, state=FollowupState.QUEUED, updated_at=at
                )


class MemoryUnitOfWork:
    """One unit of work over a `MemoryStore` (a `turnkeeper.application.ports.UnitOfWork`)."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self._snapshot = store.tables.snapshot()
        tables = store.tables
        self.principals = _Principals(tables)
        self.spaces = _Spaces(tables)
        self.channels = _Channels(tables)
        self.threads = _Threads(tables)
        self.grants = _Grants(tables)
        self.messages = _Messages(tables)
        self.events = _Events(tables)
        self.audit = _Audit(tables)
        self.buckets = _Buckets(tables)
        self.runs = _Runs(tables)
        self.agent_feed = _AgentFeed(tables)
        self.freshness = MemoryFreshnessRepository(tables)
        self.followups = _Followups(tables)
        self.committed = False

    async def commit(self) -> None:
        """Assign seqs to the unit's events and keep every change."""
        self.events.flush()
        self.committed = True

    def rollback(self) -> None:
        """Restore the state the unit started from."""
        self._store.tables = self._snapshot
        self.events.pending.clear()


class MemoryUnitOfWorkFactory:
    """Opens serialized in-memory units of work; satisfies `UnitOfWorkFactory`.

    Args:
        store: the shared store (a new empty one when omitted).
    """

    def __init__(self, store: MemoryStore | None = None) -> None:
        self.store = store or MemoryStore()

    @asynccontextmanager
    async def _unit(self) -> AsyncIterator[UnitOfWork]:
        async with self.store.lock:
            unit = MemoryUnitOfWork(self.store)
            try:
                yield unit
            finally:
                if not unit.committed:
                    unit.rollback()

    def __call__(self) -> Any:
        """A new unit of work (an async context manager)."""
        return self._unit()

    def read_only(self) -> Any:
        """A unit for reads (the same serialized unit; it is never committed)."""
        return self._unit()
