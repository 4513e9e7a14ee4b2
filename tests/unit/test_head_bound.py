"""``http.max_header_bytes`` counts each request's head exactly, however its bytes arrive.

uvicorn's protocols as ``turnkeeper serve`` builds them (`guarded_protocol`, both
parsers) get byte streams on a recording transport: whole, cut in two at every byte, and
one byte per read. A head (request line and headers) of exactly the bound is served and
one byte more is ``431`` without the request running, also behind a pipelined request
whose body is longer than the bound (Content-Length or chunked, with head ends inside
its chunks): only the request's own head counts. Every request the application sees has
the body that was sent. An HTTP/1.1 request needs exactly one Host line (400), an
HTTP/1.0 one none. The whole servers are tested in
``tests/reliability/test_unread_requests.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.raw_connection import RawConnection
from turnkeeper.adapters.http.guard import ConnectionGuard

#: ``http.max_header_bytes`` of the protocols under test.
LIMIT = 160
#: A body longer than the bound.
LONG_BODY = b"b" * (3 * LIMIT)
#: A chunked body with head ends inside its chunks, then its last chunk.
CHUNKED_BODY = (
    b"8\r\na\r\n\r\nbcd\r\n6\r\n\r\n\r\nef\r\n" + b"%x\r\n" % len(LONG_BODY) + LONG_BODY + b"\r\n"
)
#: What the application reads of `CHUNKED_BODY`.
CHUNKED_CONTENT = b"a\r\n\r\nbcd" + b"\r\n\r\nef" + LONG_BODY
#: The end of a request's head.
HEAD_END = b"\r\n\r\n"
#: The header line that brings a head to the length a test needs.
PAD = b"X-Pad: "
#: The answer of the test application.
ANSWER = b"ok"
#: ``http.header_timeout`` of the guard (never reached here).
HEADER_TIMEOUT = 60
#: ``http.max_connections`` of the guard.
MAX_CONNECTIONS = 10
#: Turns of the loop after each read: the application's answer to a request whose body
#: is complete takes a few (its task, its sends, the corked transport's write).
TURNS_PER_READ = 10

#: One test stream: its name, its bytes, the statuses answered, the requests run.
Case = tuple[str, bytes, list[int], list[tuple[str, bytes]]]


def _head(size: int, start: bytes) -> bytes:
    """A request head of exactly `size` bytes: `start`, then a header line that pads it."""
    padding = size - len(start) - len(PAD) - len(HEAD_END)
    assert padding >= 0, size
    return start + PAD + b"a" * padding + HEAD_END


def _get(path: str, size: int) -> bytes:
    return _head(size, f"GET {path} HTTP/1.1\r\nHost: example.com\r\n".encode())


def _post(path: str, body: bytes, size: int) -> bytes:
    start = f"POST {path} HTTP/1.1\r\nHost: example.com\r\nContent-Length: {len(body)}\r\n"
    return _head(size, start.encode()) + body


def _chunked(path: str, size: int) -> bytes:
    start = f"POST {path} HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n"
    return _head(size, start.encode()) + CHUNKED_BODY + b"0\r\n\r\n"


def _chunked_with_trailer(path: str, size: int) -> bytes:
    return _chunked(path, size)[: -len(HEAD_END)] + b"\r\nX-Trailer: 1" + HEAD_END


CASES: list[Case] = [
    ("at the bound", _get("/a", LIMIT), [200], [("/a", b"")]),
    ("one byte beyond", _get("/a", LIMIT + 1), [431], []),
    ("pipelined at the bound", _get("/a", LIMIT) + _get("/b", LIMIT), [200, 200],
     [("/a", b""), ("/b", b"")]),
    ("pipelined beyond", _get("/a", LIMIT) + _get("/b", LIMIT + 1), [200, 431], [("/a", b"")]),
    ("after a long body", _post("/a", LONG_BODY, LIMIT) + _get("/b", LIMIT), [200, 200],
     [("/a", LONG_BODY), ("/b", b"")]),
    ("beyond after a long body", _post("/a", LONG_BODY, LIMIT) + _get("/b", LIMIT + 1),
     [200, 431], [("/a", LONG_BODY)]),
    ("a posted head beyond", _post("/a", LONG_BODY, LIMIT + 1), [431], []),
    ("after a chunked body", _chunked("/a", LIMIT) + _get("/b", LIMIT), [200, 200],
     [("/a", CHUNKED_CONTENT), ("/b", b"")]),
    ("beyond after a chunked body", _chunked("/a", LIMIT) + _get("/b", LIMIT + 1), [200, 431],
     [("/a", CHUNKED_CONTENT)]),
    ("after a trailer", _chunked_with_trailer("/a", LIMIT) + _get("/b", LIMIT), [200, 200],
     [("/a", CHUNKED_CONTENT), ("/b", b"")]),
    ("beyond after a trailer", _chunked_with_trailer("/a", LIMIT) + _get("/b", LIMIT + 1),
     [200, 431], [("/a", CHUNKED_CONTENT)]),
    ("after two bodies", _post("/a", LONG_BODY, LIMIT) + _chunked("/b", LIMIT) + _get("/c", LIMIT),
     [200, 200, 200], [("/a", LONG_BODY), ("/b", CHUNKED_CONTENT), ("/c", b"")]),
    ("beyond after two bodies",
     _chunked("/a", LIMIT) + _post("/b", LONG_BODY, LIMIT) + _get("/c", LIMIT + 1),
     [200, 200, 431], [("/a", CHUNKED_CONTENT), ("/b", LONG_BODY)]),
]  # fmt: skip

HOST_CASES: list[Case] = [
    ("no Host", b"GET /a HTTP/1.1\r\n\r\n", [400], []),
    ("two Hosts", b"GET /a HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n", [400], []),
    ("two Hosts in HTTP/1.0", b"GET /a HTTP/1.0\r\nHost: a.example\r\nHost: b.example\r\n\r\n",
     [400], []),
    ("HTTP/1.0 without Host", b"GET /a HTTP/1.0\r\n\r\n", [200], [("/a", b"")]),
    ("pipelined without Host", _get("/a", LIMIT) + b"GET /b HTTP/1.1\r\n\r\n", [200, 400],
     [("/a", b"")]),
]  # fmt: skip


class _Application:
    """Reads each request's whole body, records it and answers 200."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        self.seen.append((scope["path"], body))
        headers = [(b"content-length", str(len(ANSWER)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": ANSWER})


def _statuses(written: bytes) -> list[int]:
    """The statuses of the answers written, in order (each has a Content-Length)."""
    statuses = []
    while written:
        head, _, rest = written.partition(HEAD_END)
        status_line, *lines = head.decode("latin-1").split("\r\n")
        (length,) = [
            int(value) for name, _, value in (line.partition(":") for line in lines)
            if name.strip().lower() == "content-length"
        ]  # fmt: skip
        statuses.append(int(status_line.split()[1]))
        written = rest[length:]
    return statuses


async def _run(parser: str, reads: list[bytes]) -> tuple[list[int], list[tuple[str, bytes]]]:
    """Feed the reads to a new connection; the statuses answered and the requests run."""
    guard = ConnectionGuard(
        header_timeout=HEADER_TIMEOUT, max_connections=MAX_CONNECTIONS, max_header_bytes=LIMIT
    )
    application = _Application()
    connection = RawConnection(application, guard, parser)
    for read in reads:
        await connection.receive(read, TURNS_PER_READ)
    await connection.settle()
    return _statuses(connection.close()), application.seen


def _deliveries(stream: bytes) -> list[list[bytes]]:
    """The stream whole, cut in two at every byte, and one byte per read."""
    cuts = [[stream[:cut], stream[cut:]] for cut in range(1, len(stream))]
    return [[stream], *cuts, [stream[at : at + 1] for at in range(len(stream))]]


@pytest.mark.parametrize("parser", ["httptools", "h11"])
@pytest.mark.parametrize(("name", "stream", "statuses", "seen"), CASES, ids=[c[0] for c in CASES])
async def test_each_head_counts_exactly_whole_and_byte_by_byte(
    parser: str, name: str, stream: bytes, statuses: list[int], seen: list[tuple[str, bytes]]
) -> None:
    assert await _run(parser, [stream]) == (statuses, seen)
    bytewise = [stream[at : at + 1] for at in range(len(stream))]
    assert await _run(parser, bytewise) == (statuses, seen)


# Every cut of every stream: hundreds of connections per case, without the tracer (the
# test above measures the same streams whole and byte by byte).
@pytest.mark.unmeasured
@pytest.mark.parametrize("parser", ["httptools", "h11"])
@pytest.mark.parametrize(("name", "stream", "statuses", "seen"), CASES, ids=[c[0] for c in CASES])
async def test_each_head_counts_exactly_however_it_is_cut(
    parser: str, name: str, stream: bytes, statuses: list[int], seen: list[tuple[str, bytes]]
) -> None:
    for reads in _deliveries(stream):
        assert await _run(parser, reads) == (statuses, seen), [len(read) for read in reads]


@pytest.mark.parametrize("parser", ["httptools", "h11"])
@pytest.mark.parametrize(
    ("name", "stream", "statuses", "seen"), HOST_CASES, ids=[c[0] for c in HOST_CASES]
)
async def test_an_http_1_1_request_needs_exactly_one_host_line(
    parser: str, name: str, stream: bytes, statuses: list[int], seen: list[tuple[str, bytes]]
) -> None:
    assert await _run(parser, [stream]) == (statuses, seen)
