"""Slow bodies (issue 16 item 8): a request that trickles its body is ended in time.

`turnkeeper serve --memory` runs as a subprocess (see test_slow_clients.py) with a small
``http.body_timeout`` and a header timeout far beyond the test, so only the body bound
can end the slow requests:

- a request that sends its headers, then one body byte every `TRICKLE_SECONDS`, gets
  ``408 request_timeout`` problem+json and its connection closed ``http.body_timeout``
  after its headers (the trickled bytes do not extend it);
- while `SLOW_BODIES` such requests trickle, a polite client is served at once, and
  the server still serves after they ended;
- a body whose last bytes come later, but within the bound, is answered normally.

`ConnectionGuard` is also tested alone: its body timer fires `body_late`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path

import httpx
import pytest

from tests.reliability.test_slow_clients import (
    PARSERS,
    POLITE_BOUND_SECONDS,
    SLACK_SECONDS,
    TRICKLE_SECONDS,
    fire_timer,
    memory_server,
)
from turnkeeper.adapters.http.guard import ConnectionGuard

#: ``http.body_timeout`` of these tests (seconds).
BODY_TIMEOUT = 2
#: Requests trickling their bodies at once while the polite client is served.
SLOW_BODIES = 50
#: The body length a slow request announces (it never sends that much).
ANNOUNCED = 10_000
#: Headers of a slow request: complete, with a body still to come.
SLOW_HEAD = (
    b"POST /v1/principals HTTP/1.1\r\nHost: example.com\r\n"
    b"Content-Type: application/json\r\n"
    b"Content-Length: " + str(ANNOUNCED).encode() + b"\r\n\r\n"
)

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


async def _slow_body(port: int) -> Stream:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(SLOW_HEAD + b'{"kind": "person", "handle": "')
    await writer.drain()
    return reader, writer


async def _trickle(writers: list[asyncio.StreamWriter], stop: asyncio.Event) -> None:
    """One more body byte on every slow request every `TRICKLE_SECONDS` (the attack)."""
    while not stop.is_set():
        for writer in writers:
            with contextlib.suppress(ConnectionError, RuntimeError):
                if not writer.is_closing():
                    writer.write(b"x")
        await asyncio.sleep(TRICKLE_SECONDS)


async def _answer_and_close(reader: asyncio.StreamReader, within: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes, and when it closed (monotonic)."""
    received = b""
    async with asyncio.timeout(within):
        with contextlib.suppress(ConnectionError):
            while chunk := await reader.read(4096):
                received += chunk
    return received, time.monotonic()


def _problem(answer: bytes) -> tuple[str, dict[str, object]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    assert headers["content-type"] == "application/problem+json"
    assert headers["connection"] == "close"
    problem = json.loads(body)
    assert headers["x-correlation-id"] == problem["correlation_id"]
    return lines[0], problem


@pytest.fixture(params=PARSERS)
def parser(request: pytest.FixtureRequest) -> str:
    """Each test runs on both guarded parsers (httptools and h11)."""
    return str(request.param)


async def test_a_trickled_body_gets_408_in_time_while_a_polite_client_is_served(
    tmp_path: Path, parser: str
) -> None:
    settings = {"HTTP__BODY_TIMEOUT": str(BODY_TIMEOUT), "HTTP__HEADER_TIMEOUT": "600"}
    async with memory_server(tmp_path, parser, **settings) as url:
        port = _port(url)
        started = time.monotonic()
        slow = [await _slow_body(port) for _ in range(SLOW_BODIES)]
        stop = asyncio.Event()
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(_trickle([w for _, w in slow], stop))
                try:
                    # The polite client, while every slow request trickles.
                    async with httpx.AsyncClient(timeout=POLITE_BOUND_SECONDS) as client:
                        polite_start = time.monotonic()
                        health = await client.get(f"{url}/healthz")
                        ready = await client.get(f"{url}/readyz")
                        polite = time.monotonic() - polite_start
                    ends = await asyncio.gather(
                        *(_answer_and_close(r, BODY_TIMEOUT + SLACK_SECONDS * 4) for r, _ in slow)
                    )
                finally:
                    stop.set()
        finally:
            for _, writer in slow:
                writer.close()
        assert (health.status_code, ready.status_code) == (200, 200)
        assert polite <= POLITE_BOUND_SECONDS
        for answer, closed_at in ends:
            status, problem = _problem(answer)
            assert status == "HTTP/1.1 408 Request Timeout"
            assert (problem["status"], problem["code"]) == (408, "request_timeout")
            # Counted from the headers: the first slow request's bound is the earliest.
            assert closed_at - started >= BODY_TIMEOUT - TRICKLE_SECONDS
        last = max(closed_at for _, closed_at in ends)
        opening = time.monotonic() - started  # an upper bound of when the last one opened
        assert last - started <= opening + BODY_TIMEOUT + SLACK_SECONDS
        # The ended requests left nothing behind that keeps the server from serving.
        async with httpx.AsyncClient(timeout=POLITE_BOUND_SECONDS) as client:
            assert (await client.get(f"{url}/healthz")).status_code == 200


async def test_a_whole_body_within_the_bound_is_served(tmp_path: Path, parser: str) -> None:
    settings = {"HTTP__BODY_TIMEOUT": str(BODY_TIMEOUT), "HTTP__HEADER_TIMEOUT": "600"}
    async with memory_server(tmp_path, parser, **settings) as url:
        reader, writer = await asyncio.open_connection("127.0.0.1", _port(url))
        body = b'{"kind": "person", "handle": "kim"}'
        head = SLOW_HEAD.replace(str(ANNOUNCED).encode(), str(len(body)).encode())
        writer.write(head + body[:10])
        await writer.drain()
        # The rest comes well within the bound: the request is answered (401: no token),
        # not timed out.
        await asyncio.sleep(TRICKLE_SECONDS)
        writer.write(body[10:])
        await writer.drain()
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), POLITE_BOUND_SECONDS)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 401")


async def test_the_guard_fires_body_late_when_the_body_timer_ends() -> None:
    class Late:
        def __init__(self, guard: ConnectionGuard) -> None:
            self.guard = guard
            self.late = False

        def body_late(self) -> None:
            self.guard.closed(self)
            self.late = True

        def drop(self, reason: str) -> None:
            raise AssertionError(f"dropped: {reason}")

    start = asyncio.get_running_loop().time()
    now = [start]
    guard = ConnectionGuard(
        header_timeout=600, max_connections=10, body_timeout=600, clock=lambda: now[0]
    )
    connection = Late(guard)
    guard.opened(connection)
    guard.headers_received(connection)
    guard.await_body(connection)
    header_timer, timer = guard.timers(connection)
    now[0] = start + 10
    guard.await_body(connection)
    assert guard.reading[connection] == start  # not restarted
    assert guard.timers(connection) == [header_timer, timer]
    # The timer is the one the loop will fire at its time; run its callback instead.
    now[0] = start + 600
    fire_timer(timer)
    assert connection.late
    assert (guard.open, guard.reading, guard.timers(connection)) == (set(), {}, [])
    assert header_timer.cancelled()
    guard.opened(connection)
    guard.await_body(connection)
    guard.body_received(connection)
    assert guard.reading == {}
    guard.closed(connection)
