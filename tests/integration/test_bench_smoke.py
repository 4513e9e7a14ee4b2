"""The benchmarks run at their tiny size, so that they cannot rot (no speed is asserted)."""

from __future__ import annotations

import io
import os
import platform
import sys
import time
from pathlib import Path

import attrs
import psycopg
import pytest

from bench import against_floor, driver_paths
from bench.cpu import CpuProbe, children, postmaster_pid, process_cpu, tree_cpu
from bench.floor_report import report as floor_report
from bench.freshness import CONCURRENCY, QUICK, report, run
from bench.harness import Memory, Timing, statement_name
from bench.operations import HISTORY, OPERATIONS
from bench.suite import HEADER, Row, format_row, run_suite, warning
from bench.suite import QUICK as SUITE_QUICK
from bench.suite import report as suite_report
from bench.world import BenchWorld
from tests.conftest import TEST_DATABASE_ENV
from tests.support.census import on_the_wire
from tests.support.database import fetch
from turnkeeper.application.settings import Settings

#: Profiled items per side in the smoke test (enough for pyinstrument to take samples).
PROFILE_SMOKE_ITEMS = 20
#: CPU seconds the probe test burns (well above the 10 ms of a clock tick).
BURN_SECONDS = 0.05
#: The operation whose held sends the wire census counts too.
HELD_SEND = "gated send, hot thread"


@pytest.mark.slow
async def test_quick_floor_table_measures_every_group_on_every_side(pg_conninfo: str) -> None:
    settled: list[Settings] = []
    results, counts = await against_floor.run_floor_suite(
        pg_conninfo, against_floor.QUICK, settle=settled.append
    )
    # Settled once, before the measurements (the command line freezes the heap then).
    assert [s.http_gc_threshold for s in settled] == [Settings().http_gc_threshold]

    assert [(r.group, r.concurrency) for r in results] == [
        (g.name, c) for g in against_floor.GROUPS for c in against_floor.QUICK.concurrency
    ]
    for result in results:
        group = next(g for g in against_floor.GROUPS if g.name == result.group)
        assert [s.key for s in result.sides] == [s.key for s in group.sides]
        for side in result.sides:
            timing = side.measured.median
            assert timing.ops > 0
            assert timing.per_second > 0
            assert timing.cpu is not None
            if side.key == "http":
                assert timing.cpu.server is not None
                assert timing.cpu.client is not None
            else:
                assert timing.cpu.python is not None
        assert result.ratio("F1", "F1") == 1.0
    # The floors' round trips are what they are built for; the service's are counted too.
    for (group_name, key), (round_trips, statements) in counts.items():
        if key in ("F1", "F3", "F4", "floor"):
            assert round_trips == 1, (group_name, key)
        if key == "F2":
            assert (round_trips, statements) == (5, 5)
        if key == "service":
            assert round_trips >= 1, group_name
            assert statements >= round_trips, group_name
    out = io.StringIO()
    floor_report(results, counts, out)
    text = out.getvalue()
    assert "share of the floor" in text
    assert "message opens run: service" in text
    assert "statements per operation" in text


def test_the_cpu_probe_counts_this_process_and_its_children() -> None:
    probe = CpuProbe(postmaster=os.getpid())
    start = probe.read()
    before = process_cpu(os.getpid())
    begun = time.process_time()
    while time.process_time() - begun < BURN_SECONDS:
        pass

    used = probe.since(start)
    after = process_cpu(os.getpid())

    assert used.python is not None
    assert used.python >= BURN_SECONDS
    assert before is not None
    assert after is not None
    assert after - before >= BURN_SECONDS / 2
    assert used.postgres is not None
    assert used.postgres >= BURN_SECONDS / 2
    own = process_cpu(os.getpid())
    tree = tree_cpu(os.getpid())
    assert own is not None
    assert tree is not None
    assert tree >= own


async def test_the_postmaster_is_found_from_a_backend(pg_conninfo: str) -> None:
    pid = await postmaster_pid(pg_conninfo)

    # An external test server may run on another machine: then there is no pid here.
    if pid is None:
        assert os.environ.get(TEST_DATABASE_ENV)
        return
    async with await psycopg.AsyncConnection.connect(pg_conninfo) as conn:
        cur = await conn.execute("SELECT pg_backend_pid()")
        row = await cur.fetchone()
        assert row is not None
        assert row[0] in children(pid)
    assert (tree_cpu(pid) or 0.0) > 0.0


def test_two_paths_as_frequent_compare_the_same_one_on_both_sides() -> None:
    # A fresh-clone make test failed on the quick suite: of the hot thread's two timed
    # sends at concurrency 2 (one sent, one held on each side) the first to finish was
    # taken as the most frequent, and the sides finished in another order.
    sent = ("BEGIN", "GetPostFacts", "InsertMessageWithEvent", "COMMIT")
    held = ("BEGIN", "GetPostFacts", "GetOwner", "GetMessageByClientId", "AppendEvent", "COMMIT")

    def timing(statements: list[tuple[str, ...]]) -> Timing:
        return Timing(ops=2, seconds=1.0, latencies=[0.1, 0.1], statements=statements)

    row = Row(
        operation="gated send, hot thread",
        concurrency=2,
        service=timing([held, sent]),
        raw=timing([sent, held]),
        http=None,
        memory=Memory(postgres=None, python=None),
    )
    assert row.statement_list("service") == row.statement_list("raw") == sent
    assert warning(row) is None
    # A list done more often still wins, however long.
    row = attrs.evolve(row, service=timing([held, held, sent]))
    assert row.statement_list("service") == held


@pytest.mark.slow
async def test_quick_suite_measures_every_operation_on_every_side(pg_conninfo: str) -> None:
    rows = await run_suite(pg_conninfo, SUITE_QUICK)
    assert [(r.operation, r.concurrency) for r in rows] == [
        (op.name, c) for op in OPERATIONS for c in SUITE_QUICK.concurrency
    ]
    for row in rows:
        assert row.service.ops == row.raw.ops > 0
        assert row.service.per_second > 0
        assert row.raw.per_second > 0
        assert row.service.mean_statements > 0
        assert row.service.mean_commits == 1
        assert row.statement_list("service")[-1] == "COMMIT"
        http_expected = next(op for op in OPERATIONS if op.name == row.operation).http is not None
        assert (row.http is not None) == http_expected
        assert format_row(row).startswith(row.operation)
        # The raw loops are written by hand: when the service changes its statements,
        # this fails until bench/raw.py follows (a full run only prints the warning).
        assert warning(row) is None
        # Every path, not only the most frequent one the warning compares: at
        # concurrency 2 one of the hot thread's two timed sends is held on each side.
        assert set(row.service.statements) == set(row.raw.statements), row.operation
    # The raw loops' rows take UUIDv7 keys, as the services' (random keys index apart).
    versions = await fetch(
        pg_conninfo,
        "SELECT DISTINCT substr(id::text, 15, 1) FROM"
        " (SELECT id FROM messages UNION ALL SELECT id FROM runs) AS rows",
    )
    assert versions == [("7",)]
    out = io.StringIO()
    suite_report(rows, out)
    assert out.getvalue().startswith(HEADER)
    assert "statements per operation" in out.getvalue()
    assert "WARNING" not in out.getvalue(), out.getvalue()
    # What HTTP adds is reported for every operation it measures, not for the first only.
    added = out.getvalue().split("what HTTP adds per request")[1].splitlines()[1:]
    with_http = {row.operation for row in rows if row.http is not None}
    assert {line.strip().split(":")[0] for line in added if line.startswith("  ")} == with_http
    # The run's moves read their token in the statement that locks the run (ADR 0026).
    assert any("LockRunForToken (in place of LockRun)" in line for line in added), added


@pytest.mark.parametrize(
    ("name", "held"),
    [(op.name, False) for op in (*OPERATIONS, HISTORY)] + [(HELD_SEND, True)],
)
async def test_a_raw_loop_takes_the_round_trips_and_statements_of_its_service(
    census_worlds: tuple[BenchWorld, BenchWorld], name: str, held: bool
) -> None:
    operation = next(op for op in (*OPERATIONS, HISTORY) if op.name == name)

    service = await on_the_wire(census_worlds, operation, "service", held=held)
    raw = await on_the_wire(census_worlds, operation, "raw", held=held)

    # Statement names alone (the suite's trace) cannot see round trips: a raw loop
    # that stopped pipelining would still pass the test above.
    assert (raw.round_trips, raw.statements) == (service.round_trips, service.statements)


async def test_profile_attributes_the_time_of_an_operation_to_layers(pg_conninfo: str) -> None:
    from bench.profile import run_profile

    out = io.StringIO()
    await run_profile(pg_conninfo, ["no trigger"], out, items=PROFILE_SMOKE_ITEMS)
    text = out.getvalue()
    assert "message, no trigger, service, concurrency 1" in text
    assert "message, no trigger, http, concurrency 1" in text
    assert "psycopg" in text
    # The route is served by the HTTP adapter's fast path (ADR 0032), not by Litestar.
    assert "turnkeeper HTTP adapter" in text.split("message, no trigger, http")[1]


def test_the_median_measurement_is_the_middle_one_by_throughput() -> None:
    from bench.harness import Timing
    from bench.suite import median

    def timing(seconds: float) -> Timing:
        return Timing(ops=10, seconds=seconds, latencies=[], statements=[])

    slow, middle, fast = timing(4.0), timing(2.0), timing(1.0)
    assert median([fast, slow, middle]) is middle
    assert median([fast, slow]) is slow
    assert median([middle]) is middle


def test_the_machine_line_names_the_interpreter_build(tmp_path: Path) -> None:
    from bench.__main__ import interpreter

    shared = tmp_path / "shared"
    shared.write_text(
        "7f00-7f01 r-xp 00000000 08:01 42 /opt/python/lib/libpython3.11.so.1.0\n"
        "7f02-7f03 r-xp 00000000 08:01 43 /usr/lib/libc.so.6\n"
    )
    linked = tmp_path / "linked"
    linked.write_text("5500-5501 r-xp 00000000 08:01 41 /usr/bin/python3.11\n")
    assert interpreter(str(shared)).endswith(", libpython shared")
    assert interpreter(str(linked)).endswith(", libpython linked in")
    assert interpreter(str(tmp_path / "absent")).endswith(", libpython unknown")
    assert interpreter(str(linked)).startswith(
        f"Python {platform.python_version()} at {sys.base_prefix}"
    )


async def test_quick_driver_table_runs_both_paths_to_the_same_rows(pg_conninfo: str) -> None:
    # measure() asserts that both paths return the same rows in every round.
    rows = await driver_paths.measure(pg_conninfo, driver_paths.QUICK)
    assert [r.path for r in rows] == ["psycopg", "libpq"]
    for row in rows:
        assert row.per_second > 0
        assert row.cpu_ms > 0
    out = io.StringIO()
    driver_paths.report(rows, driver_paths.QUICK, out)
    lines = out.getvalue().splitlines()
    assert lines[1].split() == ["path", "ops/s", "cpu", "ms", "of", "psycopg", "cpu"]
    assert lines[2].split()[0] == "psycopg"
    assert lines[2].split()[-1] == "1.00"


def test_statements_are_named_as_in_sql_queries() -> None:
    from turnkeeper.adapters.postgres import queries as q

    assert statement_name(q._GET_THREAD) == "GetThread"
    assert statement_name("SELECT 1") == "SELECT 1"


async def test_quick_freshness_bench_measures_every_workload(pg_conninfo: str) -> None:
    results = await run(pg_conninfo, QUICK)
    assert [(m.workload, m.concurrency) for m in results] == [
        (workload, concurrency)
        for concurrency in CONCURRENCY
        for workload in ("hot thread", "many threads")
    ]
    for m in results:
        assert m.sends == m.concurrency * QUICK.sends_per_worker
        assert m.service_per_second > 0
        assert m.raw_per_second > 0
        assert m.ratio > 0
        if m.workload == "many threads":
            # Every worker owns its threads: nothing is ever held.
            assert m.service_sent == m.raw_sent == m.sends
        else:
            # At least one send per round of the hot thread gets through.
            assert m.service_sent >= QUICK.sends_per_worker
            assert m.raw_sent >= QUICK.sends_per_worker
    out = io.StringIO()
    report(results, out)
    assert out.getvalue().count("\n") == len(results) + 1
