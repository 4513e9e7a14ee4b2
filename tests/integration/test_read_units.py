"""Read-only units on libpq's pipeline (`PipelineLink`), on a real PostgreSQL.

A read-only unit runs its statements on the connection's link, as a write unit does,
but sends no BEGIN: each statement runs in an implicit transaction of its own (no
transaction is open between two of them), a failed statement leaves the connection fit
for the next unit, and a read cut short (cancelled while it waits, as when its reader's
client leaves) collects its statements' answers before it ends, so that its connection
goes back to the pool fit for the next unit instead of being closed and replaced.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from tests.support.locks import backend_pid, wait_until_blocked
from turnkeeper.adapters.postgres.base import Conn
from turnkeeper.adapters.postgres.observers import StatementDone, observe_statements
from turnkeeper.adapters.postgres.pool import PoolPolicy
from turnkeeper.adapters.postgres.uow import (
    PostgresUnitOfWork,
    PostgresUnitOfWorkFactory,
    create_pool,
)

#: Rounds of the failure and cancellation scenarios on one connection.
ROUNDS = 3
#: Turns of the event loop a cancelled unit is watched for (each one delivers anyio's
#: cancellation again).
LOOP_TURNS = 20
#: database.request_timeout of the pool whose blocked read runs into its deadline.
SHORT_TIMEOUT_SECONDS = 1.0
#: Text of the statement `uow.spaces.get` runs.
SPACE_TEXT = "%FROM spaces%"


@pytest.fixture
async def one_pool(pg_conninfo: str) -> AsyncIterator[AsyncConnectionPool[Conn]]:
    """A pool of one connection: every unit runs on the same connection."""
    pool = await create_pool(pg_conninfo, min_size=1, max_size=1)
    try:
        yield pool
    finally:
        await pool.close()


async def test_a_read_only_units_statements_run_on_the_link(
    one_pool: AsyncConnectionPool[Conn],
) -> None:
    seen: list[str] = []

    def observer(conn: Conn, query: str) -> StatementDone | None:
        seen.append(query)
        return None

    stop = observe_statements(observer)
    try:
        async with PostgresUnitOfWorkFactory(one_pool).read_only() as uow:
            assert await uow.spaces.get(uuid.uuid4()) is None
    finally:
        stop()
    assert len(seen) == 1, "no BEGIN, no COMMIT: one statement"
    assert "FROM spaces" in seen[0]
    async with one_pool.connection() as conn:
        cur = await conn.execute(
            "SELECT name FROM pg_prepared_statements WHERE statement LIKE %s", (SPACE_TEXT,)
        )
        names = [row[0] for row in await cur.fetchall()]
        await conn.rollback()
    assert len(names) == 1
    assert names[0].startswith("_tk_"), "prepared by the link"


async def test_no_transaction_is_open_between_two_reads(
    one_pool: AsyncConnectionPool[Conn], pg_conninfo: str
) -> None:
    async with (
        await psycopg.AsyncConnection.connect(pg_conninfo, autocommit=True) as watcher,
        PostgresUnitOfWorkFactory(one_pool).read_only() as uow,
    ):
        pid = backend_pid(uow)
        for _ in range(ROUNDS):
            assert await uow.spaces.get(uuid.uuid4()) is None
            cur = await watcher.execute(
                "SELECT state, xact_start IS NULL FROM pg_stat_activity WHERE pid = %s",
                (pid,),
            )
            assert await cur.fetchone() == ("idle", True)


async def test_a_failed_read_leaves_the_connection_fit(
    one_pool: AsyncConnectionPool[Conn],
) -> None:
    factory = PostgresUnitOfWorkFactory(one_pool)

    async def failing_read() -> None:
        async with factory.read_only() as uow:
            assert isinstance(uow, PostgresUnitOfWork)
            await uow.connection.execute("SELECT 1 / %(p1)s", {"p1": 0})
            await uow.spaces.get(uuid.uuid4())

    for _ in range(ROUNDS):
        with pytest.raises(psycopg.errors.DivisionByZero):
            await failing_read()
        async with factory.read_only() as uow:
            assert await uow.spaces.get(uuid.uuid4()) is None
        async with factory() as uow:
            assert await uow.spaces.get(uuid.uuid4()) is None
            await uow.commit()


async def _blocked_read(
    factory: PostgresUnitOfWorkFactory,
    pg_conninfo: str,
    holder: psycopg.AsyncConnection[Any],
    *,
    read_only: bool = True,
) -> tuple[asyncio.Task[None], list[int]]:
    """A unit reading behind the holder's table lock, its backend pid recorded."""

    async def read(pids: list[int]) -> None:
        async with factory.read_only() if read_only else factory() as uow:
            pids.append(backend_pid(uow))
            await uow.spaces.get(uuid.uuid4())

    pids: list[int] = []
    reading = asyncio.create_task(read(pids))
    await wait_until_blocked(pg_conninfo, holder.info.backend_pid)
    return reading, pids


@pytest.mark.parametrize("read_only", [True, False], ids=["read unit", "write unit"])
async def test_a_unit_cancelled_while_it_waits_keeps_its_connection(
    one_pool: AsyncConnectionPool[Conn], pg_conninfo: str, read_only: bool
) -> None:
    factory = PostgresUnitOfWorkFactory(one_pool)
    for _ in range(ROUNDS):
        async with await psycopg.AsyncConnection.connect(pg_conninfo) as holder:
            await holder.execute("LOCK TABLE spaces IN ACCESS EXCLUSIVE MODE")
            reading, pids = await _blocked_read(factory, pg_conninfo, holder, read_only=read_only)
            reading.cancel()
            await asyncio.sleep(0)  # one turn of the loop: the task takes its cancellation
            assert not reading.done(), "the cancelled read collects its statement's answer"
            await holder.rollback()
            with pytest.raises(asyncio.CancelledError):
                await reading
        async with factory() as uow:
            assert backend_pid(uow) == pids[0], "the pool kept the connection"
            assert await uow.spaces.get(uuid.uuid4()) is None
            await uow.commit()


async def test_a_unit_in_a_cancelled_anyio_scope_keeps_its_connection(
    one_pool: AsyncConnectionPool[Conn], pg_conninfo: str
) -> None:
    """Litestar streams answers in an anyio task group, whose cancellation is delivered
    again at every wait of its tasks until they end."""
    factory = PostgresUnitOfWorkFactory(one_pool)
    scopes: list[anyio.CancelScope] = []
    pids: list[int] = []

    async def read_in_a_task_group() -> None:
        async with anyio.create_task_group() as group:
            scopes.append(group.cancel_scope)
            async with factory.read_only() as uow:
                pids.append(backend_pid(uow))
                await uow.spaces.get(uuid.uuid4())

    async with await psycopg.AsyncConnection.connect(pg_conninfo) as holder:
        await holder.execute("LOCK TABLE spaces IN ACCESS EXCLUSIVE MODE")
        reading = asyncio.create_task(read_in_a_task_group())
        await wait_until_blocked(pg_conninfo, holder.info.backend_pid)
        scopes[0].cancel()
        for _ in range(LOOP_TURNS):
            await asyncio.sleep(0)  # turns of the loop: anyio cancels again in each
        assert not reading.done(), "the cancelled read collects its statement's answer"
        await holder.rollback()
        await reading  # the task group's own cancellation ends in the group
    async with factory.read_only() as uow:
        assert backend_pid(uow) == pids[0], "the pool kept the connection"


async def test_a_cancelled_read_still_blocked_ends_at_its_deadline(
    pg_conninfo: str,
) -> None:
    policy = PoolPolicy(request_timeout=SHORT_TIMEOUT_SECONDS, reconnect_max_wait=1, retry_after=1)
    pool = await create_pool(pg_conninfo, min_size=1, max_size=1, policy=policy)
    try:
        factory = PostgresUnitOfWorkFactory(pool, policy=policy)
        async with await psycopg.AsyncConnection.connect(pg_conninfo) as holder:
            await holder.execute("LOCK TABLE spaces IN ACCESS EXCLUSIVE MODE")
            reading, pids = await _blocked_read(factory, pg_conninfo, holder)
            reading.cancel()
            # The lock is never released while the read waits: the unit's deadline
            # (database.request_timeout) severs the connection, which ends the wait.
            with pytest.raises(asyncio.CancelledError):
                await reading
            await holder.rollback()
        async with factory.read_only() as uow:
            assert backend_pid(uow) != pids[0], "the severed connection was replaced"
            assert await uow.spaces.get(uuid.uuid4()) is None
    finally:
        await pool.close()
