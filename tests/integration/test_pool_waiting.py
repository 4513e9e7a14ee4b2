"""The pool's ``requests_waiting`` counts the units waiting for a connection now.

It feeds ``turnkeeper_db_pool_connections{state="waiting"}``. psycopg_pool keeps a
client that gave up waiting (timed out, cancelled) in its queue until a connection comes
back to the pool, which never happens while the database is down, and counts it as
waiting; these tests pin that behaviour of psycopg_pool's own pool (a change there must
fail here, so that our count can go) and that ours counts only the units still waiting:
each on a real PostgreSQL, with a pool of one connection that the test holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from turnkeeper.adapters.postgres.pool import Conn, PoolPolicy, connection_within, open_pool
from turnkeeper.application.settings import Settings

#: Seconds a unit that must time out waits for its connection.
SHORT_SECONDS = 0.1
#: Seconds a unit that must not time out may wait for its connection.
LONG_SECONDS = 30.0
#: Event-loop turns a waiting unit may take to reach the pool's queue, at most.
TURNS = 1000


@pytest.fixture
async def pool_of_one(pg_conninfo: str) -> AsyncIterator[AsyncConnectionPool[Conn]]:
    pool = await open_pool(
        pg_conninfo, min_size=1, max_size=1, policy=PoolPolicy.from_settings(Settings())
    )
    try:
        yield pool
    finally:
        await pool.close()


def waiting(pool: AsyncConnectionPool[Conn]) -> int:
    return pool.get_stats().get("requests_waiting", 0)


async def until(condition: Callable[[], bool]) -> None:
    """Let the event loop run until `condition` holds (at most `TURNS` turns)."""
    for _ in range(TURNS):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


async def until_queued(pool: AsyncConnectionPool[Conn], count: int) -> None:
    """Until `count` units have entered psycopg_pool's queue of waiting clients."""
    await until(lambda: pool.get_stats().get("requests_queued", 0) >= count)


async def a_unit(pool: AsyncConnectionPool[Conn], seconds: float) -> None:
    async with connection_within(pool, seconds) as conn:
        await conn.execute("SELECT 1")


async def test_psycopg_pools_own_count_keeps_the_units_that_timed_out(pg_conninfo: str) -> None:
    # The count that our pool replaces: if psycopg_pool fixes it, this fails.
    pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
        pg_conninfo, min_size=1, max_size=1, open=False
    )
    await pool.open(wait=True)
    try:
        held = await pool.getconn()
        for _ in range(2):
            with pytest.raises(PoolTimeout):
                await pool.getconn(timeout=SHORT_SECONDS)
        assert waiting(pool) == 2
        await pool.putconn(held)
    finally:
        await pool.close()


async def test_units_that_timed_out_waiting_are_no_longer_counted(
    pool_of_one: AsyncConnectionPool[Conn],
) -> None:
    held = await pool_of_one.getconn()
    try:
        answers = await asyncio.gather(
            a_unit(pool_of_one, SHORT_SECONDS),
            a_unit(pool_of_one, SHORT_SECONDS),
            return_exceptions=True,
        )
        assert [type(answer) for answer in answers] == [PoolTimeout, PoolTimeout]
        assert pool_of_one.get_stats()["requests_queued"] == 2
        assert waiting(pool_of_one) == 0
    finally:
        await pool_of_one.putconn(held)


async def test_a_unit_waiting_is_counted_until_it_gets_its_connection(
    pool_of_one: AsyncConnectionPool[Conn],
) -> None:
    held = await pool_of_one.getconn()
    unit = asyncio.create_task(a_unit(pool_of_one, LONG_SECONDS))
    try:
        await until_queued(pool_of_one, 1)
        assert waiting(pool_of_one) == 1
    finally:
        await pool_of_one.putconn(held)
    await unit
    assert waiting(pool_of_one) == 0


async def test_a_cancelled_unit_is_no_longer_counted(
    pool_of_one: AsyncConnectionPool[Conn],
) -> None:
    held = await pool_of_one.getconn()
    try:
        unit = asyncio.create_task(a_unit(pool_of_one, LONG_SECONDS))
        await until_queued(pool_of_one, 1)
        assert waiting(pool_of_one) == 1
        unit.cancel()
        with pytest.raises(asyncio.CancelledError):
            await unit
        assert waiting(pool_of_one) == 0
    finally:
        await pool_of_one.putconn(held)
