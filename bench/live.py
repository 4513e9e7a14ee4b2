"""``python -m bench --live [--quick]``: delivery latency and the cost of idle streams.

Two ``turnkeeper serve`` processes run on one scratch database (the demo world, plus
extra agents that only listen). A poster (Alex) posts into Eskalation mentioning Lotse
through process A; Lotse receives the ``agent.invocation`` through process A ("same")
or process B ("other"), by one of three modes:

- ``stream``: GET /v1/agent/events/stream;
- ``long-poll``: GET /v1/agent/events?wait=<LONG_POLL_WAIT_SECONDS>;
- ``poll 5 Hz``: GET /v1/agent/events, and a pause of `POLL_PAUSE_SECONDS` after an
  empty page (what an agent without live delivery does).

The latency of one sample is the time from the POST's answer arriving at the poster to
the event arriving at the receiver (both in this process, one monotonic clock); a
delivery that arrived before the POST's answer counts as 0. Between two samples the run
is started and finished (not timed), so every post opens a new run. With "100 agents",
99 other agents hold the same kind of connection on the receiving process at the same
time (they never get an event). The idle part opens `LiveSize.idle_streams` streams on
process B and measures that process's CPU time over a quiet window and its resident
memory per stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TextIO

import attrs
import httpx

from bench.live_servers import (
    OWNER_TOKEN,
    START_SECONDS,
    TURNKEEPER,
    Process,
    processes,
    server_env,
)

#: Seconds one delivery may take before the sample counts as lost.
DELIVERY_TIMEOUT_SECONDS = 10.0
#: The long-poll's ``wait``.
LONG_POLL_WAIT_SECONDS = 30
#: The pause of the 5 Hz poller after an empty page.
POLL_PAUSE_SECONDS = 0.2
MS_PER_S = 1000.0
_P50 = 0.50
_P99 = 0.99


@attrs.frozen(kw_only=True)
class LiveSize:
    """How much the live benchmark does.

    Attributes:
        samples: measured deliveries per scenario.
        many_agents: connected agents of the "many" scenarios (Lotse included).
        idle_streams: streams of the idle measurement.
        idle_seconds: length of the idle measurement window.
        warmup: samples before the measured ones in each scenario (connections, caches).
        settle_seconds: pause before the idle measurement and after opening its streams.
    """

    samples: int
    many_agents: int
    idle_streams: int
    idle_seconds: float
    warmup: int
    settle_seconds: float


FULL = LiveSize(
    samples=100,
    many_agents=100,
    idle_streams=1000,
    idle_seconds=30.0,
    warmup=3,
    settle_seconds=2.0,
)
QUICK = LiveSize(
    samples=2, many_agents=3, idle_streams=10, idle_seconds=0.5, warmup=1, settle_seconds=0.2
)

MODES = ("stream", "long-poll", "poll 5 Hz")


# -- receivers ------------------------------------------------------------------------------

#: Called with the arrival time and the event document of each agent.invocation.
Deliver = Callable[[float, dict[str, Any]], None]


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _stream(
    http: httpx.AsyncClient, url: str, token: str, after: int, deliver: Deliver
) -> None:
    cursor = after
    while True:
        headers = {**_bearer(token), "Last-Event-ID": str(cursor)}
        # A dropped connection is reopened where it stopped, as a client does.
        with contextlib.suppress(httpx.TransportError):
            async with http.stream(
                "GET", f"{url}/v1/agent/events/stream", headers=headers
            ) as answer:
                answer.raise_for_status()
                async for line in answer.aiter_lines():
                    if line.startswith("id:"):
                        cursor = int(line[len("id:") :])
                    elif line.startswith("data:"):
                        event = json.loads(line[len("data:") :])
                        if event["type"] == "agent.invocation":
                            deliver(time.monotonic(), event)


async def _page(
    http: httpx.AsyncClient, url: str, token: str, params: dict[str, int]
) -> dict[str, Any] | None:
    """One page of the agent feed; None when the connection failed (ask again)."""
    try:
        answer = await http.get(f"{url}/v1/agent/events", params=params, headers=_bearer(token))
    except httpx.TransportError:
        # A kept-alive connection the server closed meanwhile: ask again, as a client does.
        return None
    answer.raise_for_status()
    page: dict[str, Any] = answer.json()
    return page


async def _long_poll(
    http: httpx.AsyncClient, url: str, token: str, after: int, deliver: Deliver
) -> None:
    cursor = after
    while True:
        page = await _page(http, url, token, {"after": cursor, "wait": LONG_POLL_WAIT_SECONDS})
        if page is None:
            continue
        for event in page["events"]:
            if event["type"] == "agent.invocation":
                deliver(time.monotonic(), event)
        cursor = page["next_after"]


async def _poll(
    http: httpx.AsyncClient, url: str, token: str, after: int, deliver: Deliver
) -> None:
    cursor = after
    while True:
        page = await _page(http, url, token, {"after": cursor})
        if page is None:
            continue
        for event in page["events"]:
            if event["type"] == "agent.invocation":
                deliver(time.monotonic(), event)
        if not page["events"]:
            await asyncio.sleep(POLL_PAUSE_SECONDS)
        cursor = page["next_after"]


Receiver = Callable[[httpx.AsyncClient, str, str, int, Deliver], Coroutine[Any, Any, None]]
RECEIVERS: dict[str, Receiver] = {"stream": _stream, "long-poll": _long_poll, "poll 5 Hz": _poll}


# -- the scenarios --------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class LatencyRow:
    """One scenario's figures (milliseconds)."""

    mode: str
    agents: int
    placement: str
    samples: int
    p50: float
    p99: float
    mean: float
    lost: int


@attrs.frozen(kw_only=True)
class IdleRow:
    """The cost of idle streams on one process."""

    streams: int
    seconds: float
    cpu_percent: float
    rss_kib_per_stream: float
    rss_before_mib: float
    rss_after_mib: float


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


@attrs.define
class World:
    """Ids and tokens of the benchmark's world."""

    document: dict[str, Any]
    listeners: list[str] = attrs.Factory(list)

    def token(self, handle: str) -> str:
        """The token of a person or agent of the demo world."""
        found = self.document["people"].get(handle) or self.document["agents"][handle]
        return str(found["token"])

    def principal_id(self, handle: str) -> str:
        """The id of a person or agent of the demo world."""
        found = self.document["people"].get(handle) or self.document["agents"][handle]
        return str(found["id"])

    @property
    def thread(self) -> str:
        """The main thread of Eskalation (mentions trigger there)."""
        return str(self.document["channels"]["eskalation"]["main_thread_id"])


async def _feed_end(http: httpx.AsyncClient, url: str, token: str) -> int:
    """The cursor after everything in an agent's feed now."""
    after = 0
    while True:
        page = (
            await http.get(
                f"{url}/v1/agent/events",
                params={"after": after, "limit": 500},
                headers=_bearer(token),
            )
        ).json()
        if page["next_after"] == after:
            return after
        after = int(page["next_after"])


async def _recover(
    http: httpx.AsyncClient, url: str, token: str, after: int, message_id: str
) -> None:
    """End the run of a lost delivery, so that the next post opens a run again."""
    page = (
        await http.get(
            f"{url}/v1/agent/events", params={"after": after, "limit": 500}, headers=_bearer(token)
        )
    ).json()
    for event in page["events"]:
        if event["type"] == "agent.invocation" and event["payload"]["message_id"] == message_id:
            await _end_run(http, url, token, event)


async def _latency(
    http: httpx.AsyncClient,
    world: World,
    poster: Process,
    receiver: Process,
    mode: str,
    agents: int,
    size: LiveSize,
) -> LatencyRow:
    lotse = world.token("lotse")
    arrivals: asyncio.Queue[tuple[float, dict[str, Any]]] = asyncio.Queue()
    receive = RECEIVERS[mode]
    start = await _feed_end(http, receiver.url, lotse)
    tasks = [
        asyncio.create_task(
            receive(
                http,
                receiver.url,
                lotse,
                start,
                lambda at, event: arrivals.put_nowait((at, event)),
            )
        )
    ]
    for token in world.listeners[: agents - 1]:
        after = await _feed_end(http, receiver.url, token)
        tasks.append(asyncio.create_task(receive(http, receiver.url, token, after, _ignore)))
    latencies: list[float] = []
    lost = 0
    try:
        for number in range(size.warmup + size.samples):
            body = {
                "client_msg_id": f"bench-live-{mode}-{agents}-{receiver.port}-{number}",
                "content": "Lotse, please look at this.",
                "mentions": [world.principal_id("lotse")],
            }
            posted = await http.post(
                f"{poster.url}/v1/threads/{world.thread}/messages",
                json=body,
                headers=_bearer(world.token("alex")),
            )
            returned = time.monotonic()
            posted.raise_for_status()
            try:
                arrived, event = await asyncio.wait_for(
                    _arrival_of(arrivals, str(posted.json()["id"])), DELIVERY_TIMEOUT_SECONDS
                )
            except TimeoutError:
                lost += 1
                await _recover(http, poster.url, lotse, start, str(posted.json()["id"]))
                continue
            if number >= size.warmup:
                latencies.append(max(0.0, arrived - returned) * MS_PER_S)
            await _end_run(http, poster.url, lotse, event)
    finally:
        failed = [t for t in tasks if t.done() and not t.cancelled() and t.exception()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if failed:
            raise RuntimeError(f"{len(failed)} receivers failed") from failed[0].exception()
    return LatencyRow(
        mode=mode,
        agents=agents,
        placement="same" if poster is receiver else "other",
        samples=len(latencies),
        p50=_percentile(latencies, _P50),
        p99=_percentile(latencies, _P99),
        mean=statistics.fmean(latencies),
        lost=lost,
    )


async def _arrival_of(
    arrivals: asyncio.Queue[tuple[float, dict[str, Any]]], message_id: str
) -> tuple[float, dict[str, Any]]:
    """The arrival of the invocation of one message (late ones of lost samples skipped)."""
    while True:
        arrived, event = await arrivals.get()
        if event["payload"]["message_id"] == message_id:
            return arrived, event


def _ignore(at: float, event: dict[str, Any]) -> None:
    return None


async def _end_run(http: httpx.AsyncClient, url: str, token: str, event: dict[str, Any]) -> None:
    run_id = event["payload"]["run_id"]
    headers = _bearer(token)
    started = await http.post(
        f"{url}/v1/runs/{run_id}/start",
        json={"invocation_token": event["invocation_token"]},
        headers=headers,
    )
    started.raise_for_status()
    finished = await http.post(
        f"{url}/v1/runs/{run_id}/finish", json={"state": "completed"}, headers=headers
    )
    finished.raise_for_status()


async def _idle(http: httpx.AsyncClient, world: World, process: Process, size: LiveSize) -> IdleRow:
    await asyncio.sleep(size.settle_seconds)
    before = process.rss_kib()
    opened = asyncio.Event()
    count = 0

    async def hold(token: str) -> None:
        nonlocal count
        async with http.stream(
            "GET", f"{process.url}/v1/events/stream?after=0", headers=_bearer(token)
        ) as answer:
            answer.raise_for_status()
            count += 1
            if count == size.idle_streams:
                opened.set()
            async for _ in answer.aiter_lines():
                pass

    tokens = [world.token("sam")] * size.idle_streams
    tasks = [asyncio.create_task(hold(token)) for token in tokens]
    try:
        await asyncio.wait_for(opened.wait(), START_SECONDS)
        await asyncio.sleep(size.settle_seconds)  # the streams' first reads end
        cpu = process.cpu_seconds()
        started = time.monotonic()
        await asyncio.sleep(size.idle_seconds)  # the measured quiet window
        seconds = time.monotonic() - started
        used = process.cpu_seconds() - cpu
        after = process.rss_kib()
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await task
    return IdleRow(
        streams=size.idle_streams,
        seconds=seconds,
        cpu_percent=100.0 * used / seconds,
        rss_kib_per_stream=(after - before) / size.idle_streams,
        rss_before_mib=before / 1024.0,
        rss_after_mib=after / 1024.0,
    )


async def _demo_world(env: dict[str, str]) -> dict[str, Any]:
    done = await asyncio.to_thread(
        subprocess.run,
        [str(TURNKEEPER), "demo-world"],
        env=env,
        capture_output=True,
        text=True,
        timeout=START_SECONDS,
        check=True,
    )
    document: dict[str, Any] = json.loads(done.stdout)
    return document


async def _listeners(http: httpx.AsyncClient, url: str, count: int) -> list[str]:
    tokens = []
    for number in range(count):
        answer = await http.post(
            f"{url}/v1/principals",
            json={"kind": "agent", "handle": f"listener{number}"},
            headers=_bearer(OWNER_TOKEN),
        )
        answer.raise_for_status()
        tokens.append(str(answer.json()["token"]))
    return tokens


async def run_live(
    conninfo: str, size: LiveSize, on_row: Callable[[str], None] | None = None
) -> tuple[list[LatencyRow], IdleRow]:
    """Run every scenario on a migrated, empty database.

    Args:
        conninfo: the scratch database.
        size: how much to do.
        on_row: called with each formatted row as soon as it is measured.

    Returns:
        The latency rows and the idle row.
    """
    rows: list[LatencyRow] = []
    with tempfile.TemporaryDirectory(prefix="turnkeeper-bench-live-") as folder:
        base = Path(folder)
        limit = size.idle_streams + size.many_agents
        env = server_env(conninfo, base, limit)
        document = await _demo_world(env)
        with processes(conninfo, base, limit) as (a, b):
            await asyncio.gather(a.ready(), b.ready())
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
            timeout = httpx.Timeout(LONG_POLL_WAIT_SECONDS + DELIVERY_TIMEOUT_SECONDS)
            async with httpx.AsyncClient(limits=limits, timeout=timeout) as http:
                world = World(document=document)
                world.listeners = await _listeners(http, a.url, size.many_agents - 1)
                for mode in MODES:
                    for agents in (1, size.many_agents):
                        for receiver in (a, b):
                            row = await _latency(http, world, a, receiver, mode, agents, size)
                            rows.append(row)
                            if on_row is not None:
                                on_row(format_latency(row))
                idle = await _idle(http, world, b, size)
    return rows, idle


LATENCY_HEADER = (
    f"{'mode':<10} {'agents':>6} {'process':<7} {'n':>4} {'p50 ms':>8} {'p99 ms':>8} "
    f"{'mean ms':>8} {'lost':>4}"
)


def format_latency(row: LatencyRow) -> str:
    """One table line of a latency row."""
    return (
        f"{row.mode:<10} {row.agents:>6} {row.placement:<7} {row.samples:>4} "
        f"{row.p50:>8.1f} {row.p99:>8.1f} {row.mean:>8.1f} {row.lost:>4}"
    )


def format_idle(row: IdleRow) -> str:
    """The line of the idle measurement."""
    return (
        f"{row.streams} idle streams over {row.seconds:.0f} s: server CPU "
        f"{row.cpu_percent:.2f} % of a core; RSS {row.rss_before_mib:.1f} -> "
        f"{row.rss_after_mib:.1f} MiB, {row.rss_kib_per_stream:.1f} KiB per stream"
    )


async def main_async(conninfo: str, quick: bool, out: TextIO) -> int:
    """Run the live benchmark and print its tables.

    Args:
        conninfo: a scratch database.
        quick: the tiny size.
        out: where to print.

    Returns:
        The exit code.
    """
    print(
        "delivery latency: a person's POST answer -> the agent holding agent.invocation",
        file=out,
    )
    print(LATENCY_HEADER, file=out, flush=True)
    _, idle = await run_live(
        conninfo, QUICK if quick else FULL, lambda line: print(line, file=out, flush=True)
    )
    print(format_idle(idle), file=out)
    # The machine may be shared: the load says how much the figures are worth.
    print("load average (1, 5, 15 min): {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()), file=out)
    return 0
