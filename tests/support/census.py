"""The wire census of the tests: one operation's round trips and statements, counted.

`bench.roundtrips.census_pool` counts every round trip and statement a connection sends;
`census_worlds` yields a world built on an ordinary traced pool and the same world rebound
to a census pool, and `on_the_wire` counts one item of an operation on one side on it,
after uncounted items of the same path, so that nothing of the set-up is counted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal, cast

import pytest

from bench.asgi import AsgiClient
from bench.harness import open_traced_pool
from bench.operations import Item, Operation
from bench.roundtrips import Exchange, census_pool, counted
from bench.world import BenchWorld, build_world, rebind
from turnkeeper.adapters.http.app import create_app

#: Connections of the set-up pool (the world's people, agents and forums are built on it).
CENSUS_POOL_SIZE = 4
#: Items per side in the census: the last is counted, the one before it prepares the
#: statements of its path on the census connection (a held send has one more: the first
#: send of a thread is sent, whatever its frontier).
CENSUS_ITEMS = 2


@pytest.fixture
async def census_worlds(pg_conninfo: str) -> AsyncIterator[tuple[BenchWorld, BenchWorld]]:
    """A bench world of one worker per side, and the same world on a census pool."""
    pool = await open_traced_pool(pg_conninfo, CENSUS_POOL_SIZE)
    try:
        census = await census_pool(pg_conninfo)
    except BaseException:
        await pool.close()
        raise
    try:
        world = await build_world(pool, 1)
        yield world, rebind(world, census)
    finally:
        await census.close()
        await pool.close()


async def on_the_wire(
    worlds: tuple[BenchWorld, BenchWorld],
    operation: Operation,
    side: Literal["service", "raw", "http"],
    *,
    held: bool = False,
) -> Exchange:
    """One item of `operation` on `side`, counted on the wire after uncounted ones.

    Args:
        worlds: what `census_worlds` yields.
        operation: the operation.
        side: the application service, the raw loop, or the HTTP app in-process.
        held: count a gated send held for a frontier one behind its thread's.

    Returns:
        The counted item's round trips and statements.
    """
    world, traced = worlds
    call = {"service": operation.service, "raw": operation.raw, "http": operation.http}[side]
    assert call is not None, f"{operation.name} has no {side} side"
    # The service and raw sides never use the ASGI client.
    asgi = (
        AsgiClient(create_app(traced.services, traced.services.settings))
        if side == "http"
        else cast("Any", None)
    )
    items = CENSUS_ITEMS + 1 if held else CENSUS_ITEMS
    work = await operation.prepare(world, [world.workers[side][0]], items)
    *before, last = work[0]

    def behind(item: Item) -> Item:
        # A frontier one behind the thread's: the send is held.
        if held:
            assert item.sender is not None
            assert item.thread_id is not None
            item.sender.known[item.thread_id] -= 1
        return item

    if held:
        await call(traced, asgi, before.pop(0))
    for item in before:
        await call(traced, asgi, behind(item))
    async with counted(traced.pool) as exchange:
        await call(traced, asgi, behind(last))
    return exchange
