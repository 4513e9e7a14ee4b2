"""The pool hands out the idle connection returned last first (ADR 0035).

psycopg_pool takes the connection that has rested longest, so units went round every
backend of a pool larger than their concurrency. `RecentFirstPool` takes the one
returned last; these tests pin that order on a real PostgreSQL, and pin psycopg_pool's
own order that the class turns around (a change there must fail here, not silently
make the pool first in, first out again).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from psycopg_pool import AsyncConnectionPool

from turnkeeper.adapters.postgres.pool import (
    Conn,
    PoolPolicy,
    RecentFirstPool,
    connection_within,
    open_pool,
)
from turnkeeper.application.settings import Settings

#: Connections of the pools of these tests (more than the one or two units in flight).
POOL_SIZE = 4
#: Units run one after the other, or two at a time.
UNITS = 24
#: Seconds a unit may take (the pool's request bound).
BOUND_SECONDS = 10.0


@pytest.fixture
async def recent_first(pg_conninfo: str) -> AsyncIterator[AsyncConnectionPool[Conn]]:
    pool = await open_pool(
        pg_conninfo,
        min_size=POOL_SIZE,
        max_size=POOL_SIZE,
        policy=PoolPolicy.from_settings(Settings()),
    )
    try:
        yield pool
    finally:
        await pool.close()


async def _handed_out_after_returning(pool: AsyncConnectionPool[Conn]) -> list[int]:
    """Take every connection, return them in order, take them again: their positions."""
    taken = [await pool.getconn() for _ in range(POOL_SIZE)]
    for conn in taken:
        await pool.putconn(conn)
    again = [await pool.getconn() for _ in range(POOL_SIZE)]
    try:
        return [taken.index(conn) for conn in again]
    finally:
        for conn in again:
            await pool.putconn(conn)


async def test_the_pool_of_open_pool_hands_out_the_connection_returned_last_first(
    recent_first: AsyncConnectionPool[Conn],
) -> None:
    assert isinstance(recent_first, RecentFirstPool)
    assert await _handed_out_after_returning(recent_first) == [3, 2, 1, 0]


async def test_psycopg_pools_own_order_is_first_in_first_out(pg_conninfo: str) -> None:
    # The order RecentFirstPool turns around: if psycopg_pool changes it, this fails.
    pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
        pg_conninfo, min_size=POOL_SIZE, max_size=POOL_SIZE, open=False
    )
    await pool.open(wait=True)
    try:
        assert await _handed_out_after_returning(pool) == [0, 1, 2, 3]
    finally:
        await pool.close()


async def _backend(pool: AsyncConnectionPool[Conn]) -> int:
    async with connection_within(pool, BOUND_SECONDS) as conn:
        await conn.execute("SELECT 1")
        return conn.info.backend_pid


async def test_units_one_after_the_other_keep_to_one_backend(
    recent_first: AsyncConnectionPool[Conn],
) -> None:
    backends = {await _backend(recent_first) for _ in range(UNITS)}
    assert len(backends) == 1


async def test_two_units_at_a_time_keep_to_two_backends(
    recent_first: AsyncConnectionPool[Conn],
) -> None:
    used: set[int] = set()
    for _ in range(UNITS // 2):
        used.update(await asyncio.gather(_backend(recent_first), _backend(recent_first)))
    assert len(used) <= 2
