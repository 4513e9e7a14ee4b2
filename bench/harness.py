"""The shared machinery of the benchmarks: database, traced pool, drivers and memory.

- `bench_server`: ``TURNKEEPER_DATABASE_URL`` or an embedded server in a temporary
  directory, on which the benchmarks run in a
  `turnkeeper.adapters.postgres.databases.scratch_database`.
- `open_traced_pool`: the pool of both sides of every benchmark (the service and the raw
  psycopg loop). Its connections count their statements: every statement the generated
  query functions run goes through `TracingCursor` (read-only units, the raw loops) or
  a write unit's link (`turnkeeper.adapters.postgres.observers.observe_statements`),
  every COMMIT through `TracingConnection` or the link, and inside `traced()` each is
  recorded by name (``GetThread``, ``InsertMessage``, ``COMMIT``). Outside `traced()`
  the hook costs one context variable lookup per statement, on both sides alike.
- `drive`: runs prepared work items on concurrent workers and times each item.
- `memory`: the proportional set size of the PostgreSQL processes and the resident set
  of this Python process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar, cast

import attrs
import psycopg
from psycopg import IsolationLevel
from psycopg.abc import Params, Query
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from bench.cpu import Cpu, CpuProbe
from turnkeeper.adapters.http.server import settle_heap
from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.postgres.embedded import EmbeddedPostgres
from turnkeeper.adapters.postgres.observers import observe_statements
from turnkeeper.adapters.postgres.pool import LiveIdlePool, opened
from turnkeeper.adapters.postgres.uow import Conn
from turnkeeper.adapters.wiring import stop_as_ctrl_c
from turnkeeper.application.settings import Settings

#: psycopg's ``prepare_threshold`` on the benchmark's connections: prepare at first use, so
#: that the floor's statements (run on psycopg's cursors) are prepared as the units' are on
#: their link. (`turnkeeper serve`'s pools never let psycopg prepare: see
#: `turnkeeper.adapters.postgres.uow.PREPARE_THRESHOLD`.)
PREPARE_THRESHOLD = 0

#: Settles the benchmark's own heap once its world and app are built (see `settle_as_serve`).
Settle = Callable[[Settings], object]


def settle_as_serve(settings: Settings) -> None:
    """Settle this process's heap as ``turnkeeper serve`` settles its own (ADR 0029).

    The tables that compare the service in this process with a ``turnkeeper serve``
    process call it from their command line, so that both sides run with the same
    collector: start-up objects frozen, ``http.gc_threshold``. Tests do not (a frozen
    test process would keep every object alive at that moment).

    Args:
        settings: for ``http.gc_threshold``.
    """
    settle_heap(settings.http_gc_threshold)


#: The environment variable naming an external server (as for `turnkeeper serve`).
ENV_DATABASE_URL = "TURNKEEPER_DATABASE_URL"

_T = TypeVar("_T")

#: The statements of the current traced block (None: not tracing).
_TRACE: ContextVar[list[str] | None] = ContextVar("bench_trace", default=None)


def _camel(constant: str) -> str:
    return "".join(part.title() for part in constant.strip("_").split("_"))


#: Statement text of every generated query -> its sqlc name (``GetThread``).
STATEMENT_NAMES: dict[str, str] = {
    value: _camel(name)
    for name, value in vars(q).items()
    if name.startswith("_") and name.isupper() and isinstance(value, str)
}

_SPACE = re.compile(r"\s+")


def name_statement(text: str, name: str) -> None:
    """Give a statement outside the generated queries a name in the trace.

    Args:
        text: the statement exactly as executed.
        name: its name (``FloorCreateMessage``).
    """
    STATEMENT_NAMES[text] = name


def statement_name(query: Query) -> str:
    """The sqlc name of a statement, or its first words for SQL outside the queries.

    Args:
        query: the statement as given to ``execute``.

    Returns:
        A short name.
    """
    text = query if isinstance(query, str) else str(query)
    found = STATEMENT_NAMES.get(text)
    if found is not None:
        return found
    return " ".join(_SPACE.split(text.strip())[:3])[:40]


def _record_statement(conn: Conn | None, query: Query) -> None:
    """Record `query` inside `traced()`.

    Called by `TracingCursor`, and as the observer of write units' statements (which run
    on their link, not on psycopg's cursors).
    """
    trace = _TRACE.get()
    if trace is not None:
        trace.append(statement_name(query))


observe_statements(_record_statement)


class TracingCursor(psycopg.AsyncCursor[Any]):
    """A cursor that records the name of each statement it executes inside `traced()`."""

    async def execute(
        self,
        query: Query,
        params: Params | None = None,
        *,
        prepare: bool | None = None,
        binary: bool | None = None,
    ) -> TracingCursor:
        """Record the statement, then execute it (see `psycopg.AsyncCursor.execute`)."""
        _record_statement(None, query)
        await super().execute(cast("Any", query), params, prepare=prepare, binary=binary)
        return self


class TracingConnection(psycopg.AsyncConnection[Any]):
    """A connection whose cursors trace and whose commits count as ``COMMIT``."""

    async def commit(self) -> None:
        """Record ``COMMIT`` inside `traced()`, then commit."""
        trace = _TRACE.get()
        # Leaving a pooled connection's block commits again; an idle connection sends
        # nothing then, so only a commit that ends a transaction counts.
        if trace is not None and self.info.transaction_status != TransactionStatus.IDLE:
            trace.append("COMMIT")
        await super().commit()


@contextlib.contextmanager
def traced() -> Iterator[list[str]]:
    """Record the statements run by this task (and tasks it starts) inside the block.

    Yields:
        The list the names are appended to.
    """
    found: list[str] = []
    token = _TRACE.set(found)
    try:
        yield found
    finally:
        _TRACE.reset(token)


async def _configure(conn: Conn) -> None:
    # The settings `turnkeeper.adapters.postgres.uow.create_pool` gives its connections.
    await conn.set_autocommit(False)
    await conn.set_isolation_level(IsolationLevel.READ_COMMITTED)
    conn.prepare_threshold = PREPARE_THRESHOLD
    conn.cursor_factory = TracingCursor


async def open_traced_pool(conninfo: str, size: int) -> AsyncConnectionPool[Conn]:
    """A pool like `turnkeeper.adapters.postgres.uow.create_pool` (its class, no check), traced.

    Args:
        conninfo: the database.
        size: connections (min and max).

    Returns:
        The open pool.
    """
    pool = LiveIdlePool(
        conninfo,
        min_size=size,
        max_size=size,
        open=False,
        configure=_configure,
        connection_class=TracingConnection,
    )
    return cast("AsyncConnectionPool[Conn]", await opened(pool))


# -- driving concurrent workers ------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Timing:
    """What one side of one measurement did.

    Attributes:
        ops: timed items.
        seconds: wall time of the timed phase.
        latencies: seconds per item, sorted.
        statements: per timed item, the statements it ran (names, COMMIT included).
        cpu: CPU seconds of the processes involved during the timed phase (None: not
            measured).
    """

    ops: int
    seconds: float
    latencies: list[float]
    statements: list[tuple[str, ...]]
    cpu: Cpu | None = None

    @property
    def per_second(self) -> float:
        """Items per second of all workers together."""
        return self.ops / self.seconds if self.seconds > 0 else 0.0

    def percentile(self, share: float) -> float:
        """A latency percentile in milliseconds (nearest rank).

        Args:
            share: 0.5 for the median, 0.99 for p99.

        Returns:
            Milliseconds.
        """
        if not self.latencies:
            return 0.0
        index = min(len(self.latencies) - 1, max(0, round(share * len(self.latencies)) - 1))
        return self.latencies[index] * 1000.0

    @property
    def mean_statements(self) -> float:
        """Statements per item (COMMIT excluded), averaged."""
        if not self.statements:
            return 0.0
        total = sum(sum(1 for s in item if s != "COMMIT") for item in self.statements)
        return total / len(self.statements)

    @property
    def mean_commits(self) -> float:
        """Transactions per item, averaged."""
        if not self.statements:
            return 0.0
        return sum(item.count("COMMIT") for item in self.statements) / len(self.statements)


Call = Callable[[_T], Awaitable[object]]


async def drive(
    work: Sequence[Sequence[_T]], call: Call[_T], warmup: int, probe: CpuProbe | None = None
) -> Timing:
    """Run each worker's items in order, all workers at once, timing each item.

    The first `warmup` items of every worker run untimed (connections, plan caches and
    prepared statements); the timed phase starts for all workers together.

    Args:
        work: per worker, its items.
        call: runs one item.
        warmup: untimed items per worker.
        probe: reads the CPU of the processes involved around the timed phase.

    Returns:
        The timing of the timed items.
    """

    async def untimed(items: Sequence[_T]) -> None:
        for item in items[:warmup]:
            await call(item)

    latencies: list[float] = []
    statements: list[tuple[str, ...]] = []

    async def timed(items: Sequence[_T]) -> None:
        for item in items[warmup:]:
            with traced() as trace:
                started = time.perf_counter()
                await call(item)
                latencies.append(time.perf_counter() - started)
            statements.append(tuple(trace))

    await asyncio.gather(*(untimed(items) for items in work))
    reading = None if probe is None else probe.read()
    started = time.perf_counter()
    await asyncio.gather(*(timed(items) for items in work))
    elapsed = time.perf_counter() - started
    return Timing(
        ops=len(latencies),
        seconds=elapsed,
        latencies=sorted(latencies),
        statements=statements,
        cpu=None if probe is None or reading is None else probe.since(reading),
    )


async def gather_limited(jobs: Sequence[Awaitable[_T]], limit: int) -> list[_T]:
    """Await jobs with at most `limit` running at once, results in order.

    Args:
        jobs: the awaitables.
        limit: the concurrency.

    Returns:
        Their results.
    """
    gate = asyncio.Semaphore(limit)

    async def one(job: Awaitable[_T]) -> _T:
        async with gate:
            return await job

    return await asyncio.gather(*(one(j) for j in jobs))


# -- memory --------------------------------------------------------------------------------


def _kib(path: Path, field: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command may hold spaces and parentheses: fields follow the last ")".
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == parent:
            found.append(int(entry.name))
    return found


@attrs.frozen(kw_only=True)
class Memory:
    """Memory at one moment, in MiB (None where it cannot be read).

    Attributes:
        postgres: proportional set size (PSS) of the postmaster and all its children
            (backends, checkpointer, WAL writer...): shared buffers counted once.
        python: resident set of this process (service, raw loops and HTTP app).
    """

    postgres: float | None
    python: float | None


def memory(data_dir: Path | None) -> Memory:
    """Measure memory now.

    Args:
        data_dir: the embedded server's data directory (None: an external server,
            whose processes this one cannot see).

    Returns:
        The figures.
    """
    python = _kib(Path("/proc/self/status"), "VmRSS")
    postgres: float | None = None
    if data_dir is not None:
        try:
            postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            postmaster = 0
        if postmaster:
            total = 0
            for pid in [postmaster, *_children(postmaster)]:
                pss = _kib(Path(f"/proc/{pid}/smaps_rollup"), "Pss")
                total += pss or 0
            postgres = total / 1024.0 if total else None
    return Memory(postgres=postgres, python=None if python is None else python / 1024.0)


# -- the database ----------------------------------------------------------------------------


#: The start of every benchmark database's name.
BENCH_DATABASE_PREFIX = "turnkeeper_bench_"


@attrs.frozen(kw_only=True)
class Server:
    """The PostgreSQL server of a benchmark run.

    Attributes:
        conninfo: any conninfo of the server.
        where: how to name it in the report.
        data_dir: the data directory of an embedded server (None for an external one).
    """

    conninfo: str
    where: str
    data_dir: Path | None


@contextlib.asynccontextmanager
async def bench_server() -> AsyncIterator[Server]:
    """``TURNKEEPER_DATABASE_URL``, else an embedded server in a temporary directory.

    Yields:
        The server.
    """
    external = os.environ.get(ENV_DATABASE_URL)
    if external:
        yield Server(
            conninfo=external, where="PostgreSQL from TURNKEEPER_DATABASE_URL", data_dir=None
        )
        return
    base = Path(tempfile.mkdtemp(prefix="turnkeeper-bench-"))
    server = EmbeddedPostgres.start(base / "data", cleanup_mode="delete")
    try:
        yield Server(
            conninfo=server.conninfo, where="embedded PostgreSQL", data_dir=server.data_dir
        )
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


#: The exit code of a benchmark stopped by SIGTERM or Ctrl-C (128 + SIGINT, as shells say).
EXIT_STOPPED = 130


def run_stoppable(main: Coroutine[Any, Any, int]) -> int:
    """Run a benchmark's main coroutine with SIGTERM stopping it as Ctrl-C does.

    SIGTERM's default ends the process at once: a benchmark stopped that way (a
    supervisor's timeout, ``kill``) left the embedded PostgreSQL server it started
    running, with its temporary directory. Handled as Ctrl-C is, the signal unwinds the
    benchmark instead: asyncio cancels the main task, whose context managers stop the
    servers and remove what they made.

    Args:
        main: the benchmark, not yet started.

    Returns:
        The benchmark's exit code, or `EXIT_STOPPED` when it was stopped.
    """
    previous = signal.signal(signal.SIGTERM, stop_as_ctrl_c)
    try:
        return asyncio.run(main)
    except KeyboardInterrupt:
        print("bench: stopped", file=sys.stderr)
        return EXIT_STOPPED
    finally:
        signal.signal(signal.SIGTERM, previous)


async def server_version(conninfo: str) -> str:
    """The server's ``version()`` string, first part.

    Args:
        conninfo: any database of the server.

    Returns:
        For example ``PostgreSQL 16.2``.
    """
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        cur = await conn.execute("SHOW server_version")
        row = await cur.fetchone()
    return f"PostgreSQL {row[0] if row else '?'}"


__all__ = [
    "BENCH_DATABASE_PREFIX",
    "EXIT_STOPPED",
    "STATEMENT_NAMES",
    "Memory",
    "Server",
    "Settle",
    "Timing",
    "TracingConnection",
    "TracingCursor",
    "bench_server",
    "drive",
    "gather_limited",
    "memory",
    "name_statement",
    "open_traced_pool",
    "run_stoppable",
    "server_version",
    "settle_as_serve",
    "statement_name",
    "traced",
]
