"""The floor table: every hot operation against an independent floor, in-process and HTTP.

For each group (an operation, or the floor rows) and each concurrency, every side of the
group runs on its own workers, `FloorSize.repeats` times, interleaved (the order of the
sides rotates from one round to the next), and the table shows each side's median
round with the spread of the rounds. The sides:

- ``F1`` (in every group): the floor, the append of a message the fewest-round-trip way
  (thread row update, message insert, event insert in one statement, autocommit),
  measured beside every operation so that each ratio compares rounds of one period;
- ``floor``: the operation's own fewest-round-trip version (`bench.floor`);
- ``service``: the application service in-process;
- ``http``: the same operation against a real ``turnkeeper serve`` process
  (`bench.serve`), from the load client process (`bench.loadclient`), one keep-alive
  connection per worker;
- ``F2``, ``F3``, ``F4`` (the floors group): the floor's statements one by one in a
  transaction, the floor plus the event log's ordering (seq from the writer's xid), and
  everything a plain message checks and writes in one statement.

Per measurement: operations per second, latency, CPU per operation of this process
(the in-process sides), of the server (HTTP), of the load client and of every
PostgreSQL process (`bench.cpu`). Per in-process side, round trips and statements per
operation are counted once per group from libpq's trace (`bench.roundtrips`); HTTP runs
the service's statements (its requests go through the same service).
"""

from __future__ import annotations

import math
import time
import uuid
from typing import TextIO

import attrs

from bench import floor
from bench.asgi import AsgiClient
from bench.cpu import CpuProbe, postmaster_pid
from bench.floor_report import GroupResult, Measured, SideResult, format_side_line, report
from bench.harness import Settle, Timing, drive, open_traced_pool
from bench.http_load import (
    MESSAGE_TEXT,
    SEND_TEXT,
    LoadClient,
    RequestBuilder,
    finish_request,
    message_request,
    plan,
    poll_request,
    send_request,
)
from bench.operations import OPERATIONS, Item, Operation, Prepare, Run
from bench.roundtrips import census_pool, counted
from bench.serve import RunningServer, turnkeeper_server
from bench.world import BenchWorld, build_world, rebind
from turnkeeper.adapters.http.app import create_app

#: Pool connections beyond the highest concurrency (set-up work), as bench.suite.
POOL_SPARE = 4


@attrs.frozen(kw_only=True)
class FloorSize:
    """How much work the floor table does.

    Attributes:
        ops: timed items per measurement for an operation of scale 1.
        min_ops: timed items per measurement at least, whatever the scale (so that an
            expensive set-up still gives a measurement longer than a blink).
        warmup: untimed items per worker first (scaled down for expensive set-ups).
        repeats: rounds per group and concurrency (each side once per round).
        concurrency: the concurrency levels.
        census: items per in-process side whose round trips are counted.
        warm_ops: items per side of a discarded first round of every group at the
            highest concurrency (0: none), see `PLAN_WARM_EXECUTIONS`.
        http: measure the HTTP side.
    """

    ops: int
    warmup: int
    repeats: int
    concurrency: tuple[int, ...]
    census: int
    min_ops: int = 1
    warm_ops: int = 0
    http: bool = True

    def items(self, scale: float, concurrency: int) -> tuple[int, int]:
        """Timed and warm-up items per worker (as `bench.suite.SuiteSize.items`).

        Args:
            scale: the group's share of `ops`.
            concurrency: the workers.

        Returns:
            (timed, warmup) per worker.
        """
        timed = math.ceil(max(self.min_ops, self.ops * scale) / concurrency)
        if scale >= 0.5:
            return timed, self.warmup
        return timed, min(self.warmup, 1) if scale >= 0.1 else 0


#: Executions of each statement per pooled connection before the first measurement.
#: PostgreSQL plans a prepared statement anew at each of its first five executions on a
#: connection (custom plans) before it may keep a generic plan, and the pool hands its
#: connections out in turn: without this round a floor statement of 60 lines was
#: planned at every execution of the first measurements, the service's small ones too.
PLAN_WARM_EXECUTIONS = 6
#: The highest concurrency of the full run.
FULL_CONCURRENCY = (1, 8, 32)
#: The full run.
FULL = FloorSize(
    ops=240,
    warmup=3,
    repeats=5,
    concurrency=FULL_CONCURRENCY,
    census=3,
    min_ops=64,
    warm_ops=PLAN_WARM_EXECUTIONS * (max(FULL_CONCURRENCY) + POOL_SPARE),
)
#: The smoke test's size: every group and side once.
QUICK = FloorSize(ops=1, warmup=1, repeats=1, concurrency=(1, 2), census=1)


@attrs.frozen(kw_only=True)
class Side:
    """One side of a group.

    Attributes:
        key: F1 to F4, floor, service or http.
        label: its name in the table.
        workers: the world's worker set it runs on (service, raw or http).
        run: runs an item in-process (None for HTTP); the ASGI client it is given is
            the operations' common signature, no side here uses it.
        request: the HTTP request of an item (None in-process).
        prepare: its own preparation (None: the group's).
        scale: its own share of `FloorSize.ops` (None: the group's).
    """

    key: str
    label: str
    workers: str
    run: Run | None = None
    request: RequestBuilder | None = None
    prepare: Prepare | None = None
    scale: float | None = None


@attrs.frozen(kw_only=True)
class Group:
    """An operation (or the floor rows) with its sides.

    Attributes:
        name: the operation's name (`bench.operations.OPERATIONS`) or ``floors``.
        prepare: makes the items.
        scale: share of `FloorSize.ops`.
        sides: the sides, in the order of the first round.
    """

    name: str
    prepare: Prepare
    scale: float
    sides: tuple[Side, ...]


_OPS: dict[str, Operation] = {op.name: op for op in OPERATIONS}
_QUIET = _OPS["message, no trigger"].prepare


def _thread(item: Item) -> uuid.UUID:
    assert item.thread_id is not None
    return item.thread_id


async def _f1(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    return await floor.append_one_statement(world, item.worker, _thread(item))


async def _f2(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    return await floor.append_in_transaction(world, item.worker, _thread(item))


async def _f3(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    return await floor.append_one_statement(world, item.worker, _thread(item), counter=True)


async def _f4(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    w = item.worker
    return await floor.create_message(world, w, _thread(item), w.cid("m"), MESSAGE_TEXT, runs=False)


def _floor_message(expected: str) -> Run:
    async def run(world: BenchWorld, http: AsgiClient, item: Item) -> object:
        w = item.worker
        path, seq = await floor.create_message(world, w, _thread(item), w.cid("m"), MESSAGE_TEXT)
        if path != expected:
            raise RuntimeError(f"floor createMessage took the {path} path, not {expected}")
        return seq

    return run


async def _floor_send(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    assert item.sender is not None
    thread = _thread(item)
    w = item.worker
    state, seq = await floor.gated_send(
        world, w, thread, item.sender.known[thread], w.cid("s"), SEND_TEXT
    )
    item.sender.learn(thread, state, seq)
    return state


def _floor_finish(followups: bool) -> Run:
    async def run(world: BenchWorld, http: AsgiClient, item: Item) -> object:
        assert item.run_id is not None
        follow_on = await floor.finish_run(world, item.worker, item.run_id)
        if (follow_on is not None) != followups:
            raise RuntimeError("floor finish: the follow-on run is not what the set-up made")
        return follow_on

    return run


async def _floor_poll(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    worker = item.worker
    worker.feed_after, delivered = await floor.poll(world, worker, worker.feed_after)
    if delivered != 1:
        raise RuntimeError("floor poll: expected one invocation with a token")
    return delivered


#: The floor, in every group at its full size: its items are cheap to prepare.
_F1 = Side(
    key="F1",
    label="floor: one CTE statement",
    workers="raw",
    run=_f1,
    prepare=_QUIET,
    scale=1.0,
)


def _operation(name: str, floor_label: str, run: Run, request: RequestBuilder) -> Group:
    op = _OPS[name]
    return Group(
        name=name,
        prepare=op.prepare,
        scale=op.ops_scale,
        sides=(
            _F1,
            Side(key="floor", label=floor_label, workers="raw", run=run),
            Side(key="service", label="service", workers="service", run=op.service),
            Side(key="http", label="HTTP (turnkeeper serve)", workers="http", request=request),
        ),
    )


GROUPS: tuple[Group, ...] = (
    Group(
        name="floors",
        prepare=_QUIET,
        scale=1.0,
        sides=(
            _F1,
            Side(key="F2", label="floor: 3 statements in BEGIN/COMMIT", workers="raw", run=_f2),
            Side(key="F3", label="floor plus the event log's ordering", workers="raw", run=_f3),
            Side(
                key="F4",
                label="everything a plain message checks and writes, one statement",
                workers="raw",
                run=_f4,
            ),
        ),
    ),
    _operation("message, no trigger", "one statement", _floor_message("plain"), message_request),
    _operation("message opens run", "one statement", _floor_message("run"), message_request),
    _operation("gated send, many threads", "one statement", _floor_send, send_request),
    _operation("gated send, hot thread", "one statement", _floor_send, send_request),
    _operation("finish, 0 follow-ups", "one pipeline", _floor_finish(False), finish_request),
    _operation("finish, 10 follow-ups", "one pipeline", _floor_finish(True), finish_request),
    _operation("agent poll + delivery", "one statement", _floor_poll, poll_request),
)


@attrs.define
class _Context:
    world: BenchWorld
    census_world: BenchWorld
    probe: CpuProbe
    asgi: AsgiClient
    client: LoadClient | None = None
    server: RunningServer | None = None


async def _measure(
    ctx: _Context, group: Group, side: Side, concurrency: int, size: FloorSize
) -> Timing:
    timed, warmup = size.items(group.scale if side.scale is None else side.scale, concurrency)
    workers = ctx.world.workers[side.workers][:concurrency]
    work = await (side.prepare or group.prepare)(ctx.world, workers, timed + warmup)
    if side.request is not None:
        assert ctx.client is not None
        assert ctx.server is not None
        requests, states = plan(work, side.request)
        return await ctx.client.run(
            ctx.server, requests, states, warmup, ctx.probe.with_server(ctx.server.pid)
        )
    run = side.run
    assert run is not None
    return await drive(work, lambda item: run(ctx.world, ctx.asgi, item), warmup, ctx.probe)


async def _census(ctx: _Context, group: Group, side: Side, items: int) -> tuple[float, float]:
    """Round trips and statements per operation of an in-process side.

    One more item runs first, uncounted: on a connection's first use a statement costs
    a round trip more (psycopg prepares it with a Sync of its own), which no later
    operation of a pooled connection pays.
    """
    assert side.run is not None
    worker = ctx.world.workers[side.workers][0]
    work = await (side.prepare or group.prepare)(ctx.world, [worker], items + 1)
    pool = ctx.census_world.pool
    await side.run(ctx.census_world, ctx.asgi, work[0][0])
    round_trips = statements = 0
    for item in work[0][1:]:
        async with counted(pool) as exchange:
            await side.run(ctx.census_world, ctx.asgi, item)
        round_trips += exchange.round_trips
        statements += exchange.statements
    return round_trips / items, statements / items


def _sides(group: Group, size: FloorSize) -> tuple[Side, ...]:
    return tuple(s for s in group.sides if size.http or s.request is None)


async def measure_group(
    ctx: _Context, group: Group, concurrency: int, size: FloorSize
) -> GroupResult:
    """Every side of a group at one concurrency, in interleaved rounds.

    Args:
        ctx: the run's world, probe, server and client.
        group: the group.
        concurrency: workers per side.
        size: the size.

    Returns:
        The group's result.
    """
    sides = _sides(group, size)
    rounds: dict[str, list[Timing]] = {s.key: [] for s in sides}
    for index in range(size.repeats):
        shift = index % len(sides)
        for side in sides[shift:] + sides[:shift]:
            rounds[side.key].append(await _measure(ctx, group, side, concurrency, size))
    return GroupResult(
        group=group.name,
        concurrency=concurrency,
        sides=[
            SideResult(key=s.key, label=s.label, measured=Measured.of(rounds[s.key])) for s in sides
        ],
    )


async def run_floor_suite(
    conninfo: str,
    size: FloorSize = FULL,
    *,
    groups: tuple[Group, ...] = GROUPS,
    out: TextIO | None = None,
    settle: Settle | None = None,
) -> tuple[list[GroupResult], dict[tuple[str, str], tuple[float, float]]]:
    """Measure every group at every concurrency on a migrated, empty database.

    Args:
        conninfo: the database.
        size: the size.
        groups: the groups.
        out: where each measured group is printed as soon as it is measured.
        settle: called once with the world's settings when the world and the in-process
            app are built, before anything is measured (`bench.harness.settle_as_serve`).

    Returns:
        The results in table order, and the census: (group, side) -> (round trips,
        statements) per operation.
    """
    most = max(size.concurrency)
    pool = await open_traced_pool(conninfo, most + POOL_SPARE)
    try:
        census = await census_pool(conninfo)
    except BaseException:
        await pool.close()
        raise
    results: list[GroupResult] = []
    counts: dict[tuple[str, str], tuple[float, float]] = {}
    try:
        world = await build_world(pool, most)
        await floor.ensure_floor_sequence(world)
        ctx = _Context(
            world=world,
            census_world=rebind(world, census),
            probe=CpuProbe(await postmaster_pid(conninfo)),
            asgi=AsgiClient(create_app(world.services, world.services.settings)),
        )
        for group in groups:
            for side in group.sides:
                if side.run is not None:
                    counts[(group.name, side.key)] = await _census(ctx, group, side, size.census)
        if settle is not None:
            settle(world.services.settings)
        async with (
            turnkeeper_server(conninfo, most + POOL_SPARE) as server,
            LoadClient.start() as client,
        ):
            ctx.server, ctx.client = server, client
            if size.warm_ops:
                warm = attrs.evolve(size, ops=size.warm_ops, repeats=1, concurrency=(most,))
                started = time.monotonic()
                for group in groups:
                    await measure_group(ctx, attrs.evolve(group, scale=1.0), most, warm)
                if out is not None:
                    print(
                        f"(a discarded warm round of {size.warm_ops} operations per side at"
                        f" concurrency {most} took {time.monotonic() - started:.0f} s)",
                        file=out,
                        flush=True,
                    )
            for group in groups:
                for concurrency in size.concurrency:
                    result = await measure_group(ctx, group, concurrency, size)
                    results.append(result)
                    if out is not None:
                        for line in format_side_line(result, counts):
                            print(line, file=out, flush=True)
    finally:
        await census.close()
        await pool.close()
    return results, counts


__all__ = [
    "FULL",
    "GROUPS",
    "QUICK",
    "FloorSize",
    "Group",
    "Side",
    "measure_group",
    "report",
    "run_floor_suite",
]
