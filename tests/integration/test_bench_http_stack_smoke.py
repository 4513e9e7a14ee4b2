"""The HTTP stack table runs at its tiny size, so that it cannot rot (no speed is asserted)."""

from __future__ import annotations

import io

import attrs
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
    in_process = ["service"] if healthz else ["service", "service, token"]
    sides = [*in_process, *(v.key for v in http_stack.variants(None, healthz=healthz))]
    assert ("bare uvicorn" in sides) == healthz
    assert list(results) == sides
    for side, by_concurrency in results.items():
        assert list(by_concurrency) == list(http_stack.QUICK.concurrency)
        for measured in by_concurrency.values():
            assert measured.median.ops > 0
            if side not in in_process:
                # The server's CPU is read from all its processes (the workers too).
                assert measured.cpu_ms(lambda c: c.server) is not None
    out = io.StringIO()
    http_stack.report(results, out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 + len(sides) * len(http_stack.QUICK.concurrency)
    # Every HTTP side is compared with each in-process side and with the reference.
    assert ("| of in-process, token |" in lines[0]) == (not healthz)
    assert len({line.count("|") for line in lines}) == 1


async def test_a_focused_run_measures_the_chosen_sides_at_the_chosen_size(
    pg_conninfo: str,
) -> None:
    size = attrs.evolve(http_stack.QUICK, concurrency=(2,), repeats=2)
    results = await http_stack.measure(
        pg_conninfo, size, None, io.StringIO(), only=frozenset({"fast"})
    )
    assert list(results) == ["service", "service, token", "fast"]
    assert [len(by_c[2].rounds) for by_c in results.values()] == [2, 2, 2]
    out = io.StringIO()
    http_stack.report(results, out)
    # The service is the reference: its ratio is not printed twice.
    assert out.getvalue().splitlines()[0].endswith("| of in-process | of in-process, token |")


@pytest.mark.parametrize(
    "argv",
    [["--rounds", "0"], ["--concurrency", "8,x"], ["--sides"], ["--ops"]],
    ids=["no-rounds", "bad-level", "unknown", "no-value"],
)
async def test_options_not_understood_are_refused_before_anything_starts(argv: list[str]) -> None:
    assert await http_stack.main_async(argv, io.StringIO()) == 2


@pytest.mark.parametrize(
    ("text", "keys"),
    [
        ("before,fast", {"before", "fast"}),
        ("fast;fast, 2 workers", {"fast", "fast, 2 workers"}),
        ("fast, 2 workers;", {"fast, 2 workers"}),
    ],
)
def test_only_names_sides_by_comma_or_by_semicolon(text: str, keys: set[str]) -> None:
    args = http_stack._arguments(["--only", text])
    assert args is not None
    assert args.only == keys
