"""The freshness benchmark runs at its tiny size, so that it cannot rot."""

from __future__ import annotations

import io

from bench.freshness import CONCURRENCY, QUICK, report, run


async def test_quick_bench_measures_every_workload(pg_conninfo: str) -> None:
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
