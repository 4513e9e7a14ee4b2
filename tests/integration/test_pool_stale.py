"""A connection the server closed while it rested in the pool is never handed out.

After PostgreSQL restarts (or an administrator terminates backends), every idle
connection of a pool is dead, and the pool learns it only by using one: each used to
cost a request its answer (503 ``unavailable``), one request per idle connection, with
the database back and serving. The pool now looks at an idle connection's socket when
it hands it out (a poll, no round trip): a connection the server closed is discarded and
the next one is taken.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from turnkeeper.adapters.postgres.pool import Conn, PoolPolicy, connection_within, open_pool
from turnkeeper.application.settings import Settings

#: Idle connections of the pool, all terminated at once.
POOL_SIZE = 4
#: Seconds a unit may take (the pool's request bound).
BOUND_SECONDS = 10.0
#: Rounds of terminating every idle connection.
ROUNDS = 3


@pytest.fixture
async def pool(pg_conninfo: str) -> AsyncIterator[AsyncConnectionPool[Conn]]:
    opened = await open_pool(
        pg_conninfo,
        min_size=POOL_SIZE,
        max_size=POOL_SIZE,
        policy=PoolPolicy.from_settings(Settings()),
    )
    try:
        yield opened
    finally:
        await opened.close()


async def _backends(pool: AsyncConnectionPool[Conn]) -> list[int]:
    """The backend pids of every connection of the pool, all idle again after."""
    taken = [await pool.getconn() for _ in range(POOL_SIZE)]
    try:
        return [conn.info.backend_pid for conn in taken]
    finally:
        for conn in taken:
            await pool.putconn(conn)


async def _terminate(conninfo: str, pids: list[int]) -> None:
    """Terminate backends from outside the pool, and wait until they are gone."""
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as admin:
        await admin.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM unnest(%s::int[]) AS pid", [pids]
        )


async def test_every_unit_after_the_server_closed_the_idle_connections_succeeds(
    pool: AsyncConnectionPool[Conn], pg_conninfo: str
) -> None:
    for _ in range(ROUNDS):
        await _terminate(pg_conninfo, await _backends(pool))
        for _ in range(POOL_SIZE + 1):
            async with connection_within(pool, BOUND_SECONDS) as conn:
                cursor = await conn.execute("SELECT 1")
                assert await cursor.fetchone() == (1,)


async def test_a_live_idle_connection_is_handed_out_as_it_is(
    pool: AsyncConnectionPool[Conn],
) -> None:
    before = await _backends(pool)
    assert sorted(await _backends(pool)) == sorted(before)
