"""Requests the server cannot read: headers too long, bytes that are no HTTP request.

Both answer problem+json with a correlation id (as every answer does) and close the
connection, with both parsers of ``http.parser``: httptools keeps a header of any length
in memory, so without ``http.max_header_bytes`` a few connections could hold the
server's memory; h11 bounds its buffer by the same key. A request whose body passes the
bound is not refused for it: only the bytes before the headers are complete count.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

from tests.reliability.test_slow_clients import _port, memory_server, parser  # noqa: F401
from tests.support.fakes import FakeClock
from tests.support.services import memory_services
from turnkeeper.adapters.http.app import create_app
from turnkeeper.adapters.http.server import guarded_server
from turnkeeper.application.settings import Settings

#: ``http.max_header_bytes`` of the servers under test.
HEADER_LIMIT = 4096
#: Seconds a test waits for the server's answer.
ANSWER_TIMEOUT_SECONDS = 10.0
#: How much a chunk of an endless header holds.
CHUNK = 1024


async def _exchange(port: int, *chunks: bytes) -> tuple[int, dict[str, str], Any]:
    """Send the chunks (stopping when the server closes), read the whole answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for chunk in chunks:
            if reader.at_eof():
                break
            writer.write(chunk)
            try:
                await writer.drain()
            except ConnectionError:
                break
        async with asyncio.timeout(ANSWER_TIMEOUT_SECONDS):
            raw = await reader.read()
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, json.loads(body)


def _assert_problem(headers: dict[str, str], body: Any, code: str) -> None:
    assert headers["content-type"] == "application/problem+json"
    assert headers["connection"] == "close"
    assert body["code"] == code
    assert body["correlation_id"] == headers["x-correlation-id"]


async def test_headers_beyond_the_bound_are_431_and_the_server_serves_on(
    tmp_path: Path,
    parser: str,  # noqa: F811
) -> None:
    async with memory_server(tmp_path, parser, HTTP__MAX_HEADER_BYTES=str(HEADER_LIMIT)) as url:
        endless = [b"GET /healthz HTTP/1.1\r\nHost: example.com\r\nX-Big: "]
        endless += [b"a" * CHUNK] * (4 * HEADER_LIMIT // CHUNK)
        status, headers, body = await _exchange(_port(url), *endless)
        assert status == 431
        _assert_problem(headers, body, "headers_too_large")
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"{url}/healthz")).status_code == 200


async def test_a_body_beyond_the_header_bound_is_read_as_a_body(
    tmp_path: Path,
    parser: str,  # noqa: F811
) -> None:
    async with memory_server(tmp_path, parser, HTTP__MAX_HEADER_BYTES=str(HEADER_LIMIT)) as url:
        body = json.dumps({"name": "x" * (4 * HEADER_LIMIT)}).encode()
        request = (
            b"POST /v1/spaces HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        status, headers, answer = await _exchange(_port(url), request)
        # No token: the route's own answer, not the header bound's.
        assert status == 401
        _assert_problem(headers, answer, "unauthenticated")


async def test_bytes_that_are_no_http_request_are_a_400_problem(
    tmp_path: Path,
    parser: str,  # noqa: F811
) -> None:
    async with memory_server(tmp_path, parser) as url:
        for garbage in (
            b"GARBAGE\r\n\r\n",
            b"GET /healthz HTTP/1.1\r\nHost: example.com\r\nBad Name: x\r\n\r\n",
        ):
            status, headers, body = await _exchange(_port(url), garbage)
            assert status == 400
            _assert_problem(headers, body, "validation_failed")
            assert body["errors"] == [{"pointer": "", "code": "malformed_request"}]


async def test_an_idle_kept_alive_connection_is_the_header_timeouts_to_close() -> None:
    # uvicorn closed it after its own 5 seconds whatever http.header_timeout said.
    settings = Settings(header_timeout=timedelta(seconds=42))
    services = memory_services(settings, FakeClock())
    app = create_app(services, settings)
    server = guarded_server(app, host="127.0.0.1", port=0, settings=settings, live=services.live)
    assert server.config.timeout_keep_alive == 42
    assert server.config.h11_max_incomplete_event_size == settings.max_header_bytes
