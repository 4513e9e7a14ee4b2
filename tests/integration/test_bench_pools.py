"""A benchmark's pools are closed when it is stopped while they open.

Found when `make test` ran `python -m bench --floor --quick` and stopped it with SIGINT
right after its first line: the stop fell inside `open_traced_pool`, whose pool was open
but not yet returned, so nobody closed it. Its workers went on reconnecting to the
dropped database, then to the stopped server, and the process never ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from bench.harness import open_traced_pool
from bench.roundtrips import census_pool

#: How long the opening runs before it is stopped: any bound works, since a pool on a
#: database that does not exist can never finish opening.
STOP_AFTER_SECONDS = 0.2

OPENERS: dict[str, Callable[[str], Awaitable[Any]]] = {
    "traced": lambda conninfo: open_traced_pool(conninfo, 2),
    "census": census_pool,
}


@pytest.mark.parametrize("opener", OPENERS, ids=list(OPENERS))
async def test_a_pool_stopped_while_it_opens_leaves_no_worker_behind(
    pg_conninfo: str, opener: str
) -> None:
    missing = f"{pg_conninfo} dbname=turnkeeper_never_created"
    before = asyncio.all_tasks()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(STOP_AFTER_SECONDS):
            await OPENERS[opener](missing)
    # The pool's workers and connection attempts ended with it.
    assert asyncio.all_tasks() - before == set()
