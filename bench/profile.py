"""``python -m bench --profile [name]``: where the time of an operation goes.

Runs the chosen operations (all, or those whose name contains `name`) at concurrency 1
on the service side and on the HTTP side under pyinstrument's statistical profiler, and
prints, per side, the share of wall time spent in each layer (waiting for PostgreSQL,
psycopg, the application and domain, Litestar and msgspec, httpx, the JWT signature)
and the heaviest call paths. Concurrency 1 keeps the profile about one request; what
concurrency adds is contention, which the suite's table shows.

Findings and the changes made from them are in docs/performance.md.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import TextIO

from pyinstrument import Profiler
from pyinstrument.frame import Frame

from bench.asgi import AsgiClient
from bench.harness import drive, open_traced_pool
from bench.operations import OPERATIONS, Item, Operation, Run
from bench.suite import POOL_SPARE
from bench.world import BenchWorld, build_world
from turnkeeper.adapters.http.app import create_app

#: Timed items per side and operation (enough samples for shares within a few percent).
PROFILE_ITEMS = 300
#: Untimed items per side first (connections, plan caches).
PROFILE_WARMUP = 5
#: pyinstrument's sampling interval, seconds.
SAMPLE_INTERVAL = 0.0002
#: Call paths printed per side.
TOP_PATHS = 12

#: Layers by the path of the file a frame's code lives in (first match wins, most
#: specific first). A sample is attributed to the innermost frame's layer.
LAYERS: tuple[tuple[str, str], ...] = (
    ("/asyncio/", "event loop (asyncio, waiting for PostgreSQL)"),
    ("/selectors.py", "event loop (asyncio, waiting for PostgreSQL)"),
    ("/psycopg_pool/", "psycopg pool"),
    ("/psycopg/", "psycopg"),
    ("/jwt/", "JWT (invocation tokens)"),
    ("/cryptography/", "JWT (invocation tokens)"),
    ("/litestar/", "Litestar"),
    ("/msgspec/", "msgspec"),
    ("/bench/asgi.py", "benchmark ASGI client"),
    ("/anyio/", "anyio"),
    ("/structlog/", "structlog"),
    ("/adapters/http/", "turnkeeper HTTP adapter"),
    ("/adapters/postgres/", "turnkeeper PostgreSQL adapter"),
    ("/application/", "turnkeeper application"),
    ("/domain/", "turnkeeper domain"),
    ("/bench/", "benchmark harness"),
)


def _layer(frame: Frame) -> str:
    # Self-time leaves and C functions have no Python file: they count for the nearest
    # frame that has one (a select() under asyncio is waiting, a sha256 under our code
    # is ours).
    while frame.parent is not None and (frame.is_synthetic or not _real(frame.file_path)):
        frame = frame.parent
    path = frame.file_path or ""
    for needle, name in LAYERS:
        if needle in path:
            return name
    if not _real(path):
        return "interpreter"
    return "other (" + path.rsplit("/", 2)[-2] + ")"


def _real(path: str | None) -> bool:
    return bool(path) and not (path or "").startswith("<")


def layer_shares(root: Frame | None) -> dict[str, float]:
    """Self time per layer, as a share of the total.

    Args:
        root: the root frame of a pyinstrument session.

    Returns:
        Layer name -> share of the wall time (0..1), largest first.
    """
    if root is None or root.time <= 0:
        return {}
    totals: collections.defaultdict[str, float] = collections.defaultdict(float)
    stack = [root]
    while stack:
        frame = stack.pop()
        own = frame.time - sum(child.time for child in frame.children)
        if own > 0:
            totals[_layer(frame)] += own
        stack.extend(frame.children)
    ranked = sorted(totals.items(), key=lambda kv: kv[1], reverse=True)
    return {name: seconds / root.time for name, seconds in ranked}


def heaviest_paths(root: Frame | None, count: int) -> list[tuple[float, str]]:
    """The project frames with the most self time below them, with their callers.

    Args:
        root: the root frame.
        count: how many.

    Returns:
        (share of wall time, "caller > callee" text), largest first.
    """
    if root is None or root.time <= 0:
        return []
    found: collections.defaultdict[str, float] = collections.defaultdict(float)
    stack: list[tuple[Frame, tuple[str, ...]]] = [(root, ())]
    while stack:
        frame, path = stack.pop()
        label = f"{frame.function} ({_short(frame.file_path)}:{frame.line_no})"
        here = (*path, label)
        own = frame.time - sum(child.time for child in frame.children)
        if own > 0:
            # The last three project frames name the path well enough to find it.
            ours = [p for p in here if _is_ours(p)]
            found[" > ".join(ours[-3:]) + f" => {_layer(frame)}"] += own
        stack.extend((child, here) for child in frame.children)
    ranked = sorted(found.items(), key=lambda kv: kv[1], reverse=True)[:count]
    return [(seconds / root.time, text) for text, seconds in ranked]


def _short(path: str | None) -> str:
    if not path:
        return "?"
    for root in ("/adapters/", "/application/", "/domain/", "/bench/"):
        if root in path:
            return root.strip("/") + "/" + path.split(root, 1)[1]
    return path.rsplit("/", 1)[-1]


def _is_ours(label: str) -> bool:
    return any(f"({root}/" in label for root in ("adapters", "application", "domain"))


async def profile_side(
    world: BenchWorld,
    http: AsgiClient,
    operation: Operation,
    side: str,
    items: int = PROFILE_ITEMS,
) -> tuple[float, Frame | None]:
    """Profile one side of one operation at concurrency 1.

    Args:
        world: the world.
        http: the in-process HTTP client.
        operation: the operation.
        side: service or http.
        items: timed items of an operation of scale 1.

    Returns:
        (operations per second, the profile's root frame).
    """
    found = operation.service if side == "service" else operation.http
    assert found is not None
    call: Run = found
    items = max(1, round(items * operation.ops_scale))
    work = await operation.prepare(world, world.workers[side][:1], items + PROFILE_WARMUP)
    profiler = Profiler(interval=SAMPLE_INTERVAL, async_mode="disabled")

    async def run(item: Item) -> object:
        return await call(world, http, item)

    # Warm-up outside the profile, then the timed items inside it.
    warm = [items_of[:PROFILE_WARMUP] for items_of in work]
    await drive(warm, run, 0)
    rest = [items_of[PROFILE_WARMUP:] for items_of in work]
    profiler.start()
    timing = await drive(rest, run, 0)
    session = profiler.stop()
    return timing.per_second, session.root_frame()


def print_profile(name: str, side: str, per_second: float, root: Frame | None, out: TextIO) -> None:
    """Print the layer shares and heaviest paths of one side.

    Args:
        name: the operation.
        side: the side.
        per_second: its throughput while profiled.
        root: the profile.
        out: where to print.
    """
    print(f"\n{name}, {side}, concurrency 1: {per_second:.0f} ops/s while profiled", file=out)
    for layer, share in layer_shares(root).items():
        if share >= 0.005:
            print(f"  {share * 100:5.1f} %  {layer}", file=out)
    print("  heaviest paths (self time, project frames above):", file=out)
    for share, text in heaviest_paths(root, TOP_PATHS):
        print(f"  {share * 100:5.1f} %  {text}", file=out)


async def run_profile(
    conninfo: str, names: Sequence[str], out: TextIO, *, items: int = PROFILE_ITEMS
) -> None:
    """Profile the chosen operations on a migrated, empty database.

    Args:
        conninfo: the database.
        names: substrings of operation names (empty: every operation).
        out: where to print.
        items: timed items per side of an operation of scale 1.
    """
    chosen = [o for o in OPERATIONS if not names or any(n in o.name for n in names)]
    pool = await open_traced_pool(conninfo, 1 + POOL_SPARE)
    try:
        world = await build_world(pool, 1)
        app = create_app(world.services, world.services.settings)
        http = AsgiClient(app)
        for operation in chosen:
            for side in ("service", "http"):
                if side == "http" and operation.http is None:
                    continue
                rate, root = await profile_side(world, http, operation, side, items)
                print_profile(operation.name, side, rate, root, out)
    finally:
        await pool.close()


__all__ = ["heaviest_paths", "layer_shares", "profile_side", "run_profile"]
