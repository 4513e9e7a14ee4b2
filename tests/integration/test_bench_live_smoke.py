"""The live delivery benchmark runs at its tiny size, so that it cannot rot.

No speed is asserted (the machine is shared); the run must measure every scenario
(three modes, one and several agents, same and other process) without a lost delivery,
and the idle measurement must report its figures.
"""

from __future__ import annotations

import pytest

from bench.live import MODES, QUICK, format_idle, format_latency, run_live


@pytest.mark.slow
async def test_the_quick_live_benchmark_measures_every_scenario(pg_conninfo: str) -> None:
    rows, idle = await run_live(pg_conninfo, QUICK)
    assert [(r.mode, r.agents, r.placement) for r in rows] == [
        (mode, agents, placement)
        for mode in MODES
        for agents in (1, QUICK.many_agents)
        for placement in ("same", "other")
    ]
    for row in rows:
        assert (row.samples, row.lost) == (QUICK.samples, 0)
        assert 0 <= row.p50 <= row.p99
        assert format_latency(row).startswith(row.mode)
    assert idle.streams == QUICK.idle_streams
    assert idle.cpu_percent >= 0
    assert "idle streams" in format_idle(idle)
