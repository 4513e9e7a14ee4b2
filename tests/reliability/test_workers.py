"""``turnkeeper serve --workers 2``: two real worker processes on one listening socket.

- each worker serves requests on the shared socket: while one is stopped (SIGSTOP) the
  other answers every new connection, and the other way round;
- SIGTERM to the parent stops every worker, an open event stream ending first (the
  answer ends cleanly instead of holding the shutdown up), and the parent exits 0;
- a worker that ends by itself (SIGKILL) ends the server: the parent stops the other
  worker and exits 1, with ``http_worker_ended`` in its log;
- a parent killed outright (SIGKILL) takes its workers with it (Linux: each asks for
  SIGTERM when its parent ends), so nobody serves the socket any more;
- the owner and the migrations are done once, by the parent, before the workers start;
- ``/metrics`` answers for the whole server, whichever worker accepts the scrape: the
  workers share their counters, histograms and gauges (ADR 0043);
- ``--memory`` (one store per process) refuses ``--workers``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_metrics import SERVER_METRICS
from tests.reliability.support_server import (
    OWNER_TOKEN,
    READY_POLL_SECONDS,
    REQUEST_TIMEOUT_SECONDS,
    STOP_TIMEOUT_SECONDS,
    TURNKEEPER,
    Server,
    run_cli,
    server_env,
)
from tests.support.database import fetch
from turnkeeper.application.settings import Settings

#: Worker processes of the server under test.
WORKERS = 2
#: New connections (one request each) sent while one worker is stopped.
REQUESTS_PER_WORKER = 20


def _workers_of(parent: int) -> list[int]:
    """The worker processes of a server (its children running turnkeeper)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat[stat.rfind(")") + 2 :].split()[1]) == parent:
            found.append(int(entry))
    return sorted(found)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"  # a zombie has ended


def _all_started(server: Server) -> bool:
    assert server.process is not None
    workers = _workers_of(server.process.pid)
    return len(workers) == WORKERS and server.log().count("http_server_stack") == WORKERS


@contextlib.asynccontextmanager
async def workers_server(pg_conninfo: str, tmp_path: Path) -> AsyncIterator[Server]:
    server = Server(
        env=server_env(pg_conninfo, tmp_path, HTTP__WORKERS=str(WORKERS)), log_dir=tmp_path
    )
    server.start()
    try:
        await server.wait_ready()
        assert server.process is not None
        async with asyncio.timeout(REQUEST_TIMEOUT_SECONDS):
            # Another process's start shows only in /proc and its log: polled, no event.
            while not _all_started(server):  # noqa: ASYNC110
                await asyncio.sleep(READY_POLL_SECONDS)
        yield server
    finally:
        if server.process is not None and server.process.poll() is None:
            server.process.kill()
            server.process.wait()


@contextlib.contextmanager
def stopped(pid: int) -> Iterator[None]:
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


async def _fresh_connections_answer(url: str) -> list[int]:
    statuses = []
    for _ in range(REQUESTS_PER_WORKER):
        # A new client per request: each request is a new connection to accept.
        async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_SECONDS) as client:
            statuses.append((await client.get(f"{url}/readyz")).status_code)
    return statuses


async def test_each_of_two_workers_serves_on_the_shared_socket(
    pg_conninfo: str, tmp_path: Path
) -> None:
    async with workers_server(pg_conninfo, tmp_path) as server:
        assert server.process is not None
        first, second = _workers_of(server.process.pid)
        with stopped(first):
            assert await _fresh_connections_answer(server.url) == [200] * REQUESTS_PER_WORKER
        with stopped(second):
            assert await _fresh_connections_answer(server.url) == [200] * REQUESTS_PER_WORKER
        # The one-time work was the parent's: one owner, migrations applied once.
        owners = await fetch(pg_conninfo, "SELECT count(*) FROM principals WHERE handle = 'owner'")
        assert owners == [(1,)]


async def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of one ``/metrics`` answer, on a new connection.

    The answer declares every metric of the contract, as one process's does, also those
    without samples yet (an audit: the shared files knew only the metrics with values).
    """
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_SECONDS) as client:
        answer = await client.get(f"{url}/metrics")
    assert answer.status_code == 200, answer.text
    families = {family.name for family in text_string_to_metric_families(answer.text)}
    assert families >= SERVER_METRICS, SERVER_METRICS - families
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


#: The samples the shared metrics test reads.
HUMAN_MESSAGES = ("turnkeeper_messages_created_total", (("origin", "human"),))
MESSAGE_POSTS = (
    "turnkeeper_http_requests_total",
    (("route", "/v1/threads/{thread_id}/messages"), ("status", "201")),
)
STREAMS = ("turnkeeper_event_stream_clients", ())
POOL_MAX = ("turnkeeper_db_pool_connections", (("state", "max"),))


async def _post_messages(url: str, thread: str, count: int, tag: str) -> None:
    for index in range(count):
        # A new client per request: each request is a new connection to accept.
        async with httpx.AsyncClient(
            timeout=REQUEST_TIMEOUT_SECONDS, headers={"Authorization": f"Bearer {OWNER_TOKEN}"}
        ) as client:
            posted = await client.post(
                f"{url}/v1/threads/{thread}/messages",
                json={"client_msg_id": f"{tag}-{index}", "content": f"{tag} {index}"},
            )
            assert posted.status_code == 201, posted.text


async def test_every_worker_answers_a_scrape_for_the_whole_server(
    pg_conninfo: str, tmp_path: Path
) -> None:
    # Each worker answered with its own counts: a scrape showed whichever worker
    # accepted it, and a counter went back and forth between two scrapes.
    async with workers_server(pg_conninfo, tmp_path) as server:
        assert server.process is not None
        first, second = _workers_of(server.process.pid)
        headers = {"Authorization": f"Bearer {OWNER_TOKEN}"}
        async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_SECONDS, headers=headers) as client:
            space = await client.post(f"{server.url}/v1/spaces", json={"name": "Lab"})
            channel = await client.post(
                f"{server.url}/v1/spaces/{space.json()['id']}/channels",
                json={"name": "Lab", "type": "text"},
            )
        thread = channel.json()["main_thread_id"]
        with stopped(second):
            before = await _scrape(server.url)
        with stopped(first):
            await _post_messages(server.url, thread, 3, "to-second")
        with stopped(second):
            await _post_messages(server.url, thread, 2, "to-first")
        async with (
            httpx.AsyncClient(timeout=REQUEST_TIMEOUT_SECONDS) as client,
            contextlib.AsyncExitStack() as streams,
        ):
            with stopped(first):
                stream = await streams.enter_async_context(
                    client.stream("GET", f"{server.url}/v1/events/stream", headers=headers)
                )
                assert stream.status_code == 200
            with stopped(second):
                through_first = await _scrape(server.url)
            with stopped(first):
                through_second = await _scrape(server.url)
        for scraped in (through_first, through_second):
            assert scraped[HUMAN_MESSAGES] == before[HUMAN_MESSAGES] + 5
            assert scraped[MESSAGE_POSTS] == 5
            assert scraped[STREAMS] == 1
            assert scraped[POOL_MAX] == WORKERS * Settings().pool_max_size


async def test_sigterm_stops_every_worker_and_ends_the_streams_first(
    pg_conninfo: str, tmp_path: Path
) -> None:
    async with workers_server(pg_conninfo, tmp_path) as server:
        assert server.process is not None
        workers = _workers_of(server.process.pid)
        headers = {"Authorization": f"Bearer {OWNER_TOKEN}"}
        async with (
            httpx.AsyncClient(timeout=REQUEST_TIMEOUT_SECONDS) as client,
            client.stream("GET", f"{server.url}/v1/events/stream", headers=headers) as stream,
        ):
            assert stream.status_code == 200
            server.process.send_signal(signal.SIGTERM)
            # The stream ends by itself (no stop would come while it held the worker).
            async with asyncio.timeout(STOP_TIMEOUT_SECONDS):
                async for _ in stream.aiter_raw():
                    continue
        code = await asyncio.to_thread(server.process.wait, STOP_TIMEOUT_SECONDS)
        assert code == 0, server.log()
        assert not any(_alive(pid) for pid in workers)


async def test_a_killed_worker_ends_the_server(pg_conninfo: str, tmp_path: Path) -> None:
    async with workers_server(pg_conninfo, tmp_path) as server:
        assert server.process is not None
        killed, other = _workers_of(server.process.pid)
        os.kill(killed, signal.SIGKILL)
        code = await asyncio.to_thread(server.process.wait, STOP_TIMEOUT_SECONDS)
        assert code == 1
        assert not _alive(other)
        assert "http_worker_ended" in server.log()


async def test_a_killed_parent_takes_its_workers_with_it(pg_conninfo: str, tmp_path: Path) -> None:
    async with workers_server(pg_conninfo, tmp_path) as server:
        assert server.process is not None
        workers = _workers_of(server.process.pid)
        server.process.kill()
        server.process.wait()
        # The workers' ends show only in /proc: polled within a bound, no event to wait on.
        async with asyncio.timeout(STOP_TIMEOUT_SECONDS):
            while any(_alive(pid) for pid in workers):  # noqa: ASYNC110
                await asyncio.sleep(READY_POLL_SECONDS)
        # Nobody serves the socket any more.
        with pytest.raises(httpx.TransportError):
            async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_SECONDS) as client:
                await client.get(f"{server.url}/readyz")


def test_memory_refuses_workers(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
    env["TURNKEEPER_DATA_DIR"] = str(tmp_path)
    done = run_cli(env, "serve", "--memory", "--workers", "2")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "turnkeeper: error: --memory serves from one process, not --workers"
    ]


@pytest.mark.parametrize("value", ["0", "two"])
def test_workers_must_be_a_positive_number(tmp_path: Path, value: str) -> None:
    done = subprocess.run(
        [str(TURNKEEPER), "serve", "--workers", value],
        env={**os.environ, "TURNKEEPER_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=STOP_TIMEOUT_SECONDS * 3,
        check=False,
    )
    assert done.returncode == 2
    assert "--workers" in done.stderr
