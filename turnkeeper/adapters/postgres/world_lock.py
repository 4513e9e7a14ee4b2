"""The setup of the world is one process at a time: the world setup lock (ADR 0041).

Replicas of a deployment start together on one new database, and each finds no owner
(or an empty world) and makes one: the second one's insert failed on the principals'
unique handle and the process exited. The setup (`turnkeeper.adapters.world_setup`)
runs under a session advisory lock taken on a connection of its own: the process that
comes second waits, then finds what the first one made. The lock goes back with its
connection, so a process that dies while it sets up holds nobody up.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.postgres.errors import wrap_errors

#: The key of the lock (an arbitrary constant that no other part of turnkeeper uses: the
#: first 8 bytes of sha256("turnkeeper.world-setup")).
WORLD_SETUP_LOCK_KEY = int.from_bytes(
    hashlib.sha256(b"turnkeeper.world-setup").digest()[:8], "big", signed=True
)
#: ``application_name`` of the lock's connection (visible in pg_stat_activity).
WORLD_SETUP_APPLICATION_NAME = "turnkeeper-world-setup"


@asynccontextmanager
async def world_setup_lock(conninfo: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """Hold the world setup lock for the duration of a block, waiting for it first.

    Args:
        conninfo: libpq connection string or URI of the database.

    Yields:
        The connection that holds the lock (closed when the block ends, which gives the
        lock back).

    Raises:
        StoreUnavailable: the database cannot be reached.
    """
    with wrap_errors():
        conn = await psycopg.AsyncConnection.connect(
            make_conninfo(conninfo, application_name=WORLD_SETUP_APPLICATION_NAME),
            autocommit=True,
        )
    async with conn:
        with wrap_errors():
            await q.take_world_setup_lock(conn, lock_key=WORLD_SETUP_LOCK_KEY)
        yield conn
