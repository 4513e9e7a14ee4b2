"""The HTTP stack table runs at its tiny size, so that it cannot rot (no speed is asserted)."""

from __future__ import annotations

import io

import pytest

from bench import http_stack
from turnkeeper.application.settings import Settings


@pytest.mark.parametrize("healthz", [False, True], ids=["message", "healthz"])
async def test_quick_http_stack_table_measures_every_side(pg_conninfo: str, healthz: bool) -> None:
    settled: list[Settings] = []
    results = await http_stack.measure(
        pg_conninfo, http_stack.QUICK, None, io.StringIO(), healthz=healthz, settle=settled.append
    )
    # Settled once, with the world's settings (the command line freezes the heap then).
    assert [s.http_gc_threshold for s in settled] == [Settings().http_gc_threshold]
    sides = ["service", *(v.key for v in http_stack.variants(None, healthz=healthz))]
    assert ("bare uvicorn" in sides) == healthz
    assert list(results) == sides
    for side, by_concurrency in results.items():
        assert list(by_concurrency) == list(http_stack.QUICK.concurrency)
        for measured in by_concurrency.values():
            assert measured.median.ops > 0
            if side != "service":
                # The server's CPU is read from all its processes (the workers too).
                assert measured.cpu_ms(lambda c: c.server) is not None
    out = io.StringIO()
    http_stack.report(results, out)
    assert out.getvalue().count("\n") == 2 + len(sides) * len(http_stack.QUICK.concurrency)
