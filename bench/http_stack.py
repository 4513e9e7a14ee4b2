"""The HTTP stack table: ``turnkeeper serve`` variants side by side in one run.

``python -m bench.http_stack [--quick] [--healthz] [--baseline DIR]`` measures a message that
triggers nothing (POST /v1/threads/{id}/messages, the hottest request) at concurrency 1,
8 and 32 on these sides, in interleaved rounds (the order rotates from one round to the
next), and prints each side's median round. ``--concurrency 8 --rounds 8 --ops 6000``
changes the size and ``--only before,fast`` the HTTP sides (``--only "fast;fast, 2
workers"`` for a key with a comma): on a host whose rounds
spread by 10 to 40 %, a change of a few per cent shows only in such a focused run.
The sides:

- ``service``: the application service in-process (the reference of "HTTP over
  in-process"), called with the person's principal as an embedding program that
  authenticates by itself calls it;
- ``service, token``: the same use case called with the request's bearer token, as
  the HTTP route calls it (the token read in the post's statement, ADR 0026, and its
  last use recorded): the same work as a request without HTTP;
- ``before`` (with ``--baseline DIR``): ``turnkeeper serve`` run from another source
  tree, for example ``git archive`` of the commit before a change, as it was;
- ``h11``: this tree with ``http.parser = h11`` and ``http.event_loop = asyncio``;
- ``fast``: this tree with the defaults (httptools and uvloop when installed);
- ``fast, 2 workers``: the same with ``http.workers = 2``.

Each HTTP side is a real server process, started for its turn of a round and stopped
after it (so that only one pool holds PostgreSQL connections at a time), loaded by the
load client process (`bench.loadclient`, one keep-alive connection per worker). Per
side: requests per second, spread of the rounds, p50 latency, CPU milliseconds per
request of the server (all its processes: the workers too), of PostgreSQL and of the
load client, and the ratios to ``service`` and to ``before`` (or ``h11``) of the same
rounds. ``--healthz`` measures ``GET /healthz`` instead (no database, no token): the
cost of the HTTP stack itself, with one more side, ``bare uvicorn``: uvicorn on
httptools and uvloop serving `bench.bare_asgi`'s app, no Litestar and no turnkeeper,
the part of a request that no change of the adapter can remove.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TextIO

import attrs

from bench.against_floor import PLAN_WARM_EXECUTIONS
from bench.asgi import AsgiClient
from bench.cpu import Cpu, CpuProbe, _Reading, postmaster_pid, tree_cpu
from bench.floor_report import Measured
from bench.harness import (
    BENCH_DATABASE_PREFIX,
    Settle,
    Timing,
    bench_server,
    drive,
    open_traced_pool,
    run_stoppable,
    settle_as_serve,
)
from bench.http_load import LoadClient, message_request, plan
from bench.operations import OPERATIONS, Item, Operation
from bench.serve import RunningServer, bare_server, turnkeeper_server
from bench.world import BenchWorld, build_world
from turnkeeper.adapters.http.app import create_app
from turnkeeper.adapters.postgres.databases import scratch_database
from turnkeeper.application.services.identity import BearerToken
from turnkeeper.domain.messaging import MessageDraft

#: Pool connections beyond the highest concurrency (as the floor table).
POOL_SPARE = 2
#: The request of ``--healthz``: the HTTP stack alone (no database, no token check).
HEALTHZ: dict[str, object] = {"method": "GET", "path": "/healthz", "token": "none"}
#: The command line.
USAGE = (
    "usage: python -m bench.http_stack [--quick] [--healthz] [--baseline DIR]"
    " [--concurrency N,N] [--rounds N] [--ops N] [--only SIDE,SIDE]"
)
#: ``database.request_timeout`` of the servers.
REQUEST_TIMEOUT_SECONDS = 60
#: Milliseconds per second.
MS_PER_SECOND = 1000.0


@attrs.frozen(kw_only=True)
class StackSize:
    """How much work the table does.

    Attributes:
        ops: timed requests per measurement.
        warmup: untimed requests per worker first (prepared statements, plan caches).
        repeats: rounds (each side once per round).
        concurrency: the concurrency levels.
    """

    ops: int
    warmup: int
    repeats: int
    concurrency: tuple[int, ...]


#: The full run (about ten minutes on two cores). Rounds of a few hundred requests
#: measured start-up more than the steady state: at concurrency 8 the service took 0.30
#: ms of CPU per message in rounds of 320 and 0.26 in rounds of 3,000, and ran 2,300 to
#: 2,800 messages a second against 3,400 to 3,600 (2026-12-04, docs/performance.md).
FULL = StackSize(ops=2400, warmup=8, repeats=3, concurrency=(1, 8, 32))
#: The ``--healthz`` run: cheap requests, so more of them.
HEALTHZ_SIZE = StackSize(ops=2000, warmup=20, repeats=3, concurrency=(1, 8, 32))
#: The smoke size.
QUICK = StackSize(ops=4, warmup=1, repeats=1, concurrency=(1, 2))


@attrs.frozen(kw_only=True)
class Variant:
    """One way of running ``turnkeeper serve``.

    Attributes:
        key: its short name in the table.
        tree: the source tree it runs from (None: this one).
        settings: extra ``TURNKEEPER_*`` variables (by name without the prefix).
        workers: its worker processes (``http.workers``), which share the pool size
            of a one-process server between them (PostgreSQL's connections are few).
        bare: uvicorn with `bench.bare_asgi`'s app instead of ``turnkeeper serve``.
    """

    key: str
    tree: Path | None = None
    settings: tuple[tuple[str, str], ...] = ()
    workers: int = 1
    bare: bool = False


def variants(baseline: Path | None, *, healthz: bool = False) -> list[Variant]:
    """The HTTP sides of the table.

    Args:
        baseline: the source tree of ``before`` (None: no such side).
        healthz: the ``--healthz`` table, which ends with ``bare uvicorn``.

    Returns:
        The variants, ``before`` first when there is one.
    """
    found = [] if baseline is None else [Variant(key="before", tree=baseline)]
    bare = [Variant(key="bare uvicorn", bare=True)] if healthz else []
    return [
        *found,
        Variant(key="h11", settings=(("HTTP__PARSER", "h11"), ("HTTP__EVENT_LOOP", "asyncio"))),
        Variant(key="fast"),
        Variant(key="fast, 2 workers", settings=(("HTTP__WORKERS", "2"),), workers=2),
        *bare,
    ]


class TreeProbe(CpuProbe):
    """A CPU probe whose server figure is the server process and its children.

    Args:
        postmaster: PostgreSQL's postmaster pid.
        server: the server's (parent) pid.
    """

    def __init__(self, postmaster: int | None, server: int) -> None:
        super().__init__(postmaster)
        self._root = server
        self._start = 0.0

    def read(self) -> _Reading:
        """As `CpuProbe.read`, remembering the server tree's CPU."""
        self._start = tree_cpu(self._root) or 0.0
        return super().read()

    def since(self, start: _Reading, *, client: float | None = None) -> Cpu:
        """As `CpuProbe.since`, with the server tree's CPU since `read`."""
        cpu = super().since(start, client=client)
        end = tree_cpu(self._root)
        server = None if end is None else max(0.0, end - self._start)
        return attrs.evolve(cpu, server=server)


@contextlib.asynccontextmanager
async def started(variant: Variant, conninfo: str, pool_size: int) -> AsyncIterator[RunningServer]:
    """Start one variant's server; stop it after.

    ``turnkeeper serve`` with its request log on (into a file), or the bare server.

    Args:
        variant: the variant.
        conninfo: the benchmark's database (migrated, with the world).
        pool_size: the pool of each of its processes.

    Yields:
        The running server.

    Raises:
        RuntimeError: it did not become ready (with the end of its log).
    """
    if variant.bare:
        async with bare_server(variant.key) as bare:
            yield bare
        return
    # A loaded machine (two cores for PostgreSQL, the server, the client and this process)
    # may hold a unit past the default deadline: the table measures speed, not the bound.
    environment = {"TURNKEEPER_DATABASE__REQUEST_TIMEOUT": str(REQUEST_TIMEOUT_SECONDS)}
    environment.update({f"TURNKEEPER_{name}": value for name, value in variant.settings})
    async with turnkeeper_server(
        conninfo, pool_size, environment=environment, tree=variant.tree, label=variant.key
    ) as server:
        yield server


@attrs.define
class _Run:
    world: BenchWorld
    conninfo: str
    postmaster: int | None
    size: StackSize
    operation: Operation
    asgi: AsgiClient
    healthz: bool = False


def _timed(size: StackSize, concurrency: int) -> int:
    return max(1, size.ops // concurrency)


def _warm_items(run: _Run) -> int:
    """Items per worker at the highest concurrency that warm every connection's plans.

    They run each statement of the operation `PLAN_WARM_EXECUTIONS` times on every
    connection of a pool. PostgreSQL plans a prepared statement anew at each of its
    first executions on a connection, and the pool hands its connections out in turn:
    without such a pass the first measurement of every server start planned at each of
    its statements.

    Args:
        run: the run.

    Returns:
        The items per worker.
    """
    most = max(run.size.concurrency)
    return math.ceil(PLAN_WARM_EXECUTIONS * (most + POOL_SPARE) / most)


async def _warm_service(run: _Run) -> None:
    """The in-process pool's pass of `_warm_items` (once: the pool lives for the run)."""
    if run.healthz:
        return
    most = max(run.size.concurrency)
    workers = run.world.workers["service"][:most]
    work = await run.operation.prepare(run.world, workers, _warm_items(run) + 1)
    service = run.operation.service
    await drive(work, lambda item: service(run.world, run.asgi, item), _warm_items(run))


#: The in-process sides: the reference first.
SERVICE_SIDES = ("service", "service, token")


async def _token_message(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    """The message of `OPERATIONS`' quiet message, its author given by bearer token."""
    assert item.thread_id is not None
    return await world.services.conversation.create_message(
        BearerToken.of(item.worker.person.token),
        item.thread_id,
        MessageDraft(client_msg_id=item.worker.cid("t"), content="Sam, the report is ready."),
    )


async def _service_round(run: _Run, concurrency: int, *, token: bool = False) -> Timing:
    if run.healthz:
        calls = [[None] * (_timed(run.size, concurrency) + 1) for _ in range(concurrency)]

        async def health(item: None) -> object:
            return await run.asgi.get("/healthz")

        return await drive(calls, health, 1, CpuProbe(run.postmaster))
    workers = run.world.workers["service"][:concurrency]
    work = await run.operation.prepare(run.world, workers, _timed(run.size, concurrency) + 1)
    service = _token_message if token else run.operation.service
    probe = CpuProbe(run.postmaster)
    return await drive(work, lambda item: service(run.world, run.asgi, item), 1, probe)


async def _http_rounds(run: _Run, variant: Variant) -> dict[int, Timing]:
    """One variant at every concurrency, on one server start."""
    most = max(run.size.concurrency)
    timings: dict[int, Timing] = {}
    # A client process per server: its connections are bound to one server's port.
    async with (
        started(variant, run.conninfo, math.ceil((most + POOL_SPARE) / variant.workers)) as server,
        LoadClient.start() as client,
    ):
        probe = TreeProbe(run.postmaster, server.pid)
        if not run.healthz:
            # Each server start has a new pool: warm its plans first (`_warm_items`).
            most = max(run.size.concurrency)
            count = _warm_items(run) + 1
            warm = await run.operation.prepare(run.world, run.world.workers["http"][:most], count)
            await client.run(server, *plan(warm, message_request), count - 1, probe)
        for concurrency in run.size.concurrency:
            count = _timed(run.size, concurrency) + run.size.warmup
            if run.healthz:
                requests = [[HEALTHZ] * count for _ in range(concurrency)]
                states: list[dict[str, object]] = [{} for _ in range(concurrency)]
            else:
                workers = run.world.workers["http"][:concurrency]
                work = await run.operation.prepare(run.world, workers, count)
                requests, states = plan(work, message_request)
            try:
                timings[concurrency] = await client.run(
                    server, requests, states, run.size.warmup, probe
                )
            except RuntimeError as exc:
                raise RuntimeError(f"{variant.key} at concurrency {concurrency}: {exc}") from exc
    return timings


async def measure(
    conninfo: str,
    size: StackSize,
    baseline: Path | None,
    out: TextIO,
    *,
    healthz: bool = False,
    settle: Settle | None = None,
    only: frozenset[str] | None = None,
) -> dict[str, dict[int, Measured]]:
    """Every side at every concurrency, in interleaved rounds.

    Args:
        conninfo: a migrated, empty database.
        size: the size.
        baseline: the source tree of ``before`` (None: none).
        out: where progress lines go.
        healthz: measure ``GET /healthz`` (the stack alone) instead of the message.
        settle: called once with the world's settings when the world and the in-process
            app are built (`bench.harness.settle_as_serve`).
        only: the keys of the HTTP sides to measure (None: every side); the service
            in-process, the reference, is always measured.

    Returns:
        side key -> concurrency -> its rounds.
    """
    most = max(size.concurrency)
    pool = await open_traced_pool(conninfo, most + POOL_SPARE)
    try:
        world = await build_world(pool, most)
        by_key = {
            v.key: v for v in variants(baseline, healthz=healthz) if only is None or v.key in only
        }
        sides = [*(SERVICE_SIDES[:1] if healthz else SERVICE_SIDES), *by_key]
        rounds: dict[str, dict[int, list[Timing]]] = {
            s: {c: [] for c in size.concurrency} for s in sides
        }
        run = _Run(
            world=world,
            conninfo=conninfo,
            postmaster=await postmaster_pid(conninfo),
            size=size,
            operation=next(op for op in OPERATIONS if op.name == "message, no trigger"),
            asgi=AsgiClient(create_app(world.services, world.services.settings)),
            healthz=healthz,
        )
        if settle is not None:
            settle(world.services.settings)
        await _warm_service(run)
        for index in range(size.repeats):
            shift = index % len(sides)
            for side in sides[shift:] + sides[:shift]:
                if side in SERVICE_SIDES:
                    token = side != "service"
                    found = {c: await _service_round(run, c, token=token) for c in size.concurrency}
                else:
                    found = await _http_rounds(run, by_key[side])
                for concurrency, timing in found.items():
                    rounds[side][concurrency].append(timing)
                print(f"(round {index + 1}: {side} done)", file=out, flush=True)
    finally:
        await pool.close()
    return {s: {c: Measured.of(r) for c, r in by_c.items()} for s, by_c in rounds.items()}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def report(results: dict[str, dict[int, Measured]], out: TextIO) -> None:
    """Print the table: one line per side and concurrency.

    Args:
        results: what `measure` returned.
        out: where to print.
    """
    # The side the others are compared with besides the service (the service itself when
    # `--only` left out both).
    reference = next(side for side in ("before", "h11", "service") if side in results)
    # The in-process sides the HTTP ones are compared with (``service, token``: the same
    # work, the token's read included).
    compared = [side for side in SERVICE_SIDES if side in results]
    names = {"service": "of in-process", "service, token": "of in-process, token"}
    others = [*compared, *([] if reference in compared else [reference])]
    names[reference] = names.get(reference, f"of {reference}")
    print(
        "| side | c | req/s | spread | p50 ms | server ms/req | pg ms/req | client ms/req | "
        + " | ".join(names[side] for side in others)
        + " |",
        file=out,
    )
    print("|---" * (8 + len(others)) + "|", file=out)
    for side, by_concurrency in results.items():
        for concurrency, measured in by_concurrency.items():
            if side in SERVICE_SIDES:
                server = measured.cpu_ms(lambda c: c.python)
            else:
                server = measured.cpu_ms(lambda c: c.server)
            ratios = [
                measured.per_second / results[other][concurrency].per_second for other in others
            ]
            print(
                f"| {side} | {concurrency} | {measured.per_second:,.0f} | {measured.spread:.2f}"
                f" | {measured.median.percentile(0.5):.2f} | {_ms(server)}"
                f" | {_ms(measured.cpu_ms(lambda c: c.postgres))}"
                f" | {_ms(measured.cpu_ms(lambda c: c.client))} | "
                + " | ".join(f"{ratio:.2f}" for ratio in ratios)
                + " |",
                file=out,
                flush=True,
            )


def _load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _arguments(argv: Sequence[str]) -> argparse.Namespace | None:
    """The command line's options, or None when they are not understood."""
    parser = argparse.ArgumentParser(prog="python -m bench.http_stack", add_help=False)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--healthz", action="store_true")
    parser.add_argument("--baseline", type=Path)
    parser.add_argument("--concurrency", type=_levels)
    parser.add_argument("--rounds", type=_positive)
    parser.add_argument("--ops", type=_positive)
    parser.add_argument("--only", type=_keys)
    try:
        args, rest = parser.parse_known_args(list(argv))
    except SystemExit:
        return None
    return None if rest else args


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def _levels(text: str) -> tuple[int, ...]:
    return tuple(_positive(part) for part in text.split(","))


def _keys(text: str) -> frozenset[str]:
    # A side's key may hold a comma ("fast, 2 workers"): then the keys are given with ";".
    parts = text.split(";" if ";" in text else ",")
    return frozenset(part.strip() for part in parts if part.strip())


async def main_async(argv: Sequence[str], out: TextIO, *, settle: Settle | None = None) -> int:
    """Run the table from the command line.

    Args:
        argv: ``[--quick] [--healthz] [--baseline DIR] [--concurrency N,N] [--rounds N]
            [--ops N] [--only SIDE,SIDE]``: ``--concurrency``, ``--rounds`` and ``--ops``
            (requests per measurement) change the size (a focused run: one concurrency,
            more and longer rounds, steadies the medians of a noisy host); ``--only``
            measures those HTTP sides alone beside the service (``before,fast``, or
            separated by ``;`` when a key holds a comma: ``fast;fast, 2 workers``).
        out: where to print.
        settle: see `measure` (the command line passes `bench.harness.settle_as_serve`).

    Returns:
        The exit code (2 for arguments not understood).
    """
    args = _arguments(argv)
    if args is None:
        print(USAGE, file=sys.stderr)
        return 2
    baseline: Path | None = args.baseline
    if baseline is not None and not baseline.is_absolute():
        raise SystemExit("--baseline needs an absolute path (the server runs in it)")
    size = QUICK if args.quick else (HEALTHZ_SIZE if args.healthz else FULL)
    size = attrs.evolve(
        size,
        concurrency=args.concurrency or size.concurrency,
        repeats=args.rounds or size.repeats,
        ops=args.ops or size.ops,
    )
    async with (
        bench_server() as server,
        scratch_database(server.conninfo, prefix=BENCH_DATABASE_PREFIX) as conninfo,
    ):
        print(_load(), file=out, flush=True)
        results = await measure(
            conninfo, size, baseline, out, healthz=args.healthz, settle=settle, only=args.only
        )
        report(results, out)
        print(_load(), file=out, flush=True)
    # The medians of the server's CPU per request, for a quick look at the target.
    fast = [m.cpu_ms(lambda c: c.server) for m in results.get("fast", {}).values()]
    known = [f for f in fast if f is not None]
    if known:
        print(f"fast: server CPU per request, median {statistics.median(known):.2f} ms", file=out)
    return 0


def main() -> int:
    """Entry point of ``python -m bench.http_stack``.

    Returns:
        The exit code.
    """
    import logging

    import structlog

    # One record per operation of the in-process side would swamp the report.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    return run_stoppable(main_async(sys.argv[1:], sys.stdout, settle=settle_as_serve))


if __name__ == "__main__":
    raise SystemExit(main())
