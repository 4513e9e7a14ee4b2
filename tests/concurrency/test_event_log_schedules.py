"""The event log's guarantee over random schedules of concurrent writers (ADR 0020).

Writers open units that may take a transaction id early, append a few events, may
insert them before their pause (PostgreSQL only: the rows exist, uncommitted), pause for
a number of round trips inside the open transaction, and commit or roll back. Readers
poll the log with a cursor all along, as clients of GET /v1/events do. Whatever the
schedule, every reader sees every committed event exactly once, never a rolled-back
one, in strictly increasing seqs, and all readers in the same order. The same schedules
run on the memory adapter's model of the rule.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import attrs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg_pool import AsyncConnectionPool

from turnkeeper.adapters.memory import MemoryUnitOfWorkFactory
from turnkeeper.adapters.postgres.events import PostgresEventLog
from turnkeeper.adapters.postgres.uow import Conn, PostgresUnitOfWork, PostgresUnitOfWorkFactory
from turnkeeper.application.ports import ReaderScope, UnitOfWork, UnitOfWorkFactory
from turnkeeper.domain.events import EventType, NewEvent

AT = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
#: Examples per store (each one a whole schedule of writers and readers).
PG_EXAMPLES = 30
MEMORY_EXAMPLES = 60
#: Writers per schedule at most, events per writer at most, pause steps at most.
MAX_WRITERS = 6
MAX_EVENTS = 3
MAX_STEPS = 6
#: Readers polling throughout, and their page size (small, so that they page a lot).
READERS = 2
PAGE = 2
#: Empty polls in a row that end a drain (every writer has ended by then).
DRAIN_TRIES = 3

READER = uuid.uuid4()
EVERYTHING = ReaderScope(reader_id=READER, everything=True)


@attrs.frozen
class Writer:
    """One writer of a schedule."""

    start: int
    events: int
    early_xid: bool
    insert_early: bool
    pause: int
    commit: bool


writers = st.builds(
    Writer,
    start=st.integers(min_value=0, max_value=MAX_STEPS),
    events=st.integers(min_value=1, max_value=MAX_EVENTS),
    early_xid=st.booleans(),
    insert_early=st.booleans(),
    pause=st.integers(min_value=0, max_value=MAX_STEPS),
    commit=st.booleans(),
)
schedules = st.lists(writers, min_size=1, max_size=MAX_WRITERS)


def _event(marker: str) -> NewEvent:
    return NewEvent(
        type=EventType.MESSAGE_UPDATED,
        actor_id=READER,
        actor_kind="person",
        space_id=uuid.uuid4(),
        channel_id=uuid.uuid4(),
        thread_id=uuid.uuid4(),
        resource_kind="message",
        resource_id=uuid.uuid4(),
        resource_version=1,
        payload={"marker": marker},
        created_at=AT,
    )


@attrs.define
class Store:
    """What a schedule needs of a store beyond the ports."""

    factory: UnitOfWorkFactory
    #: One step inside an open unit: a round trip on PostgreSQL, a yield in memory.
    step: Callable[[UnitOfWork], Awaitable[None]]
    #: Take a transaction id now (PostgreSQL assigns one at the first write).
    take_xid: Callable[[UnitOfWork], Awaitable[None]]
    #: Insert the buffered events now (None: the store cannot before commit).
    insert: Callable[[UnitOfWork], Awaitable[None]] | None


async def _yield(_: UnitOfWork) -> None:
    await asyncio.sleep(0)


async def _memory_xid(uow: UnitOfWork) -> None:
    # The memory unit takes its id with its first event; an early one is an event then.
    await asyncio.sleep(0)


def _pg_store(pool: AsyncConnectionPool[Conn]) -> Store:
    async def step(uow: UnitOfWork) -> None:
        assert isinstance(uow, PostgresUnitOfWork)
        await uow.connection.execute("SELECT 1")

    async def take_xid(uow: UnitOfWork) -> None:
        assert isinstance(uow, PostgresUnitOfWork)
        await uow.connection.execute("SELECT pg_current_xact_id()")

    async def insert(uow: UnitOfWork) -> None:
        # The rows exist before COMMIT; the unit's commit inserts nothing more.
        assert isinstance(uow.events, PostgresEventLog)
        await uow.events.flush()

    return Store(PostgresUnitOfWorkFactory(pool), step, take_xid, insert)


async def _write(store: Store, writer: Writer, name: str) -> None:
    for _ in range(writer.start):
        await asyncio.sleep(0)
    async with store.factory() as uow:
        if writer.early_xid:
            await store.take_xid(uow)
        for index in range(writer.events):
            await uow.events.append(_event(f"{name}/{index}"))
        if writer.insert_early and store.insert is not None:
            await store.insert(uow)
        for _ in range(writer.pause):
            await store.step(uow)
        if writer.commit:
            await uow.commit()


class Reader:
    """Polls the log with a cursor and keeps what it saw of this schedule."""

    def __init__(self, factory: UnitOfWorkFactory, cursor: int, prefix: str) -> None:
        self.factory = factory
        self.cursor = cursor
        self.prefix = prefix
        self.seqs: list[int] = []
        self.markers: list[str] = []

    async def poll(self) -> int:
        async with self.factory.read_only() as uow:
            page = await uow.events.read(EVERYTHING, self.cursor, PAGE)
        for event in page:
            assert event.seq > self.cursor, "a page must only move forward"
            self.cursor = event.seq
            marker = str(event.payload["marker"])
            if marker.startswith(self.prefix):
                self.seqs.append(event.seq)
                self.markers.append(marker)
        return len(page)

    async def poll_until(self, done: Callable[[], bool]) -> None:
        while not done():
            await self.poll()
            await asyncio.sleep(0)

    async def drain(self) -> None:
        idle = 0
        while idle < DRAIN_TRIES:
            idle = 0 if await self.poll() else idle + 1


async def _end_of_log(factory: UnitOfWorkFactory) -> int:
    cursor = 0
    while True:
        async with factory.read_only() as uow:
            page = await uow.events.read(EVERYTHING, cursor, 1000)
        if not page:
            return cursor
        cursor = page[-1].seq


async def _run_schedule(store: Store, schedule: list[Writer]) -> None:
    prefix = f"{uuid.uuid4()}:"
    start = await _end_of_log(store.factory)
    readers = [Reader(store.factory, start, prefix) for _ in range(READERS)]
    tasks = [
        asyncio.create_task(_write(store, writer, f"{prefix}{number}"))
        for number, writer in enumerate(schedule)
    ]

    def done() -> bool:
        return all(task.done() for task in tasks)

    await asyncio.gather(*(reader.poll_until(done) for reader in readers), *tasks)
    for reader in readers:
        await reader.drain()
    committed = {
        f"{prefix}{number}/{index}"
        for number, writer in enumerate(schedule)
        if writer.commit
        for index in range(writer.events)
    }
    for reader in readers:
        assert reader.seqs == sorted(set(reader.seqs)), "no event twice, seqs only grow"
        assert set(reader.markers) == committed, "every committed event, nothing else"
        assert len(reader.markers) == len(committed)
    assert all(reader.markers == readers[0].markers for reader in readers), "one order"


@settings(
    max_examples=PG_EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(schedule=schedules)
async def test_postgresql_readers_never_skip_nor_repeat_whatever_the_schedule(
    pg_pool: AsyncConnectionPool[Conn], schedule: list[Writer]
) -> None:
    await _run_schedule(_pg_store(pg_pool), schedule)


@settings(max_examples=MEMORY_EXAMPLES, deadline=None, database=None, derandomize=True)
@given(schedule=schedules)
async def test_memory_readers_never_skip_nor_repeat_whatever_the_schedule(
    schedule: list[Writer],
) -> None:
    store = Store(MemoryUnitOfWorkFactory(), _yield, _memory_xid, None)
    await _run_schedule(store, schedule)
