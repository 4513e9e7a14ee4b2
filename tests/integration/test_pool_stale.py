"""A connection the server closed while it rested in the pool is never handed out.

After PostgreSQL restarts (or an administrator terminates backends), every idle
connection of a pool is dead, and the pool learns it only by using one: each used to
cost a request its answer (503 ``unavailable``), one request per idle connection, with
the database back and serving. The pool now looks at an idle connection's socket when
it hands it out (a poll, no round trip): a connection the server closed is discarded and
the next one is taken. Over a Unix socket and over TCP (where Linux reports the
server's close differently): the test's PostgreSQL listens on a Unix socket only, so a
forwarder in the test gives it a TCP address.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import attrs
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool

from turnkeeper.adapters.postgres.pool import Conn, PoolPolicy, connection_within, open_pool
from turnkeeper.application.settings import Settings

#: Idle connections of the pool, all terminated at once.
POOL_SIZE = 4
#: Seconds a unit may take (the pool's request bound).
BOUND_SECONDS = 10.0
#: Rounds of terminating every idle connection.
ROUNDS = 3


#: PostgreSQL's default port (the number in the name of its Unix socket).
DEFAULT_PORT = 5432
#: Bytes a forwarder reads at once.
CHUNK_BYTES = 65536


@attrs.define
class _Route:
    """How the pool reaches the test database, and the server's closes on the way.

    Attributes:
        conninfo: the pool's connection string.
        forwarded: whether a forwarder in this process relays the connections (TCP).
        closes: connections the forwarder closed towards the pool after the server did.
    """

    conninfo: str
    forwarded: bool = False
    closes: int = 0
    changed: asyncio.Condition = attrs.Factory(asyncio.Condition)

    async def closed(self) -> None:
        """Count one close relayed to the pool."""
        async with self.changed:
            self.closes += 1
            self.changed.notify_all()

    async def relayed(self, count: int) -> None:
        """Wait until `count` closes reached the pool (at once without a forwarder)."""
        if not self.forwarded:
            return
        async with self.changed:
            await self.changed.wait_for(lambda: self.closes >= count)


async def _pipe(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    ended: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Copy one direction until its end, then close the other side (a TCP FIN)."""
    try:
        while data := await reader.read(CHUNK_BYTES):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()
        if ended is not None:
            await ended()


@contextlib.asynccontextmanager
async def _tcp_forwarder(conninfo: str) -> AsyncIterator[_Route]:
    """A TCP address on 127.0.0.1 for a server that listens on a Unix socket only.

    Yields:
        The route: `conninfo` with the forwarder's host and port.
    """
    params = conninfo_to_dict(conninfo)
    socket_path = Path(str(params["host"])) / f".s.PGSQL.{params.get('port') or DEFAULT_PORT}"
    pipes: set[asyncio.Task[None]] = set()
    route = _Route(conninfo="", forwarded=True)

    async def forward(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_unix_connection(str(socket_path))
        for task in (_pipe(client_r, server_w), _pipe(server_r, client_w, route.closed)):
            pipe = asyncio.create_task(task)
            pipes.add(pipe)
            pipe.add_done_callback(pipes.discard)

    server = await asyncio.start_server(forward, "127.0.0.1", 0)
    route.conninfo = make_conninfo(
        conninfo, host="127.0.0.1", port=str(server.sockets[0].getsockname()[1])
    )
    try:
        yield route
    finally:
        server.close()
        for pipe in list(pipes):
            pipe.cancel()
        await asyncio.gather(*pipes, return_exceptions=True)


@pytest.fixture(params=["unix", "tcp"])
async def route(request: pytest.FixtureRequest, pg_conninfo: str) -> AsyncIterator[_Route]:
    """The test database over its Unix socket, or over TCP through a forwarder."""
    if request.param == "unix":
        yield _Route(conninfo=pg_conninfo)
        return
    async with _tcp_forwarder(pg_conninfo) as tcp:
        yield tcp


@pytest.fixture
async def pool(route: _Route) -> AsyncIterator[AsyncConnectionPool[Conn]]:
    opened = await open_pool(
        route.conninfo,
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
    pool: AsyncConnectionPool[Conn], route: _Route, pg_conninfo: str
) -> None:
    for _ in range(ROUNDS):
        pids = await _backends(pool)
        before = route.closes
        await _terminate(pg_conninfo, pids)
        # Through the forwarder, the closes reach the pool once it has relayed them.
        await asyncio.wait_for(route.relayed(before + len(pids)), BOUND_SECONDS)
        for _ in range(POOL_SIZE + 1):
            async with connection_within(pool, BOUND_SECONDS) as conn:
                cursor = await conn.execute("SELECT 1")
                assert await cursor.fetchone() == (1,)


async def test_a_live_idle_connection_is_handed_out_as_it_is(
    pool: AsyncConnectionPool[Conn],
) -> None:
    before = await _backends(pool)
    assert sorted(await _backends(pool)) == sorted(before)
