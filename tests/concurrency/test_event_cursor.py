"""A reader paging the event log by seq never skips an event that commits late.

The dangerous moment is a unit that has inserted its events but has not committed yet:
if a later seq could become readable first, a reader would move its cursor past the
earlier one and never see it. The PostgreSQL log numbers events by their writer's
transaction id and serves only seqs below the horizon of the oldest running transaction
(ADR 0020): later writers do not wait for the held unit, but nothing of theirs is
readable until it ends.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import partial

import pytest
from psycopg_pool import AsyncConnectionPool

from tests.support.locks import backend_pid
from turnkeeper.adapters.postgres.events import PostgresEventLog
from turnkeeper.adapters.postgres.pool import PoolPolicy
from turnkeeper.adapters.postgres.uow import (
    Conn,
    PostgresUnitOfWork,
    PostgresUnitOfWorkFactory,
    create_pool,
)
from turnkeeper.application.ports import ReaderScope, UnitOfWorkFactory
from turnkeeper.domain.events import EventType, NewEvent

AT = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)

#: `PostgresEventLog.start_flush`.
Seqs = Callable[[], Awaitable[Callable[[], Awaitable[list[int]]]]]
#: Rounds of the held-commit scenario and of the random interleaving.
ROUNDS = 5
#: Units committing while one unit is held in its commit.
WRITERS = 6
#: Events per writer unit.
EVENTS_PER_UNIT = 2
#: Events the reader asks for per page (small, so it pages a lot).
PAGE = 3
#: Upper bound of the random pause of a writer before it commits, in seconds.
JITTER = 0.02

#: ``database.request_timeout`` of the hung-unit test, and the slack of its bound (the
#: reader's polls and the server noticing the severed connection).
HUNG_TIMEOUT_SECONDS = 1.0
HUNG_SLACK_SECONDS = 1.0
#: Polls of the reader in the hung-unit test at most, one per `HUNG_POLL_SECONDS`.
HUNG_POLLS = 2_000
HUNG_POLL_SECONDS = 0.005

READER = uuid.uuid4()
EVERYTHING = ReaderScope(reader_id=READER, everything=True)


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


async def _write(factory: UnitOfWorkFactory, marker: str) -> None:
    async with factory() as uow:
        for index in range(EVENTS_PER_UNIT):
            await uow.events.append(_event(f"{marker}/{index}"))
        await uow.commit()


class Reader:
    """Polls the log with a cursor, as a client of GET /v1/events would."""

    def __init__(self, factory: UnitOfWorkFactory) -> None:
        self.factory = factory
        self.cursor = 0
        self.seen: list[int] = []
        self.markers: list[str] = []

    async def poll(self) -> None:
        async with self.factory() as uow:
            page = await uow.events.read(EVERYTHING, self.cursor, PAGE)
        for event in page:
            assert event.seq > self.cursor, "a page must only move forward"
            self.cursor = event.seq
            self.seen.append(event.seq)
            self.markers.append(str(event.payload["marker"]))

    async def poll_until(self, done: Callable[[], bool]) -> None:
        while not done():
            await self.poll()
            await asyncio.sleep(0)

    async def drain(self, total: int) -> None:
        while len(self.seen) < total:
            before = len(self.seen)
            await self.poll()
            assert len(self.seen) > before, f"stuck at cursor {self.cursor} of {total}"


def _all_done(tasks: list[asyncio.Task[None]]) -> bool:
    return all(task.done() for task in tasks)


async def _all_markers(factory: UnitOfWorkFactory) -> list[str]:
    async with factory() as uow:
        events = await uow.events.read(EVERYTHING, 0, 10_000)
    return [str(e.payload["marker"]) for e in events]


async def test_a_reader_never_skips_an_event_held_in_its_commit(
    pg_pool: AsyncConnectionPool[Conn], monkeypatch: pytest.MonkeyPatch
) -> None:
    factory = PostgresUnitOfWorkFactory(pg_pool)
    reader = Reader(factory)
    expected_total = 0
    for round_no in range(ROUNDS):
        gate = asyncio.Event()
        at_gate = asyncio.Event()
        async with factory() as held:
            assert isinstance(held, PostgresUnitOfWork)
            await held.events.append(_event(f"held-{round_no}"))
            log = held.events
            assert isinstance(log, PostgresEventLog)
            real_start: Seqs = log.start_flush

            async def slow_start(
                release: asyncio.Event = gate,
                reached: asyncio.Event = at_gate,
                start: Seqs = real_start,
            ) -> Callable[[], Awaitable[list[int]]]:
                # The unit queues COMMIT right after the append (ADR 0022): wait for the
                # append's result first, so that the events are inserted; COMMIT waits
                # for the gate.
                seqs = await (await start())()
                reached.set()
                await release.wait()

                async def given(found: list[int] = seqs) -> list[int]:
                    return found

                return given

            monkeypatch.setattr(log, "start_flush", slow_start)
            committing = asyncio.create_task(held.commit())
            await at_gate.wait()
            writers = [
                asyncio.create_task(_write(factory, f"w-{round_no}-{i}")) for i in range(WRITERS)
            ]
            # The writers do not wait for the held unit's commit: they all commit while it
            # is held, and none of their events is readable before it ends.
            assert backend_pid(held) > 0
            await asyncio.gather(*writers)
            before = len(reader.seen)
            await reader.poll()
            assert len(reader.seen) == before
            gate.set()
            await committing
            monkeypatch.undo()
            polling = asyncio.create_task(reader.poll_until(partial(_all_done, writers)))
            await asyncio.gather(*writers)
            await polling
        expected_total += 1 + WRITERS * EVENTS_PER_UNIT
        await reader.drain(expected_total)

    assert reader.seen == sorted(set(reader.seen))
    assert len(reader.seen) == expected_total
    assert reader.markers == await _all_markers(factory)
    assert len(set(reader.markers)) == expected_total


async def test_a_polling_reader_sees_every_event_of_racing_writers(
    pg_uow_factory: UnitOfWorkFactory,
) -> None:
    rng = random.Random(20250301)  # a fixed seed: the same interleavings every run
    reader = Reader(pg_uow_factory)
    expected_total = 0

    async def jittery_write(marker: str) -> None:
        await asyncio.sleep(rng.uniform(0, JITTER))
        await _write(pg_uow_factory, marker)

    for round_no in range(ROUNDS):
        writers = [asyncio.create_task(jittery_write(f"r-{round_no}-{i}")) for i in range(WRITERS)]
        await reader.poll_until(partial(_all_done, writers))
        await asyncio.gather(*writers)
        expected_total += WRITERS * EVENTS_PER_UNIT
        await reader.drain(expected_total)

    assert reader.seen == sorted(set(reader.seen))
    assert len(reader.seen) == expected_total
    assert reader.markers == await _all_markers(pg_uow_factory)


async def test_a_hung_unit_holds_readers_back_at_most_the_request_timeout(
    pg_conninfo: str,
) -> None:
    # A unit that holds a transaction id and then hangs keeps the horizon where it is;
    # at database.request_timeout its connection is severed, the server ends the
    # transaction, and the events committed meanwhile become readable.
    policy = PoolPolicy(request_timeout=HUNG_TIMEOUT_SECONDS, reconnect_max_wait=1, retry_after=1)
    pool = await create_pool(pg_conninfo, 1, 4, policy=policy)
    factory = PostgresUnitOfWorkFactory(pool, policy=policy)
    started, never = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    async def hang() -> None:
        async with factory() as uow:
            assert isinstance(uow, PostgresUnitOfWork)
            await uow.connection.execute("SELECT pg_current_xact_id()")
            started.set()
            await never.wait()

    try:
        hung = asyncio.create_task(hang())
        await started.wait()
        since = loop.time()
        reader = Reader(factory)
        await reader.drain(0)
        before = len(reader.seen)
        await _write(factory, "behind-the-hung-unit")
        await reader.poll()
        assert len(reader.seen) == before, "held back while the hung unit lives"
        for _ in range(HUNG_POLLS):
            await reader.poll()
            if len(reader.seen) > before:
                break
            await asyncio.sleep(HUNG_POLL_SECONDS)
        waited = loop.time() - since
        assert len(reader.seen) == before + EVENTS_PER_UNIT
        assert waited <= HUNG_TIMEOUT_SECONDS + HUNG_SLACK_SECONDS
        hung.cancel()
    finally:
        await pool.close()
