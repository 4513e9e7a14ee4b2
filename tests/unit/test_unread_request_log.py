"""A request the server could not read is logged and counted as every request is.

Found by an audit: ``400 malformed_request`` and ``431 headers_too_large`` were logged
with an empty method and no ``duration_ms``, and ``turnkeeper_http_requests_total`` did
not count them. Now their ``http_request`` line has the method when the parser read one
(else ``(unread)``), route ``(unread)``, the status, the correlation id of the answer and
the time from the request's first byte (or, for a request pipelined behind another, from
the end of the answer before it) to its answer; and they are counted under route
``(unread)`` through the application's own hook. uvicorn's protocols run as
``turnkeeper serve`` builds them (`guarded_protocol`, both parsers) on a recording
transport, with a clock of the test's (no waiting).
"""

from __future__ import annotations

import io
import json
from typing import Any, cast

import pytest

from tests.support.raw_connection import RawConnection
from tests.support.services import memory_services
from turnkeeper.adapters.http.app import create_app
from turnkeeper.adapters.http.guard import ConnectionGuard
from turnkeeper.adapters.logging import configure_logging
from turnkeeper.adapters.observability.http import ObservedApp
from turnkeeper.application.settings import Settings

pytestmark = pytest.mark.usefixtures("restored_logging")

#: ``http.max_header_bytes`` of the protocols under test.
LIMIT = 200
#: The start of a request whose header lines follow.
GET = b"GET /healthz HTTP/1.1\r\nHost: example.com\r\n"
#: The end of a request's head.
HEAD_END = b"\r\n\r\n"
#: Seconds the test's clock moves between two reads of one request.
BETWEEN_READS = 0.25
#: Turns of the loop that let the application answer a request.
TURNS = 20


class _Clock:
    """The guard's request clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def log_lines() -> io.StringIO:
    stream = io.StringIO()
    configure_logging(json=True, stream=stream)
    return stream


def _request_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
    return [r for r in records if r.get("event") == "http_request"]


def _answers(written: bytes) -> list[tuple[int, dict[str, str]]]:
    """The status and headers of each answer written, in order."""
    answers = []
    while written:
        head, _, rest = written.partition(HEAD_END)
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        answers.append((int(status_line.split()[1]), headers))
        written = rest[int(headers["content-length"]) :]
    return answers


async def _serve(
    parser: str, reads: list[bytes], clock: _Clock
) -> tuple[ObservedApp, list[tuple[int, dict[str, str]]]]:
    """Feed the reads to a new connection of a real application; its answers."""
    settings = Settings(max_header_bytes=LIMIT)
    app = cast(ObservedApp, create_app(memory_services(settings), settings))
    guard = ConnectionGuard(
        header_timeout=60,
        max_connections=10,
        max_header_bytes=LIMIT,
        unread=app.unread_answered,
        request_clock=clock,
    )
    connection = RawConnection(app, guard, parser)
    for number, read in enumerate(reads):
        if number:
            clock.now += BETWEEN_READS
        await connection.receive(read, TURNS)
        await connection.settle()
    return app, _answers(connection.close())


def _unread_count(app: ObservedApp, status: int) -> float | None:
    assert app.metrics is not None
    return app.metrics.registry.get_sample_value(
        "turnkeeper_http_requests_total", {"route": "(unread)", "status": str(status)}
    )


#: A request whose header line has no colon: httptools has read its method, h11 not.
MALFORMED_HEADER = [GET, b"Foo bar" + HEAD_END]
#: Bytes that are no request line (no parser can tell before the second read).
GARBAGE = [b"GET", b"@garbage" + HEAD_END]
#: A complete head over the bound, after its request line in a read of its own.
TOO_LONG = [GET, b"X-Pad: " + b"a" * LIMIT + HEAD_END]
#: A head that passes the bound before it ends: h11 refuses it before it parses it.
ENDLESS = [GET, b"X-Big: " + b"a" * LIMIT]

CASES = [
    ("malformed header", MALFORMED_HEADER, 400, {"httptools": "GET", "h11": "(unread)"}),
    ("garbage", GARBAGE, 400, {"httptools": "(unread)", "h11": "(unread)"}),
    ("head too long", TOO_LONG, 431, {"httptools": "GET", "h11": "GET"}),
    ("endless head", ENDLESS, 431, {"httptools": "GET", "h11": "(unread)"}),
]


@pytest.mark.parametrize("parser", ["httptools", "h11"])
@pytest.mark.parametrize(("name", "reads", "status", "methods"), CASES, ids=[c[0] for c in CASES])
async def test_an_unread_request_is_logged_with_method_and_duration_and_counted(
    parser: str,
    name: str,
    reads: list[bytes],
    status: int,
    methods: dict[str, str],
    log_lines: io.StringIO,
) -> None:
    clock = _Clock()
    app, answers = await _serve(parser, reads, clock)
    ((answered, headers),) = answers
    assert answered == status
    (line,) = _request_lines(log_lines)
    assert line == {
        "event": "http_request",
        "method": methods[parser],
        "route": "(unread)",
        "status": status,
        # From the first byte of the request to its answer, on the guard's clock.
        "duration_ms": BETWEEN_READS * 1000,
        "correlation_id": headers["x-correlation-id"],
        "level": "info",
        "logger": "turnkeeper.http",
        "timestamp": line["timestamp"],
    }
    assert _unread_count(app, status) == 1
    assert app.metrics is not None
    durations = app.metrics.registry.get_sample_value(
        "turnkeeper_http_request_duration_seconds_sum", {"route": "(unread)"}
    )
    assert durations == BETWEEN_READS


@pytest.mark.parametrize("parser", ["httptools", "h11"])
async def test_a_request_pipelined_behind_an_answer_counts_from_that_answer(
    parser: str, log_lines: io.StringIO
) -> None:
    clock = _Clock()
    # The first request's head ends in the second read, garbage right behind it: the
    # garbage is refused once the first request is answered, and counts from there,
    # not from the first request's first byte.
    app, answers = await _serve(parser, [GET, b"\r\n" + GARBAGE[0] + GARBAGE[1]], clock)
    assert [status for status, _ in answers] == [200, 400]
    # The refusal is written as the answer before it ends, before that answer's line.
    unread, served = _request_lines(log_lines)
    assert (served["route"], served["status"]) == ("/healthz", 200)
    assert (unread["route"], unread["status"], unread["method"]) == ("(unread)", 400, "(unread)")
    assert unread["duration_ms"] == 0.0
    assert unread["correlation_id"] == answers[1][1]["x-correlation-id"]
    assert _unread_count(app, 400) == 1


@pytest.mark.parametrize("parser", ["httptools", "h11"])
async def test_a_kept_alive_connections_idle_time_is_not_the_next_requests(
    parser: str, log_lines: io.StringIO
) -> None:
    clock = _Clock()
    # An answered request, an idle while (one clock step), then garbage in two reads.
    app, answers = await _serve(parser, [GET + b"\r\n", *GARBAGE], clock)
    assert [status for status, _ in answers] == [200, 400]
    _, unread = _request_lines(log_lines)
    assert unread["duration_ms"] == BETWEEN_READS * 1000
    assert _unread_count(app, 400) == 1


@pytest.mark.parametrize(("parser", "status"), [("httptools", 431), ("h11", 400)])
async def test_blank_lines_after_a_request_have_no_method(
    parser: str, status: int, log_lines: io.StringIO
) -> None:
    # No byte of a request line: the method of the request before is not theirs.
    _, answers = await _serve(parser, [GET + b"\r\n", b"\r\n" * LIMIT], _Clock())
    assert [answered for answered, _ in answers] == [200, status]
    _, unread = _request_lines(log_lines)
    assert (unread["method"], unread["route"], unread["status"]) == ("(unread)", "(unread)", status)
