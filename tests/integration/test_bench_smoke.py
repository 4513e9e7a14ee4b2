"""The benchmarks run at their tiny size, so that they cannot rot (no speed is asserted)."""

from __future__ import annotations

import io

from bench.freshness import CONCURRENCY, QUICK, report, run
from bench.harness import statement_name
from bench.operations import OPERATIONS
from bench.suite import HEADER, format_row, run_suite, warning
from bench.suite import QUICK as SUITE_QUICK
from bench.suite import report as suite_report

#: Profiled items per side in the smoke test (enough for pyinstrument to take samples).
PROFILE_SMOKE_ITEMS = 20


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
        # A drift of the raw loop is reported, not failed: the text names both counts.
        text = warning(row)
        assert text is None or "statements" in text
    out = io.StringIO()
    suite_report(rows, out)
    assert out.getvalue().startswith(HEADER)
    assert "statements per operation" in out.getvalue()


async def test_profile_attributes_the_time_of_an_operation_to_layers(pg_conninfo: str) -> None:
    from bench.profile import run_profile

    out = io.StringIO()
    await run_profile(pg_conninfo, ["no trigger"], out, items=PROFILE_SMOKE_ITEMS)
    text = out.getvalue()
    assert "message, no trigger, service, concurrency 1" in text
    assert "message, no trigger, http, concurrency 1" in text
    assert "psycopg" in text
    assert "Litestar" in text.split("message, no trigger, http")[1]


def test_the_median_measurement_is_the_middle_one_by_throughput() -> None:
    from bench.harness import Timing
    from bench.suite import median

    def timing(seconds: float) -> Timing:
        return Timing(ops=10, seconds=seconds, latencies=[], statements=[])

    slow, middle, fast = timing(4.0), timing(2.0), timing(1.0)
    assert median([fast, slow, middle]) is middle
    assert median([fast, slow]) is slow
    assert median([middle]) is middle


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
