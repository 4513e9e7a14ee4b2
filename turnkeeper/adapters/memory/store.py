"""The in-memory store and its unit of work.

A unit snapshots every table when it starts (values are frozen, so a shallow copy of
each dict is a snapshot) and restores the snapshot unless it commits. One asyncio lock
serializes units. Events are numbered as in PostgreSQL (`turnkeeper.adapters.event_seqs`):
each unit gets a transaction id when it first appends one, its events become part of the
log at commit, and readers serve only seqs below the horizon of the oldest unit still
holding an id.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs

from turnkeeper.adapters.event_seqs import check_count, first_seq, horizon_bound
from turnkeeper.adapters.memory.audit import MemoryAuditLog, MemoryRateLimitStore
from turnkeeper.adapters.memory.freshness import MemoryFreshnessRepository
from turnkeeper.adapters.memory.runs import (
    MemoryAgentFeedRepository,
    MemoryFollowupRepository,
    MemoryRunRepository,
)
from turnkeeper.adapters.memory.tables import Tables
from turnkeeper.adapters.memory.tokens import MemoryTokenRepository
from turnkeeper.adapters.wakeups import LocalWaker
from turnkeeper.application.errors import DuplicateKey, RetriableConflict
from turnkeeper.application.ports import (
    BucketTake,
    HistoryFacts,
    PostFacts,
    ReaderScope,
    TokenPostFacts,
    UnitOfWork,
)
from turnkeeper.domain.authorization import AccessTarget
from turnkeeper.domain.events import Event, NewEvent
from turnkeeper.domain.messaging import Message, TriggerState, visible_to
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


class MemoryStore:
    """The shared state of every unit of work of one in-memory database."""

    def __init__(self) -> None:
        self.tables = Tables()
        self.lock = asyncio.Lock()
        #: The next transaction id (never reused, also after a rollback).
        self.next_xid = 1
        #: Transaction ids of the units that appended events and are still open.
        self.running: set[int] = set()

    def take_xid(self) -> int:
        """A new transaction id, held as running until `end` releases it.

        Returns:
            The id.
        """
        xid = self.next_xid
        self.next_xid += 1
        self.running.add(xid)
        return xid

    def end(self, xid: int) -> None:
        """A unit holding `xid` committed or rolled back.

        Args:
            xid: the unit's transaction id.
        """
        self.running.discard(xid)

    def horizon(self) -> int:
        """The seq below which every event is final (see `turnkeeper.adapters.event_seqs`).

        Returns:
            The bound of the oldest running transaction id, or of the next one.
        """
        return horizon_bound(min(self.running, default=self.next_xid))


class _Principals:
    def __init__(self, t: Tables) -> None:
        self._t = t

    async def add(self, principal: Principal) -> None:
        if any(p.handle == principal.handle for p in self._t.principals.values()):
            raise DuplicateKey("principals_handle_key")
        self._t.principals[principal.id] = principal

    async def get(self, principal_id: uuid.UUID) -> Principal | None:
        return self._t.principals.get(principal_id)

    async def prefetch(self, ids: Sequence[uuid.UUID]) -> None:
        return None

    async def get_many(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Principal]:
        return {i: self._t.principals[i] for i in ids if i in self._t.principals}

    async def update(self, principal: Principal) -> None:
        self._t.principals[principal.id] = principal

    async def owner(self) -> Principal | None:
        owners = sorted((p for p in self._t.principals.values() if p.is_owner), key=lambda p: p.id)
        return owners[0] if owners else None


class _Spaces:
    def __init__(self, t: Tables) -> None:
        self._t = t

    async def add(self, space: Space) -> None:
        self._t.spaces[space.id] = space

    async def get(self, space_id: uuid.UUID) -> Space | None:
        return self._t.spaces.get(space_id)

    async def list_all(self) -> list[Space]:
        return sorted(self._t.spaces.values(), key=lambda s: s.id)


class _Channels:
    def __init__(self, t: Tables) -> None:
        self._t = t

    async def add(self, channel: Channel) -> None:
        self._t.channels[channel.id] = channel

    async def get(self, channel_id: uuid.UUID) -> Channel | None:
        return self._t.channels.get(channel_id)

    async def update(self, channel: Channel) -> None:
        self._t.channels[channel.id] = channel

    async def list_all(self) -> list[Channel]:
        return sorted(self._t.channels.values(), key=lambda c: c.id)


def _visible_page(
    t: Tables, thread_id: uuid.UUID, reader_id: uuid.UUID, after_seq: int, limit: int
) -> list[Message]:
    found = sorted(
        (
            m
            for m in t.messages.values()
            if m.thread_id == thread_id
            and m.thread_seq > after_seq
            and m.deleted_at is None
            and visible_to(m, reader_id)
        ),
        key=lambda m: m.thread_seq,
    )
    return found[:limit]


class _Threads:
    def __init__(self, t: Tables) -> None:
        self._t = t

    async def add(self, thread: Thread) -> None:
        self._t.threads[thread.id] = thread

    async def get(self, thread_id: uuid.UUID) -> Thread | None:
        return self._t.threads.get(thread_id)

    async def allocate_seq(self, thread_id: uuid.UUID) -> int:
        thread = self._t.threads[thread_id]
        self._t.threads[thread_id] = attrs.evolve(thread, latest_seq=thread.latest_seq + 1)
        return thread.latest_seq + 1

    async def lock_state(self, thread_id: uuid.UUID) -> ThreadState:
        # Units of the memory store run one at a time: the unit holds every lock.
        return self._t.threads[thread_id].state

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

    async def post_facts(
        self,
        thread_id: uuid.UUID,
        author_id: uuid.UUID,
        client_msg_id: str,
        take: BucketTake | None = None,
    ) -> PostFacts | None:
        target = await self.target(thread_id)
        grants = await _Grants(self._t).for_principal(author_id)
        earlier_id = self._t.client_ids.get((author_id, client_msg_id))
        earlier = None if earlier_id is None else self._t.messages[earlier_id]
        if target is None:
            return None
        retry_after = None
        if take is not None and earlier is None:
            retry_after = await MemoryRateLimitStore(self._t).take_token(
                author_id, take.limit_class, take.now, burst=take.burst, per_minute=take.per_minute
            )
        return PostFacts(target=target, grants=grants, earlier=earlier, retry_after=retry_after)

    async def token_post_facts(
        self,
        thread_id: uuid.UUID,
        token_hash: bytes,
        client_msg_id: str,
        take: BucketTake | None = None,
    ) -> TokenPostFacts | None:
        caller = await MemoryTokenRepository(self._t).resolve(token_hash)
        if caller is None:
            return None
        facts = await self.post_facts(thread_id, caller.principal.id, client_msg_id, take)
        return TokenPostFacts(caller=caller, facts=facts)

    async def history_facts(
        self, thread_id: uuid.UUID, reader_id: uuid.UUID, after_seq: int, limit: int
    ) -> HistoryFacts | None:
        target = await self.target(thread_id)
        if target is None:
            return None
        return HistoryFacts(
            target=target,
            grants=await _Grants(self._t).for_principal(reader_id),
            messages=_visible_page(self._t, thread_id, reader_id, after_seq, limit),
        )


class _Grants:
    def __init__(self, t: Tables) -> None:
        self._t = t

    async def add(self, grant: Grant) -> None:
        for other in self._t.grants.values():
            if (other.principal_id, other.resource_kind, other.resource_id) == (
                grant.principal_id,
                grant.resource_kind,
                grant.resource_id,
            ):
                raise RetriableConflict("grants_principal_resource_key", reason="unique_race")
        self._t.grants[grant.id] = grant

    async def get(self, grant_id: uuid.UUID) -> Grant | None:
        return self._t.grants.get(grant_id)

    async def delete(self, grant_id: uuid.UUID) -> None:
        self._t.grants.pop(grant_id, None)

    async def for_principal(self, principal_id: uuid.UUID) -> list[Grant]:
        return await self.list(principal_id=principal_id)

    async def prefetch(self, principal_ids: Sequence[uuid.UUID]) -> None:
        return None

    async def lock_pair(
        self, principal_id: uuid.UUID, resource_kind: ResourceKind, resource_id: uuid.UUID
    ) -> Grant | None:
        pair = (principal_id, resource_kind, resource_id)
        return next(
            (
                g
                for g in self._t.grants.values()
                if (g.principal_id, g.resource_kind, g.resource_id) == pair
            ),
            None,
        )

    async def set_level(self, grant_id: uuid.UUID, level: Level) -> None:
        self._t.grants[grant_id] = attrs.evolve(self._t.grants[grant_id], level=level)

    async def list(
        self, *, principal_id: uuid.UUID | None = None, resource_id: uuid.UUID | None = None
    ) -> list[Grant]:
        return sorted(
            (
                g
                for g in self._t.grants.values()
                if principal_id in (None, g.principal_id) and resource_id in (None, g.resource_id)
            ),
            key=lambda g: g.id,
        )


class _Messages:
    def __init__(self, t: Tables, events: _Events) -> None:
        self._t = t
        self._events = events

    async def add(self, message: Message, created: NewEvent | None = None) -> None:
        if message.client_msg_id is not None:
            key = (message.author_id, message.client_msg_id)
            if key in self._t.client_ids:
                # Same contract as PostgreSQL: the rerun of the unit finds the winner.
                raise RetriableConflict("messages_author_client_msg_id_key", reason="unique_race")
            self._t.client_ids[key] = message.id
        self._t.messages[message.id] = message
        if created is not None:
            await self._events.append(created)

    async def get(self, message_id: uuid.UUID) -> Message | None:
        return self._t.messages.get(message_id)

    async def by_client_id(self, author_id: uuid.UUID, client_msg_id: str) -> Message | None:
        message_id = self._t.client_ids.get((author_id, client_msg_id))
        return None if message_id is None else self._t.messages[message_id]

    async def prefetch(self, message_id: uuid.UUID) -> None:
        return None

    async def list_visible(
        self, thread_id: uuid.UUID, reader_id: uuid.UUID, after_seq: int, limit: int
    ) -> list[Message]:
        return _visible_page(self._t, thread_id, reader_id, after_seq, limit)

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
    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self._t = store.tables
        self.pending: list[NewEvent] = []
        self.xid: int | None = None

    async def append(self, event: NewEvent) -> None:
        check_count(len(self.pending) + 1)
        if self.xid is None:
            self.xid = self._store.take_xid()
        self.pending.append(event)

    def readable(self) -> list[Event]:
        """The log's events below the horizon, in seq order."""
        horizon = self._store.horizon()
        return [e for e in self._t.events if e.seq < horizon]

    async def read(self, scope: ReaderScope, after: int, limit: int) -> list[Event]:
        found: list[Event] = []
        for event in self.readable():
            if event.seq <= after or event.audience_id is not None:
                continue
            if not scope.everything and not self._in_scope(scope, event):
                continue
            if event.restricted_to is not None and scope.reader_id not in event.restricted_to:
                continue
            found.append(event)
            if len(found) >= limit:
                break
        return found

    def _in_scope(self, scope: ReaderScope, event: Event) -> bool:
        # As ReadSharedEvents: the fixed operator is looked up on the thread at read time.
        if event.channel_id in scope.channel_ids or event.thread_id in scope.thread_ids:
            return True
        thread = None if event.thread_id is None else self._t.threads.get(event.thread_id)
        return (
            thread is not None
            and scope.fixed_operator_id is not None
            and thread.operator_agent_id == scope.fixed_operator_id
        )

    def flush(self) -> None:
        if self.xid is None:
            return
        base = first_seq(self.xid)
        for number, event in enumerate(self.pending, start=1):
            values = {f.name: getattr(event, f.name) for f in attrs.fields(NewEvent)}
            self._t.events.append(Event(seq=base + number, **values))
        # Seqs of different units interleave: the log stays in seq order for readers.
        self._t.events.sort(key=lambda e: e.seq)
        self.pending.clear()

    def end(self) -> None:
        """The unit ended: its transaction id no longer holds the horizon back."""
        if self.xid is not None:
            self._store.end(self.xid)
            self.xid = None


class MemoryUnitOfWork:
    """One unit of work over a `MemoryStore` (a `turnkeeper.application.ports.UnitOfWork`)."""

    def __init__(self, store: MemoryStore, waker: LocalWaker | None = None) -> None:
        self._store = store
        self._waker = waker
        self._snapshot = store.tables.snapshot()
        tables = store.tables
        self.principals = _Principals(tables)
        self.tokens = MemoryTokenRepository(tables)
        self.spaces = _Spaces(tables)
        self.channels = _Channels(tables)
        self.threads = _Threads(tables)
        self.grants = _Grants(tables)
        self.events = _Events(store)
        self.messages = _Messages(tables, self.events)
        self.audit = MemoryAuditLog(tables)
        self.buckets = MemoryRateLimitStore(tables)
        self.runs = MemoryRunRepository(tables)
        self.agent_feed = MemoryAgentFeedRepository(tables, store.horizon)
        self.freshness = MemoryFreshnessRepository(tables)
        self.followups = MemoryFollowupRepository(tables)
        self.committed = False

    async def commit(self) -> None:
        """Number the unit's events, keep every change and wake their readers."""
        feeds = [event.audience_id for event in self.events.pending]
        self.events.flush()
        self.events.end()
        self.committed = True
        if feeds and self._waker is not None:
            self._waker.signal(feeds)

    def rollback(self) -> None:
        """Restore the state the unit started from."""
        self._store.tables = self._snapshot
        self.events.pending.clear()
        self.events.end()


class MemoryUnitOfWorkFactory:
    """Opens serialized in-memory units of work; satisfies `UnitOfWorkFactory`.

    Args:
        store: the shared store (a new empty one when omitted).
    """

    def __init__(self, store: MemoryStore | None = None) -> None:
        self.store = store or MemoryStore()
        # Readers waiting for events: woken by every commit that appended some.
        self._waker = LocalWaker()

    @property
    def waker(self) -> LocalWaker:
        """The waker of the units' commits (`turnkeeper.application.wakeup.ProvidesWaker`)."""
        return self._waker

    @asynccontextmanager
    async def _unit(self) -> AsyncIterator[UnitOfWork]:
        async with self.store.lock:
            unit = MemoryUnitOfWork(self.store, self._waker)
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
