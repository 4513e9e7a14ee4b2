"""Slow clients: connections that never finish their headers do not lock anyone out.

`turnkeeper serve --memory` runs as a subprocess with the open file limit of a common
default (1024), where about a thousand stalled connections used to exhaust the
descriptors: the server stopped accepting and a polite client waited forever.

- 2,000 connections that send part of a request and then nothing are open, and a polite
  client is served within `POLITE_BOUND_SECONDS` (the guard closes the connection that
  waited longest for its headers to make room; ``http.max_connections`` is held below
  the file limit);
- a connection that trickles header bytes is closed ``http.header_timeout`` after it
  opened, and after the previous answer on a kept-alive connection: bytes received do
  not extend the bound;
- beyond ``http.max_connections``, the connections that waited longest are closed first.

Every test over sockets runs with both parsers ``http.parser`` offers: httptools (the
``fast`` extra, what ``auto`` takes when installed) and h11 (ADR 0021).
`ConnectionGuard` is also tested alone, without sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.reliability.support_server import TURNKEEPER, free_port
from turnkeeper.adapters.http.guard import ConnectionGuard
from turnkeeper.adapters.http.server import GuardedH11Protocol

#: The open file limit of the server process (a common default soft limit).
SERVER_OPEN_FILES = 1024
#: Stalled connections of the attack.
SLOW_CONNECTIONS = 2000
#: Connections opened at once while the attack builds up.
OPEN_BATCH = 100
#: Seconds the polite client may wait for its answer during the attack.
POLITE_BOUND_SECONDS = 5.0
#: ``http.header_timeout`` of the timing tests.
HEADER_TIMEOUT = 2
#: What a bound may be exceeded by on a loaded machine (scheduling, not waiting).
SLACK_SECONDS = 1.5
#: Seconds between two bytes of a trickling client.
TRICKLE_SECONDS = 0.2
#: Seconds the server may take to start.
START_TIMEOUT_SECONDS = 60.0
#: The start of a request that never ends.
PARTIAL = b"GET /healthz HTTP/1.1\r\nHost: example.com\r\n"
#: Descriptors the test process needs besides its slow connections.
TEST_FD_RESERVE = 256
#: The parsers of ``http.parser`` the guard hooks into, each with the event loop it is
#: tested on (``http.event_loop``): the fast stack and the plain one.
PARSERS = ("httptools", "h11")
LOOPS = {"httptools": "uvloop", "h11": "asyncio"}


@pytest.fixture(params=PARSERS)
def parser(request: pytest.FixtureRequest) -> str:
    """The ``http.parser`` of the server under test."""
    return str(request.param)


def _server_limits() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (SERVER_OPEN_FILES, SERVER_OPEN_FILES))


def _start(port: int, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(TURNKEEPER), "serve", "--memory", "--no-jobs", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_server_limits,
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _output(log: Path) -> str:
    return log.read_text(errors="replace")


@contextlib.asynccontextmanager
async def memory_server(tmp_path: Path, parser: str, **settings: str) -> AsyncIterator[str]:
    """``turnkeeper serve --memory`` with a small open file limit; yields its base URL.

    The server's log must name `parser` and its loop (`LOOPS`) as the ones in use.
    """
    settings["HTTP__PARSER"] = parser
    settings["HTTP__EVENT_LOOP"] = LOOPS[parser]
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
    env["TURNKEEPER_DATA_DIR"] = str(tmp_path)
    env.update({f"TURNKEEPER_{name}": value for name, value in settings.items()})
    log = tmp_path / "serve.log"
    process = _start(port, env, log)
    url = f"http://127.0.0.1:{port}"
    try:
        await _until_up(url, process, log)
        stack = f'"parser": "{parser}", "event_loop": "{LOOPS[parser]}"'
        assert stack in _output(log), _output(log)
        yield url
    finally:
        _stop(process)


async def _until_up(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    async with httpx.AsyncClient(timeout=1.0) as client:
        while time.monotonic() < deadline:
            assert process.poll() is None, _output(log)
            with contextlib.suppress(httpx.TransportError):
                if (await client.get(f"{url}/healthz")).status_code == 200:
                    return
            await asyncio.sleep(0.05)
    raise AssertionError(f"the server did not start\n{_output(log)}")


@contextlib.contextmanager
def open_files_for(connections: int) -> Iterator[None]:
    """Raise this process's soft open file limit for `connections` sockets, if needed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + TEST_FD_RESERVE
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        yield
        return
    assert hard == resource.RLIM_INFINITY or hard >= wanted, (
        f"the test needs {wanted} open files, the hard limit is {hard}"
    )
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _slow(port: int) -> Stream:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(PARTIAL)
    await writer.drain()
    return reader, writer


async def open_slow(port: int, count: int) -> list[Stream]:
    """`count` connections that sent part of a request (opened in batches, oldest first)."""
    streams: list[Stream] = []
    for start in range(0, count, OPEN_BATCH):
        batch = min(OPEN_BATCH, count - start)
        streams.extend(await asyncio.gather(*(_slow(port) for _ in range(batch))))
    return streams


def close_all(streams: list[Stream]) -> None:
    for _, writer in streams:
        writer.close()


async def closed_by_server(reader: asyncio.StreamReader, within: float) -> bool:
    """Whether the server closes the connection within `within` seconds."""
    try:
        async with asyncio.timeout(within):
            while await reader.read(4096):
                continue
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    return True


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


async def test_a_polite_client_is_served_while_2000_connections_stall(
    tmp_path: Path, parser: str
) -> None:
    # A header timeout far beyond the test: only the connection bound makes room.
    async with memory_server(tmp_path, parser, HTTP__HEADER_TIMEOUT="600") as url:
        with open_files_for(SLOW_CONNECTIONS):
            slow = await open_slow(_port(url), SLOW_CONNECTIONS)
            try:
                assert len(slow) == SLOW_CONNECTIONS
                start = time.monotonic()
                async with httpx.AsyncClient(timeout=POLITE_BOUND_SECONDS) as client:
                    health = await client.get(f"{url}/healthz")
                    ready = await client.get(f"{url}/readyz")
                assert time.monotonic() - start <= POLITE_BOUND_SECONDS
                assert (health.status_code, ready.status_code) == (200, 200)
                # The oldest stalled connections made the room: closed, not just ignored.
                assert await closed_by_server(slow[0][0], within=SLACK_SECONDS)
            finally:
                close_all(slow)


async def _trickle(writer: asyncio.StreamWriter, stop: asyncio.Event) -> None:
    with contextlib.suppress(ConnectionError):
        while not stop.is_set():
            writer.write(b"X")
            await writer.drain()
            await asyncio.sleep(TRICKLE_SECONDS)


async def _time_to_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> float:
    stop = asyncio.Event()
    trickler = asyncio.create_task(_trickle(writer, stop))
    start = time.monotonic()
    try:
        assert await closed_by_server(reader, within=HEADER_TIMEOUT + SLACK_SECONDS)
        return time.monotonic() - start
    finally:
        stop.set()
        await trickler
        writer.close()


async def _read_answer(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return head + await reader.readexactly(length)


async def test_a_trickling_client_is_closed_after_the_header_timeout(
    tmp_path: Path, parser: str
) -> None:
    async with memory_server(tmp_path, parser, HTTP__HEADER_TIMEOUT=str(HEADER_TIMEOUT)) as url:
        # First request: the bound counts from the connection's start.
        reader, writer = await _slow(_port(url))
        first = await _time_to_close(reader, writer)
        assert HEADER_TIMEOUT - TRICKLE_SECONDS <= first <= HEADER_TIMEOUT + SLACK_SECONDS
        # A kept-alive connection: the bound counts from the end of the previous answer.
        reader, writer = await asyncio.open_connection("127.0.0.1", _port(url))
        writer.write(PARTIAL + b"\r\n")
        await writer.drain()
        answer = await _read_answer(reader)
        assert answer.startswith(b"HTTP/1.1 200")
        writer.write(b"GET /healthz HTTP/1.1\r\n")
        then = await _time_to_close(reader, writer)
        assert then <= HEADER_TIMEOUT + SLACK_SECONDS


async def test_beyond_the_connection_bound_the_longest_waiting_are_closed(
    tmp_path: Path, parser: str
) -> None:
    bound, extra = 50, 10
    async with memory_server(
        tmp_path, parser, HTTP__HEADER_TIMEOUT="600", HTTP__MAX_CONNECTIONS=str(bound)
    ) as url:
        slow = await open_slow(_port(url), bound + extra)
        try:
            for reader, _ in slow[:extra]:
                assert await closed_by_server(reader, within=SLACK_SECONDS)
            async with httpx.AsyncClient(timeout=POLITE_BOUND_SECONDS) as client:
                assert (await client.get(f"{url}/healthz")).status_code == 200
        finally:
            close_all(slow)


# -- the guard alone -----------------------------------------------------------------------


class FakeConnection:
    """Stands in for a `GuardedH11Protocol`: records why it was dropped."""

    def __init__(self, guard: ConnectionGuard) -> None:
        self.guard = guard
        self.dropped: str | None = None

    def drop(self, reason: str) -> None:
        self.guard.closed(self)
        self.dropped = reason

    def body_late(self) -> None:
        raise AssertionError("no body timer runs in these tests")


def _connections(guard: ConnectionGuard, count: int) -> list[FakeConnection]:
    found = [FakeConnection(guard) for _ in range(count)]
    for connection in found:
        guard.opened(connection)
    return found


async def test_the_guard_makes_room_by_closing_the_longest_waiting() -> None:
    guard = ConnectionGuard(header_timeout=600, max_connections=3)
    first, second, third = _connections(guard, 3)
    guard.headers_received(first)
    (fourth,) = _connections(guard, 1)
    assert (first.dropped, second.dropped, third.dropped, fourth.dropped) == (
        None,
        "connection_limit",
        None,
        None,
    )
    assert len(guard.open) == 3


async def test_the_guard_refuses_a_newcomer_when_every_other_connection_is_busy() -> None:
    guard = ConnectionGuard(header_timeout=600, max_connections=2)
    busy = _connections(guard, 2)
    for connection in busy:
        guard.headers_received(connection)
    (newcomer,) = _connections(guard, 1)
    assert newcomer.dropped == "connection_limit"
    assert [c.dropped for c in busy] == [None, None]


def fire_timer(timer: asyncio.TimerHandle) -> None:
    """Run a timer's callback now, as the loop would at its time (and never again)."""
    handle: Any = timer  # its callback is not public: read it before cancel forgets it
    callback, args = handle._callback, handle._args
    timer.cancel()
    callback(*args)


async def test_the_guard_closes_a_connection_when_its_header_timer_fires() -> None:
    start = asyncio.get_running_loop().time()
    now = [start]
    guard = ConnectionGuard(header_timeout=600, max_connections=10, clock=lambda: now[0])
    (connection,) = _connections(guard, 1)
    (timer,) = guard.timers(connection)
    assert timer.when() == start + 600
    now[0] = start + 600
    fire_timer(timer)
    assert connection.dropped == "header_timeout"
    assert (guard.open, guard.waiting, guard.timers(connection)) == (set(), {}, [])


async def test_a_header_timer_judges_the_wait_running_when_it_fires() -> None:
    # One timer per connection, not one per request: a wait that ended leaves it armed,
    # and when it fires it ends the connection only if the wait running then began a
    # whole timeout ago; otherwise it is armed again for that wait's end.
    start = asyncio.get_running_loop().time()
    now = [start]
    guard = ConnectionGuard(header_timeout=600, max_connections=10, clock=lambda: now[0])
    (connection,) = _connections(guard, 1)
    guard.headers_received(connection)
    now[0] = start + 300
    guard.await_headers(connection)  # the next request's wait, begun at 300
    (timer,) = guard.timers(connection)
    assert timer.when() == start + 600  # the first wait's timer, not a new one
    now[0] = start + 600
    fire_timer(timer)
    assert connection.dropped is None
    (timer,) = guard.timers(connection)
    assert timer.when() == start + 900
    now[0] = start + 900
    fire_timer(timer)
    assert connection.dropped == "header_timeout"


async def test_a_header_timer_firing_between_waits_disarms_until_the_next_wait() -> None:
    start = asyncio.get_running_loop().time()
    now = [start]
    guard = ConnectionGuard(header_timeout=600, max_connections=10, clock=lambda: now[0])
    (connection,) = _connections(guard, 1)
    guard.headers_received(connection)  # a request in flight: no wait runs
    (timer,) = guard.timers(connection)
    now[0] = start + 600
    fire_timer(timer)
    assert (connection.dropped, guard.timers(connection)) == (None, [])
    now[0] = start + 700
    guard.await_headers(connection)
    (timer,) = guard.timers(connection)
    assert timer.when() == start + 1300
    guard.closed(connection)
    assert timer.cancelled()
    assert guard.timers(connection) == []


def test_the_guarded_protocol_is_uvicorns_h11_protocol() -> None:
    # The hooks override uvicorn's methods: a rename there must fail here.
    from uvicorn.protocols.http.h11_impl import H11Protocol

    for name in ("connection_made", "connection_lost", "data_received", "on_response_complete"):
        assert getattr(H11Protocol, name) is not getattr(GuardedH11Protocol, name)
        assert hasattr(H11Protocol, name)


def test_the_guarded_httptools_protocol_is_uvicorns_httptools_protocol() -> None:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from turnkeeper.adapters.http.httptools_guard import GuardedHttpToolsProtocol

    hooks = ("connection_made", "connection_lost", "on_headers_complete", "on_response_complete")
    for name in hooks:
        assert getattr(HttpToolsProtocol, name) is not getattr(GuardedHttpToolsProtocol, name)
        assert hasattr(HttpToolsProtocol, name)
