"""The benchmark suite: every operation at every concurrency, service vs raw vs HTTP.

For each operation of `bench.operations.OPERATIONS` and each concurrency, each side
(service, raw psycopg loop, HTTP) gets its own freshly prepared items on its own workers
and runs them concurrently (`bench.harness.drive`). Every timed item is traced, so the
table shows the statements per operation that each side really ran, and a warning is
printed when the raw loop no longer runs the statements the service runs.

Benchmarks print numbers; nothing here asserts a speed.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import attrs

from bench.asgi import AsgiClient
from bench.harness import Memory, Timing, drive, memory, open_traced_pool
from bench.operations import OPERATIONS, Operation
from bench.world import BenchWorld, build_world
from turnkeeper.adapters.http.app import create_app

#: The concurrency levels of the full run (connections = clients).
CONCURRENCY = (1, 8, 32)
#: Pool connections beyond the highest concurrency (set-up work, HTTP authentication).
POOL_SPARE = 4


@attrs.frozen(kw_only=True)
class SuiteSize:
    """How much work one measurement does.

    Attributes:
        ops: timed items per measurement for an operation of scale 1 (divided among the
            workers; each worker gets at least one).
        warmup: untimed items per worker first (scaled down for expensive set-ups).
        concurrency: the concurrency levels.
        http: measure the HTTP side too.
        repeats: measurements per side, interleaved (service, raw, http, service, ...);
            the table shows each side's median one, so that a pause of the shared
            machine or a cold start hits one measurement and not the ratio.
        warm_ops: items of a discarded round of every operation at concurrency 1 before
            the first measurement (0: none). Without it the first row of the table
            measured a cold process: its service side ran at 0.6 of the raw loop and
            at 0.7 of its own HTTP route, and the same operation measured again at 0.9.
    """

    ops: int
    warmup: int
    concurrency: tuple[int, ...] = CONCURRENCY
    http: bool = True
    repeats: int = 1
    warm_ops: int = 0

    def items(self, operation: Operation, concurrency: int) -> tuple[int, int]:
        """Timed and warm-up items per worker of one measurement.

        Args:
            operation: the operation.
            concurrency: the workers.

        Returns:
            (timed, warmup) per worker.
        """
        timed = max(1, math.ceil(self.ops * operation.ops_scale / concurrency))
        if operation.ops_scale >= 0.5:
            warmup = self.warmup
        elif operation.ops_scale >= 0.1:
            warmup = min(self.warmup, 1)
        else:
            warmup = 0
        return timed, warmup


#: The full run: about a quarter of an hour on two cores.
FULL = SuiteSize(ops=200, warmup=3, repeats=3, warm_ops=40)
#: The smoke-test size: every operation and side once, in seconds.
QUICK = SuiteSize(ops=1, warmup=1, concurrency=(1, 2), warm_ops=1)


@attrs.frozen(kw_only=True)
class Row:
    """One operation at one concurrency.

    Attributes:
        operation: the operation's name.
        concurrency: concurrent workers (one connection each).
        service: the service side.
        raw: the raw psycopg loop.
        http: the HTTP side (None when not measured).
        memory: memory right after the service side ran.
    """

    operation: str
    concurrency: int
    service: Timing
    raw: Timing
    http: Timing | None
    memory: Memory

    @property
    def ratio(self) -> float:
        """Service throughput as a fraction of the raw loop's."""
        return _ratio(self.service.per_second, self.raw.per_second)

    @property
    def http_ratio(self) -> float | None:
        """HTTP throughput as a fraction of the in-process service's."""
        if self.http is None:
            return None
        return _ratio(self.http.per_second, self.service.per_second)

    def statement_list(self, side: str) -> tuple[str, ...]:
        """The most frequent statement list of one side's timed items.

        Of lists as frequent as each other the shortest wins (then the first by name):
        at concurrency 2 a hot thread's two timed sends are one sent and one held on
        each side, and the first to finish won the tie, so the sides compared a sent
        send with a held one whenever they finished in another order.

        Args:
            side: service, raw or http.

        Returns:
            The statement names, COMMIT included.
        """
        timing = {"service": self.service, "raw": self.raw, "http": self.http}[side]
        if timing is None or not timing.statements:
            return ()
        counted = collections.Counter(timing.statements)
        return min(counted, key=lambda names: (-counted[names], len(names), names))


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


async def run_suite(
    conninfo: str,
    size: SuiteSize = FULL,
    *,
    data_dir: Path | None = None,
    operations: tuple[Operation, ...] = OPERATIONS,
    on_row: Callable[[Row], None] | None = None,
) -> list[Row]:
    """Measure every operation at every concurrency on a migrated, empty database.

    Args:
        conninfo: the database.
        size: how much work each measurement does.
        data_dir: the embedded server's data directory, for its memory (None: unknown).
        operations: the operations to measure.
        on_row: called with each row as soon as it is measured (to print it).

    Returns:
        One row per operation and concurrency, in table order.
    """
    most = max(size.concurrency)
    pool = await open_traced_pool(conninfo, most + POOL_SPARE)
    rows: list[Row] = []
    try:
        world = await build_world(pool, most)
        app = create_app(world.services, world.services.settings)
        http = AsgiClient(app)
        if size.warm_ops:
            warm = SuiteSize(ops=size.warm_ops, warmup=size.warmup, concurrency=(1,))
            for operation in operations:
                await measure(world, http, operation, 1, warm, data_dir)
        for operation in operations:
            for concurrency in size.concurrency:
                row = await measure(world, http, operation, concurrency, size, data_dir)
                rows.append(row)
                if on_row is not None:
                    on_row(row)
    finally:
        await pool.close()
    return rows


async def measure(
    world: BenchWorld,
    http: AsgiClient,
    operation: Operation,
    concurrency: int,
    size: SuiteSize,
    data_dir: Path | None,
) -> Row:
    """Measure one operation at one concurrency on every side.

    Args:
        world: the world.
        http: the in-process HTTP client.
        operation: the operation.
        concurrency: workers per side.
        size: the size.
        data_dir: the embedded server's data directory (for its memory).

    Returns:
        The row.
    """
    timed, warmup = size.items(operation, concurrency)
    sides = ["service", "raw"] + (["http"] if size.http and operation.http is not None else [])

    async def side(name: str) -> Timing:
        call = {"service": operation.service, "raw": operation.raw, "http": operation.http}[name]
        assert call is not None
        work = await operation.prepare(world, world.workers[name][:concurrency], timed + warmup)
        return await drive(work, lambda item: call(world, http, item), warmup)

    runs: dict[str, list[Timing]] = {name: [] for name in sides}
    used: Memory | None = None
    for _ in range(size.repeats):
        for name in sides:
            runs[name].append(await side(name))
            if used is None:
                used = memory(data_dir)
    assert used is not None
    return Row(
        operation=operation.name,
        concurrency=concurrency,
        service=median(runs["service"]),
        raw=median(runs["raw"]),
        http=median(runs["http"]) if "http" in runs else None,
        memory=used,
    )


def median(timings: list[Timing]) -> Timing:
    """The measurement of median throughput (the lower middle one of an even count).

    Args:
        timings: the measurements of one side.

    Returns:
        One of them.
    """
    ranked = sorted(timings, key=lambda t: t.per_second)
    return ranked[(len(ranked) - 1) // 2]


# -- the report ------------------------------------------------------------------------------


def _count(timing: Timing | None) -> str:
    if timing is None:
        return "-"
    mean = timing.mean_statements
    return f"{mean:.0f}" if abs(mean - round(mean)) < 0.05 else f"{mean:.1f}"


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


HEADER = (
    f"{'operation':<24} {'conc':>4} {'svc/s':>8} {'raw/s':>8} {'svc/raw':>7} "
    f"{'p50 ms':>7} {'p99 ms':>7} {'http/s':>8} {'http/svc':>8} {'stmts svc/raw/http':>18} "
    f"{'tx':>3} {'pg MiB':>6} {'py MiB':>6}"
)


def format_row(row: Row) -> str:
    """One line of the table.

    Args:
        row: the measurement.

    Returns:
        The line.
    """
    http_rate = "-" if row.http is None else f"{row.http.per_second:.0f}"
    http_ratio = "-" if row.http_ratio is None else f"{row.http_ratio:.2f}"
    counts = f"{_count(row.service)}/{_count(row.raw)}/{_count(row.http)}"
    flag = "!" if warning(row) else " "
    return (
        f"{row.operation:<24} {row.concurrency:>4} {row.service.per_second:>8.0f} "
        f"{row.raw.per_second:>8.0f} {row.ratio:>7.2f} {row.service.percentile(0.5):>7.2f} "
        f"{row.service.percentile(0.99):>7.2f} {http_rate:>8} {http_ratio:>8} "
        f"{counts + flag:>18} {row.service.mean_commits:>3.0f} {_mib(row.memory.postgres):>6} "
        f"{_mib(row.memory.python):>6}"
    )


def warning(row: Row) -> str | None:
    """The warning of a row whose raw loop no longer runs the service's statements.

    The most frequent statement list of each side is compared (a hot thread mixes sent
    and held sends, in proportions that differ between the sides).

    Args:
        row: the measurement.

    Returns:
        The warning, or None when both sides ran the same statements.
    """
    service, raw = row.statement_list("service"), row.statement_list("raw")
    if service == raw:
        return None
    only_service = list((collections.Counter(service) - collections.Counter(raw)).elements())
    only_raw = list((collections.Counter(raw) - collections.Counter(service)).elements())
    return (
        f"WARNING {row.operation} at {row.concurrency}: the raw loop runs "
        f"{len(raw)} statements, the service {len(service)} "
        f"(service only: {' '.join(only_service) or '-'}; raw only: {' '.join(only_raw) or '-'}"
        f"{'; same statements, other order' if not only_service and not only_raw else ''})"
    )


def compact(names: tuple[str, ...]) -> str:
    """A statement list with runs of one statement folded (``GetMessage x99``).

    Args:
        names: the statements.

    Returns:
        The text.
    """
    parts: list[str] = []
    index = 0
    while index < len(names):
        end = index
        while end < len(names) and names[end] == names[index]:
            end += 1
        count = end - index
        parts.append(names[index] if count == 1 else f"{names[index]} x{count}")
        index = end
    return " ".join(parts)


def report(rows: list[Row], out: TextIO) -> None:
    """Print the table, then the warnings and the statement lists.

    Args:
        rows: the measurements.
        out: where to write.
    """
    print(HEADER, file=out)
    for row in rows:
        print(format_row(row), file=out)
    report_details(rows, out)


def report_details(rows: list[Row], out: TextIO) -> None:
    """Print what follows the table: warnings, statement lists, what HTTP adds.

    Args:
        rows: the measurements.
        out: where to write.
    """
    warnings = [w for w in (warning(r) for r in rows) if w is not None]
    # One warning per operation is enough: the statements do not depend on concurrency.
    seen: set[str] = set()
    for text in warnings:
        name = text.split(" at ")[0]
        if name not in seen:
            seen.add(name)
            print(text, file=out)
    print(
        "\nstatements per operation (service, lowest concurrency; COMMIT ends a transaction):",
        file=out,
    )
    listed: set[str] = set()
    for row in rows:
        if row.operation in listed:
            continue
        listed.add(row.operation)
        names = row.statement_list("service")
        print(f"  {row.operation} ({len(names)}): {compact(names)}", file=out)
    print("\nwhat HTTP adds per request (lowest concurrency):", file=out)
    added: set[str] = set()
    for row in rows:
        if row.http is None or row.operation in added:
            continue
        added.add(row.operation)
        http = collections.Counter(row.statement_list("http"))
        service = collections.Counter(row.statement_list("service"))
        extra, replaced = http - service, service - http
        added_text = " ".join(extra.elements()) or "nothing"
        if replaced:
            # A statement that reads the token itself stands in for the service's own.
            added_text += f" (in place of {' '.join(replaced.elements())})"
        print(f"  {row.operation}: {added_text}", file=out)


__all__ = [
    "CONCURRENCY",
    "FULL",
    "HEADER",
    "QUICK",
    "Row",
    "SuiteSize",
    "compact",
    "format_row",
    "measure",
    "median",
    "report",
    "report_details",
    "run_suite",
    "warning",
]
