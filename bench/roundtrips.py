"""Round trips and statements per operation, counted from libpq's own protocol trace.

Statement names come from `bench.harness.traced` (psycopg level, cheap enough to stay on
while timing). Round trips cannot be counted there: psycopg sends ``BEGIN`` inside the
first ``execute`` and a pipeline sends many statements before it waits once. libpq's
trace (``PQtrace``) writes every protocol message, so a census counts, per operation:

- **round trips**: the client's requests for an answer, after each of which it waits:
  ``Sync`` (extended protocol; the server answers ``ReadyForQuery``), simple ``Query``,
  and ``Flush`` (psycopg's pipeline mode asks for the results queued so far with a
  Flush when a row is fetched; the server answers without ``ReadyForQuery``). One per
  wait, however many statements went before it: requests sent with no answer between
  them (leaving a pipeline sends a Sync, then a Flush) are one wait;
- **statements**: ``Execute`` and simple ``Query`` messages from the client, ``BEGIN``
  and ``COMMIT`` included.

Tracing writes a line per message, so it runs only in the census (a few untimed items
on a pool of one connection, `census_pool`), never while a measurement is timed.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import attrs
from psycopg import IsolationLevel, pq
from psycopg_pool import AsyncConnectionPool

from bench.harness import PREPARE_THRESHOLD, TracingConnection, TracingCursor
from turnkeeper.adapters.postgres.pool import opened
from turnkeeper.adapters.postgres.uow import Conn


@attrs.define
class Exchange:
    """What one connection exchanged with the server inside `counted`.

    Attributes:
        round_trips: ``Sync``, ``Query`` and ``Flush`` messages sent (waits for an answer).
        statements: ``Execute`` and ``Query`` messages sent (BEGIN and COMMIT included).
    """

    round_trips: int = 0
    statements: int = 0


def count_trace(text: str) -> Exchange:
    """Count round trips and statements in a libpq trace.

    Args:
        text: the trace, one message per line (``F``/``B``, length, message type, ...).

    Returns:
        The counts.
    """
    found = Exchange()
    waiting = False
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) < 3:
            continue
        direction, message = fields[0], fields[2].strip()
        if direction != "F":
            waiting = False
            continue
        if message in ("Sync", "Query", "Flush") and not waiting:
            found.round_trips += 1
            waiting = True
        if message in ("Execute", "Query"):
            found.statements += 1
    return found


async def _configure(conn: Conn) -> None:
    # As bench.harness's pool: the settings of turnkeeper's own pool.
    await conn.set_autocommit(False)
    await conn.set_isolation_level(IsolationLevel.READ_COMMITTED)
    conn.prepare_threshold = PREPARE_THRESHOLD
    conn.cursor_factory = TracingCursor


async def census_pool(conninfo: str) -> AsyncConnectionPool[Conn]:
    """A pool of exactly one traced connection, for `counted`.

    Args:
        conninfo: the database.

    Returns:
        The open pool.
    """
    pool = AsyncConnectionPool(
        conninfo,
        min_size=1,
        max_size=1,
        open=False,
        configure=_configure,
        connection_class=TracingConnection,
    )
    return cast("AsyncConnectionPool[Conn]", await opened(pool))


def _read_trace(name: str) -> Exchange:
    return count_trace(Path(name).read_text(encoding="utf-8", errors="replace"))


def _drop_trace(handle: int, name: str) -> None:
    os.close(handle)
    Path(name).unlink(missing_ok=True)


@contextlib.asynccontextmanager
async def counted(pool: AsyncConnectionPool[Conn]) -> AsyncIterator[Exchange]:
    """Count what the pool's one connection exchanges inside the block.

    Taking the connection to switch the trace on and off sends nothing to the server
    (the pool runs no check on checkout or return).

    Args:
        pool: a pool of one connection (`census_pool`).

    Yields:
        The counts, filled in when the block ends.
    """
    found = Exchange()
    handle, name = tempfile.mkstemp(prefix="turnkeeper-bench-trace-")
    try:
        async with pool.connection() as conn:
            pgconn = cast("Any", conn.pgconn)
            pgconn.trace(handle)
            pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield found
        finally:
            async with pool.connection() as conn:
                # PQuntrace flushes libpq's buffered trace into the file.
                cast("Any", conn.pgconn).untrace()
        counts = _read_trace(name)
        found.round_trips, found.statements = counts.round_trips, counts.statements
    finally:
        _drop_trace(handle, name)


__all__ = ["Exchange", "census_pool", "count_trace", "counted"]
