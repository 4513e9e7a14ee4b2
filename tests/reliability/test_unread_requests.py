"""Requests the server cannot read: headers too long, bytes that are no HTTP request.

Both answer problem+json with a correlation id (as every answer does) and close the
connection, with both parsers of ``http.parser``: httptools keeps a header of any length
in memory, so without ``http.max_header_bytes`` a few connections could hold the
server's memory; h11 bounds its buffer by the same key. A request whose body passes the
bound is not refused for it: only the bytes before the headers are complete count.

The bound holds however the head arrives: in one read (an audit found a head of 100,000
bytes served when it came in one piece), in many, or pipelined after another request on
the same connection, where only its own head counts; the request refused never runs.
An HTTP/1.1 request without a Host line, or any request with two, is refused as
malformed (RFC 9112, section 3.2) by both parsers (httptools let them through).
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

from tests.reliability.support_server import OWNER_TOKEN
from tests.reliability.test_slow_clients import _port, memory_server, parser  # noqa: F401
from tests.support.fakes import FakeClock
from tests.support.json_log import file_records
from tests.support.services import memory_services
from turnkeeper.adapters.http.app import create_app
from turnkeeper.adapters.http.server import guarded_server
from turnkeeper.application.settings import Settings

#: ``http.max_header_bytes`` of the servers under test.
HEADER_LIMIT = 4096
#: Seconds a test waits for the server's answer.
ANSWER_TIMEOUT_SECONDS = 10.0
#: The largest seq, as a cursor after every event (a long poll then waits its time).
MAX_SEQ_TEXT = str(2**63 - 1)
#: How often a test looks for a request's log line while it waits for it.
LOG_POLL_SECONDS = 0.02
#: How much a chunk of an endless header holds.
CHUNK = 1024
#: The head the audit sent in one write (a header of 100,000 bytes).
ONE_READ_HEAD_BYTES = 100_000
#: The length of the URL of a request whose request line alone passes the bound.
LONG_URL_BYTES = 70_000
#: The request line and Host of the GETs of these tests.
GET_HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: example.com\r\n"
#: The name of the header line that brings a head to the length a test needs.
PAD = b"X-Pad: "
#: The end of a request's head: its last header line's end and the empty line.
HEAD_END = b"\r\n\r\n"


Answer = tuple[int, dict[str, str], Any]


async def _exchange(port: int, *chunks: bytes) -> Answer:
    """Send the chunks (stopping when the server closes), read the one whole answer."""
    (answer,) = await _answers(port, *chunks)
    return answer


async def _answers(port: int, *chunks: bytes) -> list[Answer]:
    """Send the chunks (stopping when the server closes), read every answer to the end."""
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
    answers = []
    while raw:
        head, _, rest = raw.partition(HEAD_END)
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers["content-length"])
        body, raw = rest[:length], rest[length:]
        answers.append((int(status_line.split()[1]), headers, json.loads(body)))
    return answers


def _assert_problem(headers: dict[str, str], body: Any, code: str) -> None:
    assert headers["content-type"] == "application/problem+json"
    assert headers["connection"] == "close"
    assert body["code"] == code
    assert body["correlation_id"] == headers["x-correlation-id"]


def _assert_malformed(answer: Answer) -> None:
    status, headers, body = answer
    assert status == 400
    _assert_problem(headers, body, "validation_failed")
    assert body["errors"] == [{"pointer": "", "code": "malformed_request"}]


def _head(size: int, start: bytes = GET_HEALTHZ + b"Connection: close\r\n") -> bytes:
    """A request head of exactly `size` bytes: `start`, then a header line that pads it."""
    padding = size - len(start) - len(PAD) - len(HEAD_END)
    assert padding >= 0, size
    return start + PAD + b"a" * padding + HEAD_END


async def _new_thread(url: str) -> str:
    """The main thread of a new channel of the owner (`OWNER_TOKEN`)."""
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {OWNER_TOKEN}"}
    ) as client:
        space = await client.post("/v1/spaces", json={"name": "Lab"})
        assert space.status_code == 201, space.text
        channel = await client.post(
            f"/v1/spaces/{space.json()['id']}/channels", json={"name": "Lab", "type": "text"}
        )
        assert channel.status_code == 201, channel.text
        return str(channel.json()["main_thread_id"])


async def _stored_contents(url: str, thread: str) -> list[str]:
    """The contents of the messages stored in a thread, read by the owner."""
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {OWNER_TOKEN}"}) as client:
        listed = await client.get(f"{url}/v1/threads/{thread}/messages")
    assert listed.status_code == 200, listed.text
    return [message["content"] for message in listed.json()["messages"]]


def _post_message(thread: str, content: str, head_size: int, hosts: int) -> bytes:
    """A POST of a message by the owner, its head `head_size` bytes with `hosts` Host lines."""
    body = json.dumps({"content": content, "client_msg_id": content}).encode()
    start = (
        f"POST /v1/threads/{thread}/messages HTTP/1.1\r\n".encode()
        + b"Host: example.com\r\n" * hosts
        + f"Authorization: Bearer {OWNER_TOKEN}\r\n".encode()
        + b"Content-Type: application/json\r\nConnection: close\r\n"
        + f"Content-Length: {len(body)}\r\n".encode()
    )
    return _head(head_size, start) + body


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


async def test_a_head_beyond_the_bound_in_one_read_is_431_and_one_at_the_bound_is_served(
    tmp_path: Path,
    parser: str,  # noqa: F811
) -> None:
    # Found by an audit: a head that came whole in one read was served, however long.
    async with memory_server(tmp_path, parser, HTTP__MAX_HEADER_BYTES=str(HEADER_LIMIT)) as url:
        long_url = b"GET /healthz?q=" + b"a" * LONG_URL_BYTES + b" HTTP/1.1\r\n"
        for request in (
            _head(ONE_READ_HEAD_BYTES),
            _head(HEADER_LIMIT + 1),
            # The request line alone passes the bound (it was 400 malformed_request).
            long_url + b"Host: example.com\r\n\r\n",
        ):
            status, headers, body = await _exchange(_port(url), request)
            assert status == 431, request[:40]
            _assert_problem(headers, body, "headers_too_large")
        status, _, body = await _exchange(_port(url), _head(HEADER_LIMIT))
        assert (status, body) == (200, {"status": "ok"})


async def test_a_pipelined_head_is_bound_by_its_own_bytes_and_answered_in_turn(
    tmp_path: Path,
    parser: str,  # noqa: F811
) -> None:
    async with memory_server(tmp_path, parser, HTTP__MAX_HEADER_BYTES=str(HEADER_LIMIT)) as url:
        first = GET_HEALTHZ + b"\r\n"
        # One write: the refusal comes after the answer of the request before it.
        answers = await _answers(_port(url), first + _head(HEADER_LIMIT + 1))
        assert [status for status, _, _ in answers] == [200, 431]
        _assert_problem(answers[1][1], answers[1][2], "headers_too_large")
        # A body longer than the bound before it does not count towards the next head.
        body = json.dumps({"name": "x" * (2 * HEADER_LIMIT)}).encode()
        post = (
            b"POST /v1/spaces HTTP/1.1\r\nHost: example.com\r\n"
            b"Content-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        for size, statuses in ((HEADER_LIMIT, [401, 200]), (HEADER_LIMIT + 1, [401, 431])):
            answers = await _answers(_port(url), post + _head(size))
            assert [status for status, _, _ in answers] == statuses, size


async def test_a_message_refused_unread_is_not_stored(
    tmp_path: Path,
    parser: str,  # noqa: F811
) -> None:
    async with memory_server(
        tmp_path, parser, HTTP__MAX_HEADER_BYTES=str(HEADER_LIMIT), OWNER_TOKEN=OWNER_TOKEN
    ) as url:
        thread = await _new_thread(url)
        beyond = _post_message(thread, "beyond the bound", HEADER_LIMIT + 1, hosts=1)
        status, headers, body = await _exchange(_port(url), beyond)
        assert status == 431
        _assert_problem(headers, body, "headers_too_large")
        for hosts in (0, 2):
            request = _post_message(thread, f"{hosts} Host lines", HEADER_LIMIT, hosts)
            _assert_malformed(await _exchange(_port(url), request))
        # The same request with one Host line and a head at the bound is stored.
        stored = _post_message(thread, "at the bound", HEADER_LIMIT, hosts=1)
        status, _, _ = await _exchange(_port(url), stored)
        assert status == 201
        assert await _stored_contents(url, thread) == ["at the bound"]


async def test_an_http_1_1_request_needs_exactly_one_host_line(
    tmp_path: Path,
    parser: str,  # noqa: F811
) -> None:
    # RFC 9112, section 3.2: 400 for an HTTP/1.1 request without Host and for any
    # request with more than one; httptools served both.
    async with memory_server(tmp_path, parser) as url:
        for request in (
            b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n",
            GET_HEALTHZ + b"Host: example.org\r\nConnection: close\r\n\r\n",
            b"GET /healthz HTTP/1.0\r\nHost: example.com\r\nHost: example.org\r\n\r\n",
        ):
            _assert_malformed(await _exchange(_port(url), request))
        # HTTP/1.0 did not have Host: a request without it is served.
        status, _, body = await _exchange(_port(url), b"GET /healthz HTTP/1.0\r\n\r\n")
        assert (status, body) == (200, {"status": "ok"})


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


#: Chunked bodies the parser cannot read, each after a whole first chunk: a size that is
#: no hexadecimal number, a negative one, and a chunk whose data has no line end after it.
BROKEN_CHUNKS = (
    b"2\r\n{}\r\nzz\r\n",
    b"2\r\n{}\r\n-5\r\n",
    b"2\r\n{}xx",
)


def _message(thread: str, client_id: str) -> bytes:
    """A whole message post of the owner, its content its client id."""
    body = json.dumps({"client_msg_id": client_id, "content": client_id}).encode()
    return (
        _chunked_head(thread).replace(
            b"Transfer-Encoding: chunked", f"Content-Length: {len(body)}".encode()
        )
        + body
    )


def _chunked_head(thread: str, correlation_id: str | None = None) -> bytes:
    """The head of a chunked message post of the owner (its body comes after)."""
    named = "" if correlation_id is None else f"X-Correlation-Id: {correlation_id}\r\n"
    return (
        f"POST /v1/threads/{thread}/messages HTTP/1.1\r\nHost: example.com\r\n"
        f"Authorization: Bearer {OWNER_TOKEN}\r\nContent-Type: application/json\r\n"
        f"{named}Transfer-Encoding: chunked\r\n\r\n"
    ).encode()


def _broken(thread: str, correlation_id: str | None = None) -> bytes:
    """A chunked message post whose body the parser cannot read."""
    return _chunked_head(thread, correlation_id) + BROKEN_CHUNKS[0]


async def test_a_running_requests_broken_chunk_is_400_at_once_and_logged_once(
    tmp_path: Path,
    parser: str,  # noqa: F811
) -> None:
    # The request runs once its head is read; a chunk it cannot read ended its body.
    # The server waited for the body until http.body_timeout and then answered 408
    # (httptools), or answered 400 and logged the request again as 408 later (h11).
    async with memory_server(
        tmp_path, parser, OWNER_TOKEN=OWNER_TOKEN, HTTP__BODY_TIMEOUT="3600"
    ) as url:
        thread = await _new_thread(url)
        for broken in BROKEN_CHUNKS:
            answer = await _exchange(_port(url), _chunked_head(thread), broken)
            _assert_malformed(answer)
            _, headers, _ = answer
            assert await _request_lines(tmp_path / "serve.log", headers["x-correlation-id"]) == [
                (400, "/v1/threads/{thread_id}/messages")
            ]
        assert await _stored_contents(url, thread) == []


async def test_a_broken_chunk_pipelined_behind_a_request_is_answered_after_it(
    tmp_path: Path,
    parser: str,  # noqa: F811
) -> None:
    # The request behind never ran: the one before it keeps its answer (an audit saw
    # httptools close the connection under it, its message stored and its 201 lost).
    async with memory_server(
        tmp_path, parser, OWNER_TOKEN=OWNER_TOKEN, HTTP__BODY_TIMEOUT="3600"
    ) as url:
        thread = await _new_thread(url)
        (stored, refused) = await _answers(_port(url), _message(thread, "first") + _broken(thread))
        assert stored[0] == 201, stored
        assert stored[2]["content"] == "first"
        _assert_malformed(refused)
        assert stored[1]["x-correlation-id"] != refused[1]["x-correlation-id"]


async def test_a_broken_chunk_on_a_route_that_reads_no_body_is_logged_as_answered(
    tmp_path: Path,
    parser: str,  # noqa: F811
) -> None:
    # A GET reads no body: it ran to its end while the client got the 400, and its log
    # line said 200.
    async with memory_server(tmp_path, parser, OWNER_TOKEN=OWNER_TOKEN) as url:
        request = (
            f"GET /v1/me HTTP/1.1\r\nHost: example.com\r\nAuthorization: Bearer {OWNER_TOKEN}"
            "\r\nTransfer-Encoding: chunked\r\n\r\n"
        ).encode()
        # In one write: the broken chunk is read while the request runs.
        answer = await _exchange(_port(url), request + b"zz\r\n")
        _assert_malformed(answer)
        correlation_id = answer[1]["x-correlation-id"]
        # The line is written when the request's handling ends, after the answer.
        assert await _request_lines(tmp_path / "serve.log", correlation_id) == [(400, "/v1/me")]


async def _request_lines(log: Path, correlation_id: str) -> list[tuple[int, str]]:
    """The (status, route) of a request's log lines, once it has one."""
    async with asyncio.timeout(ANSWER_TIMEOUT_SECONDS):
        while True:
            found = [
                (record["status"], record["route"])
                for record in file_records(log)
                if record.get("event") == "http_request"
                and record.get("correlation_id") == correlation_id
            ]
            if found:
                return found
            await asyncio.sleep(LOG_POLL_SECONDS)


async def test_every_request_ahead_of_a_pipelined_broken_chunk_keeps_its_answer(
    tmp_path: Path,
    parser: str,  # noqa: F811
) -> None:
    # Two ahead: httptools wrote the refusal when the first was answered, under the
    # second (stored, its answer lost, a traceback logged).
    async with memory_server(
        tmp_path, parser, OWNER_TOKEN=OWNER_TOKEN, HTTP__BODY_TIMEOUT="3600"
    ) as url:
        thread = await _new_thread(url)
        sent = _message(thread, "m1") + _message(thread, "m2") + _broken(thread, "broken-1")
        first, second, refused = await _answers(_port(url), sent)
        assert [first[0], second[0]] == [201, 201]
        assert [first[2]["content"], second[2]["content"]] == ["m1", "m2"]
        _assert_malformed(refused)
        # Its head was read: the refusal answers with its own correlation id.
        assert refused[1]["x-correlation-id"] == "broken-1"
        assert "Traceback" not in (tmp_path / "serve.log").read_text()


async def test_a_pipelined_broken_chunk_lets_a_long_poll_ahead_of_it_end(
    tmp_path: Path,
    parser: str,  # noqa: F811
) -> None:
    # The broken request's body timer ran on: when it fired, it ended the long poll
    # ahead of it with a 408 (httptools).
    async with memory_server(
        tmp_path, parser, OWNER_TOKEN=OWNER_TOKEN, HTTP__BODY_TIMEOUT="1"
    ) as url:
        thread = await _new_thread(url)
        poll = (
            f"GET /v1/events?after={MAX_SEQ_TEXT}&wait=2 HTTP/1.1\r\nHost: example.com\r\n"
            f"Authorization: Bearer {OWNER_TOKEN}\r\n\r\n"
        ).encode()
        waited, refused = await _answers(_port(url), poll + _broken(thread, "broken-2"))
        assert waited[0] == 200, waited
        _assert_malformed(refused)


async def test_a_head_request_with_a_broken_chunk_gets_a_400_head(
    tmp_path: Path,
    parser: str,  # noqa: F811
) -> None:
    # h11 refused to write a body on an answer to HEAD, and nothing was sent.
    async with memory_server(tmp_path, parser, OWNER_TOKEN=OWNER_TOKEN) as url:
        reader, writer = await asyncio.open_connection("127.0.0.1", _port(url))
        try:
            writer.write(
                f"HEAD /v1/me HTTP/1.1\r\nHost: example.com\r\nAuthorization: Bearer"
                f" {OWNER_TOKEN}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".encode()
            )
            async with asyncio.timeout(ANSWER_TIMEOUT_SECONDS):
                raw = await reader.read()
        finally:
            writer.close()
        assert raw.startswith(b"HTTP/1.1 400"), raw


async def test_a_broken_chunk_under_a_begun_stream_keeps_its_logged_status(
    tmp_path: Path,
    parser: str,  # noqa: F811
) -> None:
    # The stream had answered 200 when its body broke: the client got the 200 (and no
    # 400 after it), but the log line and count said 400. (A stream's success is logged
    # at debug.)
    async with memory_server(tmp_path, parser, OWNER_TOKEN=OWNER_TOKEN, LOG__LEVEL="debug") as url:
        reader, writer = await asyncio.open_connection("127.0.0.1", _port(url))
        try:
            writer.write(
                f"GET /v1/events/stream HTTP/1.1\r\nHost: example.com\r\nAuthorization: Bearer"
                f" {OWNER_TOKEN}\r\nX-Correlation-Id: stream-1\r\n"
                "Transfer-Encoding: chunked\r\n\r\n".encode()
            )
            async with asyncio.timeout(ANSWER_TIMEOUT_SECONDS):
                begun = await reader.readuntil(HEAD_END)
            assert begun.startswith(b"HTTP/1.1 200"), begun
            writer.write(b"zz\r\n")
            async with asyncio.timeout(ANSWER_TIMEOUT_SECONDS):
                rest = await reader.read()
        finally:
            writer.close()
        assert b"HTTP/1.1 400" not in rest, rest
        assert await _request_lines(tmp_path / "serve.log", "stream-1") == [
            (200, "/v1/events/stream")
        ]
