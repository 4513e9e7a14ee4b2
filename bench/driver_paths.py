"""The driver table: a message's statement shape through psycopg's pipeline and through libpq's.

``python -m bench.driver_paths [--quick]`` measures what the driver alone costs for the
shape of a message that triggers nothing (docs/performance.md, "Where a message's server
CPU goes, and the interpreter"): ``BEGIN``, a read of 11 parameters that returns one row
of 33 columns (as ``GetPostFacts``), a statement of 25 parameters that returns one value
(as ``InsertMessageWithEvent``) and ``COMMIT``, in two round trips, on two paths:

- ``psycopg``: psycopg's cursors in its pipeline mode, as the write unit runs them
  (ADR 0022): an autocommit connection, the unit's own BEGIN, every statement prepared
  (``prepare_threshold`` 0), COMMIT queued behind the write;
- ``libpq``: the same statements, prepared once per connection, sent through libpq's
  pipeline mode with psycopg's wrapper of libpq (`psycopg.pq`) directly: parameters
  dumped and the row loaded by psycopg's `Transformer`, the socket awaited on the event
  loop, no cursor and no pipeline object of psycopg's.

The statements are synthetic (casts of their parameters), so that the table needs no
schema and measures the driver, not PostgreSQL. Each path runs on its own connections
in interleaved rounds; per path the median round's operations per second and CPU
milliseconds of this process per operation (`time.process_time`), and the ratio of
the two. Both paths must return the same rows (checked every round).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

import attrs
import psycopg
from psycopg import pq
from psycopg.adapt import PyFormat, Transformer

from bench.harness import BENCH_DATABASE_PREFIX, bench_server, run_stoppable
from turnkeeper.adapters.postgres.databases import scratch_database
from turnkeeper.adapters.postgres.sockets import socket_ready
from turnkeeper.adapters.postgres.uow import BEGIN, COMMIT

USAGE = "usage: python -m bench.driver_paths [--quick]"

#: The parameter types of the read, in order (a thread's, a channel's and a caller's kinds).
READ_TYPES = (
    "uuid",
    "text",
    "timestamptz",
    "bool",
    "int8",
    "uuid",
    "text",
    "bool",
    "uuid",
    "text",
    "timestamptz",
)
#: Columns of the read's row (GetPostFacts returns 33).
READ_COLUMNS = 33
#: Parameters of the write (InsertMessageWithEvent takes 25).
WRITE_PARAMETERS = 25
#: The names the libpq path prepares its statements under.
READ_NAME = b"bench_driver_read"
WRITE_NAME = b"bench_driver_write"


def _casts(placeholders: Sequence[str]) -> str:
    """The placeholders, each cast to the next of `READ_TYPES` (round and round)."""
    return ", ".join(f"{p}::{READ_TYPES[i % len(READ_TYPES)]}" for i, p in enumerate(placeholders))


#: The read, in psycopg's placeholders and in PostgreSQL's: 33 columns of 11 parameters.
READ_SQL = "SELECT " + _casts([f"%(p{i % len(READ_TYPES)})s" for i in range(READ_COLUMNS)])
READ_SQL_NATIVE = "SELECT " + _casts([f"${i % len(READ_TYPES) + 1}" for i in range(READ_COLUMNS)])
#: The write: one value out of 25 parameters.
WRITE_SQL = f"SELECT num_nonnulls({_casts(['%s'] * WRITE_PARAMETERS)})"
WRITE_SQL_NATIVE = f"SELECT num_nonnulls({_casts([f'${i + 1}' for i in range(WRITE_PARAMETERS)])})"


def _arguments() -> tuple[dict[str, Any], tuple[Any, ...]]:
    now = datetime(2026, 12, 2, 9, 30, tzinfo=UTC)
    one = uuid.UUID("0190a3b2-0000-7000-8000-000000000001")
    values = (one, "alex", now, True, 7, one, "Invoices", False, one, "Sam, the report.", now)
    read = {f"p{i}": v for i, v in enumerate(values)}
    write = tuple(values[i % len(values)] for i in range(WRITE_PARAMETERS))
    return read, write


@attrs.frozen
class Size:
    """How much a run measures.

    Attributes:
        concurrency: connections per path, each driven by its own task.
        ops: operations per connection and round.
        rounds: measured rounds (one more, discarded, warms up).
    """

    concurrency: int
    ops: int
    rounds: int


FULL = Size(concurrency=8, ops=1000, rounds=5)
QUICK = Size(concurrency=2, ops=20, rounds=1)


@attrs.frozen
class Row:
    """One path's median round.

    Attributes:
        path: ``psycopg`` or ``libpq``.
        per_second: operations per second of all connections.
        cpu_ms: CPU milliseconds of this process per operation.
    """

    path: str
    per_second: float
    cpu_ms: float


Answer = tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]
Operation = Callable[[], Awaitable[Answer]]


async def _psycopg_path(conninfo: str) -> tuple[psycopg.AsyncConnection[Any], Operation]:
    conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True, prepare_threshold=0)
    read_args, write_args = _arguments()

    async def operation() -> Answer:
        async with conn.pipeline():
            await conn.execute(BEGIN, prepare=False)
            read = await conn.execute(READ_SQL, read_args)
            row = await read.fetchone()
            write = await conn.execute(WRITE_SQL, write_args)
            await conn.execute(COMMIT, prepare=False)
        return row, await write.fetchone()

    return conn, operation


class _LibpqPath:
    """The statements on libpq's pipeline through `psycopg.pq`, one connection."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._pg = conn.pgconn
        self._loop = asyncio.get_running_loop()
        self._transformer = Transformer(conn)
        read, self._write_args = _arguments()
        # The read's parameters in their placeholders' order ($1 is p0), taken once.
        self._read_args = tuple(read.values())
        self._read_formats = [PyFormat.TEXT] * len(READ_TYPES)
        self._write_formats = [PyFormat.TEXT] * WRITE_PARAMETERS

    def prepare(self) -> None:
        """Prepare both statements (blocking, before pipeline mode) and enter it."""
        for name, sql in ((READ_NAME, READ_SQL_NATIVE), (WRITE_NAME, WRITE_SQL_NATIVE)):
            result = self._pg.prepare(name, sql.encode())
            if result.status != pq.ExecStatus.COMMAND_OK:
                raise RuntimeError(result.error_message.decode("utf-8", "replace"))
        self._pg.nonblocking = 1
        self._pg.enter_pipeline_mode()

    async def operation(self) -> Answer:
        """BEGIN and the read, a sync; the write and COMMIT, a sync."""
        pg, tx = self._pg, self._transformer
        pg.send_query_params(BEGIN.encode(), None)
        params = tx.dump_sequence(self._read_args, self._read_formats)
        pg.send_query_prepared(READ_NAME, params, param_formats=tx.formats)
        results = await self._sync()
        tx.set_pgresult(results[1])
        row = tx.load_row(0, tuple)
        params = tx.dump_sequence(self._write_args, self._write_formats)
        pg.send_query_prepared(WRITE_NAME, params, param_formats=tx.formats)
        pg.send_query_params(COMMIT.encode(), None)
        results = await self._sync()
        tx.set_pgresult(results[0])
        return row, tx.load_row(0, tuple)

    async def _sync(self) -> list[pq.abc.PGresult]:
        pg = self._pg
        pg.pipeline_sync()
        while pg.flush():
            await self._wait(self._loop.add_writer, self._loop.remove_writer)
        results: list[pq.abc.PGresult] = []
        while True:
            pg.consume_input()
            while not pg.is_busy():
                result = pg.get_result()
                if result is None:
                    continue  # the end of one statement's results
                if result.status == pq.ExecStatus.PIPELINE_SYNC:
                    return results
                if result.status not in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
                    raise RuntimeError(result.error_message.decode("utf-8", "replace"))
                results.append(result)
            await self._wait(self._loop.add_reader, self._loop.remove_reader)

    async def _wait(self, add: Callable[..., object], remove: Callable[[int], object]) -> None:
        await socket_ready(add, remove, self._pg.socket)


async def _libpq_path(conninfo: str) -> tuple[psycopg.AsyncConnection[Any], Operation]:
    conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
    path = _LibpqPath(conn)
    path.prepare()
    return conn, path.operation


PATHS: dict[str, Callable[[str], Awaitable[tuple[psycopg.AsyncConnection[Any], Operation]]]] = {
    "psycopg": _psycopg_path,
    "libpq": _libpq_path,
}


async def _round(operations: Sequence[Operation], ops: int) -> tuple[float, float, Answer]:
    answers: list[Answer] = []

    async def drive(operation: Operation) -> None:
        for _ in range(ops):
            answers.append(await operation())

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(drive(op) for op in operations))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    done = len(operations) * ops
    assert len(set(answers)) == 1, "every operation returns the same rows"
    return done / wall, cpu * 1000 / done, answers[0]


async def measure(conninfo: str, size: Size) -> list[Row]:
    """Run both paths in interleaved rounds on a scratch database of `conninfo`'s server.

    Args:
        conninfo: any database of the server.
        size: connections, operations and rounds.

    Returns:
        Each path's median round (by CPU per operation), psycopg's first.

    Raises:
        AssertionError: the two paths returned different rows.
    """
    async with scratch_database(conninfo, prefix=BENCH_DATABASE_PREFIX) as database:
        opened = {
            name: [await open_path(database) for _ in range(size.concurrency)]
            for name, open_path in PATHS.items()
        }
        try:
            rounds: dict[str, list[tuple[float, float]]] = {name: [] for name in PATHS}
            answers: dict[str, Answer] = {}
            for index in range(size.rounds + 1):
                for name, paths in opened.items():
                    per_second, cpu_ms, answers[name] = await _round(
                        [op for _, op in paths], size.ops
                    )
                    if index:
                        rounds[name].append((per_second, cpu_ms))
                assert answers["psycopg"] == answers["libpq"], answers
        finally:
            for paths in opened.values():
                for conn, _ in paths:
                    await conn.close()
    return [
        Row(
            path=name,
            per_second=statistics.median(r[0] for r in measured),
            cpu_ms=statistics.median(r[1] for r in measured),
        )
        for name, measured in rounds.items()
    ]


def report(rows: Sequence[Row], size: Size, out: TextIO) -> None:
    """Print the table.

    Args:
        rows: `measure`'s rows, psycopg's first.
        size: what was measured.
        out: where to print.
    """
    base = rows[0]
    print(
        f"driver paths: BEGIN, a read of {len(READ_TYPES)} parameters and {READ_COLUMNS} "
        f"columns, a write of {WRITE_PARAMETERS} parameters, COMMIT, in 2 round trips; "
        f"{size.concurrency} connections per path, medians of {size.rounds} interleaved "
        "rounds; cpu: this process per operation",
        file=out,
    )
    print(f"{'path':8s} {'ops/s':>8s} {'cpu ms':>7s} {'of psycopg cpu':>15s}", file=out)
    for row in rows:
        print(
            f"{row.path:8s} {row.per_second:8.0f} {row.cpu_ms:7.3f} "
            f"{row.cpu_ms / base.cpu_ms:15.2f}",
            file=out,
        )


async def main_async(argv: Sequence[str], out: TextIO) -> int:
    """Run the table from the command line.

    Args:
        argv: the arguments (``--quick`` or nothing).
        out: where to print.

    Returns:
        0, or 2 for arguments it does not understand.
    """
    if list(argv) not in ([], ["--quick"]):
        print(USAGE, file=sys.stderr)
        return 2
    size = QUICK if argv else FULL
    async with bench_server() as server:
        rows = await measure(server.conninfo, size)
    report(rows, size, out)
    return 0


def main() -> int:
    """Entry point of ``python -m bench.driver_paths``."""
    return run_stoppable(main_async(sys.argv[1:], sys.stdout))


if __name__ == "__main__":
    raise SystemExit(main())
