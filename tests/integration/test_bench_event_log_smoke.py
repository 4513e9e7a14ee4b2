"""The event log benchmark runs at its tiny size, so that it cannot rot.

No speed is asserted (the machine is shared); the run must measure every variant at
every concurrency, and both lag readers must hold every event the writers appended.
"""

from __future__ import annotations

import io

from bench.event_log import APPENDS, CONCURRENCY, measure_appends, measure_lag, run_event_log


async def test_the_quick_event_log_benchmark_measures_every_variant(pg_conninfo: str) -> None:
    out = io.StringIO()
    await run_event_log(pg_conninfo, out, quick=True)
    rows = await measure_appends(pg_conninfo, each=2, rounds=1)
    assert [row.concurrency for row in rows] == list(CONCURRENCY)
    for row in rows:
        assert set(row.rates) == set(APPENDS)
        assert all(rate > 0 for rate in row.rates.values())
        assert row.ratio > 0
    polled, woken, rate = await measure_lag(pg_conninfo, seconds=0.2)
    assert rate > 0
    assert polled.samples == woken.samples > 0
    assert 0 <= polled.p50 <= polled.p99 <= polled.worst
    text = out.getvalue()
    assert "log / none" in text
    assert "woken by the watch" in text
    assert "looks" in text
