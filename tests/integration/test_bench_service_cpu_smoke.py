"""The service CPU comparison runs at its tiny size, so that it cannot rot (no speed asserted)."""

from __future__ import annotations

import io

from bench import service_cpu


async def test_quick_service_cpu_measures_each_tree_in_a_child(pg_conninfo: str) -> None:
    root = service_cpu.THIS_TREE
    trees = [service_cpu.Tree(key="this", root=root), service_cpu.Tree(key="baseline", root=root)]
    out = io.StringIO()

    medians = await service_cpu.run(trees, service_cpu.QUICK_MESSAGES, 2, out, pg_conninfo)

    assert set(medians) == {"this", "baseline"}
    assert all(value > 0 for value in medians.values())
    printed = out.getvalue()
    assert printed.count("ms/message") == 2 * 2 + 2
    assert "this tree / baseline: " in printed
