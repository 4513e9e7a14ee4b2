"""The fixture of the wire census tests: a bench world, and the same world on a census pool.

`bench.roundtrips.census_pool` counts every round trip and statement a connection sends;
`census_worlds` yields a world built on an ordinary traced pool and the same world rebound
to a census pool, so that a test counts one operation's exchange and nothing of its set-up.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bench.harness import open_traced_pool
from bench.roundtrips import census_pool
from bench.world import BenchWorld, build_world, rebind

#: Connections of the set-up pool (the world's people, agents and forums are built on it).
CENSUS_POOL_SIZE = 4


@pytest.fixture
async def census_worlds(pg_conninfo: str) -> AsyncIterator[tuple[BenchWorld, BenchWorld]]:
    """A bench world of one worker per side, and the same world on a census pool."""
    pool = await open_traced_pool(pg_conninfo, CENSUS_POOL_SIZE)
    census = await census_pool(pg_conninfo)
    try:
        world = await build_world(pool, 1)
        yield world, rebind(world, census)
    finally:
        await census.close()
        await pool.close()
