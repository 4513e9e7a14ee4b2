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
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from turnkeeper.adapters.event_seqs import horizon_bound
from turnkeeper.adapters.memory.audit import MemoryAuditLog, MemoryRateLimitStore
from turnkeeper.adapters.memory.freshness import MemoryFreshnessRepository
from turnkeeper.adapters.memory.messages import MemoryEventLog, MemoryMessageRepository
from turnkeeper.adapters.memory.runs import (
    MemoryAgentFeedRepository,
    MemoryFollowupRepository,
    MemoryRunRepository,
)
from turnkeeper.adapters.memory.tables import Tables
from turnkeeper.adapters.memory.tokens import MemoryTokenRepository
from turnkeeper.adapters.memory.world import (
    MemoryChannelRepository,
    MemoryGrantRepository,
    MemoryPrincipalRepository,
    MemorySpaceRepository,
    MemoryThreadRepository,
)
from turnkeeper.adapters.wakeups import LocalWaker
from turnkeeper.application.ports import UnitOfWork

__all__ = ["MemoryStore", "MemoryUnitOfWork", "MemoryUnitOfWorkFactory"]


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


class MemoryUnitOfWork:
    """One unit of work over a `MemoryStore` (a `turnkeeper.application.ports.UnitOfWork`)."""

    def __init__(self, store: MemoryStore, waker: LocalWaker | None = None) -> None:
        self._store = store
        self._waker = waker
        self._snapshot = store.tables.snapshot()
        tables = store.tables
        self.principals = MemoryPrincipalRepository(tables)
        self.tokens = MemoryTokenRepository(tables)
        self.spaces = MemorySpaceRepository(tables)
        self.channels = MemoryChannelRepository(tables)
        self.threads = MemoryThreadRepository(tables)
        self.grants = MemoryGrantRepository(tables)
        self.events = MemoryEventLog(store)
        self.messages = MemoryMessageRepository(tables, self.events)
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

    def __call__(self) -> AbstractAsyncContextManager[UnitOfWork]:
        """A new unit of work (an async context manager)."""
        return self._unit()

    def read_only(self) -> AbstractAsyncContextManager[UnitOfWork]:
        """A unit for reads (the same serialized unit; it is never committed)."""
        return self._unit()
