"""Python CPU per message of the service, this tree beside another: ``bench.service_cpu``.

``python -m bench.service_cpu [--quick] [--baseline DIR]`` measures the CPU this
process spends per message that triggers nothing when it calls the conversation service
directly (no HTTP, no load client), one message after the other on one connection, for
this source tree and, with ``--baseline DIR``, for another one (``git archive`` of the
commit before a change). Each measurement is a child process that imports the package
of its tree, builds the bench world on a scratch database of one embedded PostgreSQL
shared by all children, sends a warm-up and then the timed messages; the trees take
turns, round by round. It prints each measurement and each tree's median, and the
median of this tree over the baseline's.

Concurrency 1 keeps the figure about one message: what concurrency adds is contention,
which the floor table (`bench.against_floor`) shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import attrs

#: Messages timed per measurement (the full run).
FULL_MESSAGES = 2_000
#: Messages timed per measurement with ``--quick``.
QUICK_MESSAGES = 50
#: Untimed messages first (prepared statements, plan caches, the pool).
WARMUP_MESSAGES = 200
#: Rounds; each tree is measured once per round.
FULL_ROUNDS = 3
QUICK_ROUNDS = 1
#: Seconds a child may take at most (a hung child fails the run instead of stalling it).
CHILD_TIMEOUT = 600
#: The line a child prints its figure on.
RESULT_PREFIX = "cpu_ms_per_message="
USAGE = "usage: python -m bench.service_cpu [--quick] [--baseline DIR]"
#: The root of this source tree.
THIS_TREE = Path(__file__).resolve().parent.parent


@attrs.frozen
class Tree:
    """A source tree whose package a child imports.

    Attributes:
        key: its name in the table.
        root: its root directory (holding ``turnkeeper/`` and ``bench/``).
    """

    key: str
    root: Path


async def child(conninfo: str, messages: int) -> float:
    """Measure in this process (run with the tree's root first on ``sys.path``).

    Args:
        conninfo: the server (a scratch database is made on it).
        messages: the timed messages.

    Returns:
        CPU milliseconds of this process per message.
    """
    # Imported here: the child imports the package of the tree it measures.
    from bench.harness import open_traced_pool
    from bench.world import build_world
    from turnkeeper.adapters.postgres.databases import scratch_database
    from turnkeeper.domain.messaging import MessageDraft

    async with scratch_database(conninfo, prefix="turnkeeper_bench_cpu_") as database:
        pool = await open_traced_pool(database, 2)
        try:
            world = await build_world(pool, 1)
            worker = world.workers["service"][0]
            thread = await world.quiet_thread(worker)
            conversation = world.services.conversation

            async def one() -> None:
                await conversation.create_message(
                    worker.person.principal,
                    thread,
                    MessageDraft(
                        client_msg_id=worker.cid("m"), content="Sam, the report is ready."
                    ),
                )

            for _ in range(WARMUP_MESSAGES):
                await one()
            started = time.process_time()
            for _ in range(messages):
                await one()
            return (time.process_time() - started) * 1000 / messages
        finally:
            await pool.close()


def _measure(tree: Tree, conninfo: str, messages: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree.root)}
    done = subprocess.run(  # noqa: S603 (this interpreter running this file)
        # -P: the script's own directory (bench/) must not shadow modules of the tree.
        [sys.executable, "-P", str(Path(__file__).resolve()), "--child", conninfo, str(messages)],
        cwd=tree.root,
        env=env,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        check=False,
    )
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            return float(line.removeprefix(RESULT_PREFIX))
    raise RuntimeError(f"{tree.key}: the child printed no figure: {done.stderr[-2000:]}")


async def run(
    trees: Sequence[Tree], messages: int, rounds: int, out: TextIO, conninfo: str | None = None
) -> dict[str, float]:
    """Measure every tree once per round on one PostgreSQL server.

    Args:
        trees: the trees, this one first.
        messages: timed messages per measurement.
        rounds: rounds.
        out: where to print.
        conninfo: a database of the server (None: `bench.harness.bench_server`'s).

    Returns:
        Tree key -> median CPU milliseconds per message.
    """
    from bench.harness import bench_server

    found: dict[str, list[float]] = {t.key: [] for t in trees}
    async with contextlib.AsyncExitStack() as stack:
        if conninfo is None:
            conninfo = (await stack.enter_async_context(bench_server())).conninfo
        for number in range(rounds):
            # The order rotates, so that neither tree always runs first.
            turn = [*trees[number % len(trees) :], *trees[: number % len(trees)]]
            for tree in turn:
                figure = await asyncio.to_thread(_measure, tree, conninfo, messages)
                found[tree.key].append(figure)
                print(f"round {number + 1} {tree.key:<9} {figure:6.3f} ms/message", file=out)
    medians = {key: statistics.median(values) for key, values in found.items()}
    for key, value in medians.items():
        print(f"median   {key:<9} {value:6.3f} ms/message", file=out)
    if "baseline" in medians:
        print(f"this tree / baseline: {medians['this'] / medians['baseline']:.2f}", file=out)
    return medians


def main(argv: Sequence[str] | None = None) -> int:
    """Run from the command line.

    Args:
        argv: ``[--quick] [--baseline DIR]`` (or the child's ``--child CONNINFO N``).

    Returns:
        The exit code.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--child"]:
        print(f"{RESULT_PREFIX}{asyncio.run(child(args[1], int(args[2]))):.4f}", flush=True)
        return 0
    quick = "--quick" in args
    trees = [Tree(key="this", root=THIS_TREE)]
    if "--baseline" in args:
        at = args.index("--baseline")
        if at + 1 >= len(args):
            print(USAGE, file=sys.stderr)
            return 2
        trees.append(Tree(key="baseline", root=Path(args[at + 1]).resolve()))
        del args[at : at + 2]
    if any(a != "--quick" for a in args):
        print(USAGE, file=sys.stderr)
        return 2
    asyncio.run(
        run(
            trees,
            QUICK_MESSAGES if quick else FULL_MESSAGES,
            QUICK_ROUNDS if quick else FULL_ROUNDS,
            sys.stdout,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
