"""The connection guard of ``turnkeeper serve``: the bounds uvicorn lacks (ADR 0014).

`ConnectionGuard` keeps the connections of one server and the timers of the ones waiting
for request headers (``http.header_timeout``) or for the rest of a request's body
(``http.body_timeout``), and makes room under ``http.max_connections`` by closing the
connection that has waited longest. It knows connections only as `GuardedConnection`:
the h11 protocol of `turnkeeper.adapters.http.server` and the httptools protocol of
`turnkeeper.adapters.http.httptools_guard` both report to it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol, cast

import msgspec

from turnkeeper.adapters.http.correlation import (
    CORRELATION_HEADER,
    UNREADABLE_BODY,
    UnreadAnswered,
    correlation_id_of,
    log_unread,
)
from turnkeeper.adapters.http.problems import (
    MALFORMED_REQUEST,
    PROBLEM_MEDIA_TYPE,
    ProblemAnswer,
    problem_of,
)
from turnkeeper.application.logs import get_logger

_log = get_logger("turnkeeper.http")


class GuardedConnection(Protocol):
    """A connection the guard can close (`GuardedH11Protocol` and its httptools twin)."""

    def drop(self, reason: str) -> None:
        """Close the connection because it is too slow or room is needed.

        Args:
            reason: ``header_timeout`` or ``connection_limit`` (logged).
        """

    def body_late(self) -> None:
        """End a request whose body did not arrive within ``http.body_timeout``."""


def request_timeout_answer(correlation_id: str) -> bytes:
    """The bytes of a ``408 request_timeout`` problem answer that closes the connection.

    Args:
        correlation_id: the request's correlation id (answered in its header).

    Returns:
        A whole HTTP/1.1 answer, status line to body.
    """
    return closing_answer(ProblemAnswer(code="request_timeout", status=408), correlation_id)


#: The status lines of the answers the server writes itself (no application behind).
_REASONS = {
    400: "Bad Request",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
}
#: The problem of a request whose headers exceed ``http.max_header_bytes``.
HEADERS_TOO_LARGE = ProblemAnswer(code="headers_too_large", status=431)


def closing_answer(answer: ProblemAnswer, correlation_id: str) -> bytes:
    """The bytes of a problem answer the server writes itself, closing the connection.

    Args:
        answer: the problem (its status one of the server's own: 400, 408, 431).
        correlation_id: the request's correlation id (answered in its header).

    Returns:
        A whole HTTP/1.1 answer, status line to body.
    """
    body = msgspec.json.encode(problem_of(answer, correlation_id))
    head = (
        f"HTTP/1.1 {answer.status} {_REASONS[answer.status]}\r\n"
        f"content-type: {PROBLEM_MEDIA_TYPE}\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n"
        f"{CORRELATION_HEADER.lower()}: {correlation_id}\r\n\r\n"
    )
    return head.encode("latin-1") + body


def refuse_unread(
    guard: ConnectionGuard,
    connection: GuardedConnection,
    transport: asyncio.WriteTransport,
    too_large: bool,
    *,
    method: str | None = None,
    began: float | None = None,
    correlation_id: str | None = None,
) -> None:
    """Answer a request the server could not read as a problem, and end the connection.

    The parser refused it (400 ``validation_failed`` / ``malformed_request``) or its
    headers passed ``http.max_header_bytes`` (431 ``headers_too_large``). The request
    never reached the application, so the guard has it logged and counted here
    (`ConnectionGuard.unread`: route ``(unread)``), with a new correlation id. The
    connection's writing side is closed after the answer while the client may still be
    sending: closing the whole socket with its bytes unread would reset the connection
    and lose the answer. The protocol discards what still arrives, and the guard closes
    the connection at the latest ``http.header_timeout`` after its headers began.

    Args:
        guard: the server's guard.
        connection: the connection.
        transport: its transport.
        too_large: the headers were too long (else the request was malformed).
        method: the request's method, when the parser read it.
        began: `ConnectionGuard.request_clock` at the request's first byte; None when
            no byte arrived since the answer ahead of it ended (the request was
            pipelined, its bytes already here): it counts from now, that answer's end.
        correlation_id: the request's own, when its head was read (a pipelined request
            whose body is unreadable); else a new one.
    """
    if transport.is_closing():
        return
    answer = HEADERS_TOO_LARGE if too_large else MALFORMED_REQUEST
    correlation_id = correlation_id or correlation_id_of({})
    transport.write(closing_answer(answer, correlation_id))
    answered = guard.request_clock()
    guard.body_received(connection)
    guard.await_headers(connection)
    if transport.can_write_eof():
        transport.write_eof()
    else:
        transport.close()
    guard.unread(
        method=method,
        status=answer.status,
        seconds=answered - began if began is not None else 0.0,
        correlation_id=correlation_id,
    )


def close_dropped(
    guard: ConnectionGuard,
    connection: GuardedConnection,
    transport: asyncio.BaseTransport,
    reason: str,
) -> None:
    """Close a connection the guard drops (`GuardedConnection.drop` of both protocols).

    Args:
        guard: the server's guard (forgets the connection).
        connection: the connection.
        transport: its transport.
        reason: ``header_timeout`` or ``connection_limit`` (logged).
    """
    guard.closed(connection)
    if not transport.is_closing():
        _log.info("http_connection_closed", reason=reason)
        transport.close()


def end_late_request(
    guard: ConnectionGuard,
    connection: GuardedConnection,
    transport: asyncio.WriteTransport,
    cycle: Any,
    answer: Callable[[str], bytes],
) -> None:
    """End a request whose body did not arrive within ``http.body_timeout``.

    Answers ``408 request_timeout`` when the answer has not started, tells the
    application's request that the client is gone (its body read ends), and closes the
    connection (`GuardedConnection.body_late` of both protocols).

    Args:
        guard: the server's guard (forgets the connection).
        connection: the connection.
        transport: its transport.
        cycle: uvicorn's request cycle of the connection (h11 or httptools), or None.
        answer: the bytes of the 408 answer for a correlation id (empty when the
            protocol cannot send one now).
    """
    _end_request(guard, connection, transport, cycle, answer, reason="body_timeout")


def end_unreadable_request(
    guard: ConnectionGuard,
    connection: GuardedConnection,
    transport: asyncio.WriteTransport,
    cycle: Any,
    answer: Callable[[str], bytes],
) -> None:
    """End a running request whose body the parser could not read (a broken chunk).

    Its head was read and the application reads its body: without this, the request
    waited for a body that never came until ``http.body_timeout`` and then answered 408.
    It is answered ``400 validation_failed`` (``malformed_request``) at once, with its own
    correlation id, when the answer has not started; the application's body read ends
    (`turnkeeper.adapters.http.problems.ClientGone` with ``unreadable``, so that its log
    line and metrics say 400 too) and the connection is closed.

    Args:
        guard: the server's guard (forgets the connection).
        connection: the connection.
        transport: its transport.
        cycle: uvicorn's request cycle of the connection (h11 or httptools).
        answer: the bytes of the 400 answer for a correlation id (empty when the
            protocol cannot send one now).
    """
    if not cycle.response_started:
        # The 400 is its answer: its log line and count say so (an answer already
        # begun, a stream's 200, stays what the client got).
        cycle.scope[UNREADABLE_BODY] = True
    _end_request(guard, connection, transport, cycle, answer, reason="malformed_body")


def _end_request(
    guard: ConnectionGuard,
    connection: GuardedConnection,
    transport: asyncio.WriteTransport,
    cycle: Any,
    answer: Callable[[str], bytes],
    *,
    reason: str,
) -> None:
    guard.closed(connection)
    if transport.is_closing():
        return
    data = b""
    if cycle is not None and not cycle.response_started:
        data = answer(correlation_id_of(cast("dict[str, Any]", cycle.scope)))
        cycle.response_started = True
    if cycle is not None:
        # As uvicorn's connection_lost does: the application stops reading and writing
        # now, before the transport reports the close.
        cycle.disconnected = True
        cycle.message_event.set()
    _log.info("http_connection_closed", reason=reason)
    if data:
        transport.write(data)
    transport.close()


def malformed_request_answer(correlation_id: str) -> bytes:
    """The bytes of a ``400 malformed_request`` problem answer that closes the connection.

    Args:
        correlation_id: the request's correlation id (answered in its header).

    Returns:
        A whole HTTP/1.1 answer, status line to body.
    """
    return closing_answer(MALFORMED_REQUEST, correlation_id)


class _Waits:
    """The connections waiting for one thing, each with the loop time its wait began.

    A wait that ends disarms nothing: each connection keeps at most one timer armed
    (`asyncio.TimerHandle`), which, when it fires, ends the connection if its current
    wait began a whole timeout ago and otherwise re-arms for the end of that wait. A
    connection in steady use thus costs one timer per timeout instead of a timer made
    and cancelled per request (two per request, about 1.4 % of the server's CPU on the
    message route), and every wait is still bounded by exactly its timeout.

    Args:
        timeout: seconds a wait may last.
        expire: what ends a connection whose wait lasted too long.
        clock: the loop's time (None: the running loop's `time`).
    """

    def __init__(
        self,
        timeout: float,
        expire: Callable[[GuardedConnection], None],
        clock: Callable[[], float] | None,
    ) -> None:
        self.timeout = timeout
        self._expire = expire
        self._clock = clock
        # Insertion order is arrival order: the first entry has waited longest.
        self.since: dict[GuardedConnection, float] = {}
        self.timers: dict[GuardedConnection, asyncio.TimerHandle] = {}

    def _now(self, loop: asyncio.AbstractEventLoop) -> float:
        return self._clock() if self._clock is not None else loop.time()

    def begin(self, connection: GuardedConnection) -> None:
        if connection in self.since:
            return
        loop = asyncio.get_running_loop()
        now = self._now(loop)
        self.since[connection] = now
        if connection not in self.timers:
            self.timers[connection] = loop.call_at(now + self.timeout, self._due, connection)

    def end(self, connection: GuardedConnection) -> None:
        self.since.pop(connection, None)

    def forget(self, connection: GuardedConnection) -> None:
        self.since.pop(connection, None)
        timer = self.timers.pop(connection, None)
        if timer is not None:
            timer.cancel()

    def _due(self, connection: GuardedConnection) -> None:
        self.timers.pop(connection, None)
        began = self.since.get(connection)
        if began is None:
            return  # not waiting now: its next wait arms a timer again
        loop = asyncio.get_running_loop()
        ends = began + self.timeout
        if self._now(loop) >= ends:
            self._expire(connection)
        else:
            self.timers[connection] = loop.call_at(ends, self._due, connection)


class ConnectionGuard:
    """The connections of one server and the ones waiting for request headers.

    Args:
        header_timeout: ``http.header_timeout`` in seconds.
        max_connections: open connections at most (see `connection_budget`).
        body_timeout: ``http.body_timeout`` in seconds.
        max_header_bytes: ``http.max_header_bytes``: bytes a connection may send before
            a request's headers are complete (None: no bound).
        clock: the time waits are measured in, the loop's (None: the running loop's
            `time`; a test gives its own and fires the timers itself).
        unread: logs and counts a request answered unread (`refuse_unread`): the
            application's `CorrelatedApp.unread_answered` (`guarded_server` passes it),
            else the log line alone.
        request_clock: the time such a request's duration is measured in, the request
            log's `time.perf_counter` (a test gives its own).
    """

    def __init__(
        self,
        *,
        header_timeout: float,
        max_connections: int,
        body_timeout: float = 30.0,
        max_header_bytes: int | None = None,
        clock: Callable[[], float] | None = None,
        unread: UnreadAnswered = log_unread,
        request_clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.header_timeout = header_timeout
        self.unread = unread
        self.request_clock = request_clock
        self.max_header_bytes = max_header_bytes
        self.max_connections = max_connections
        self.body_timeout = body_timeout
        self.open: set[GuardedConnection] = set()
        self._headers = _Waits(header_timeout, _drop_late_headers, clock)
        # Connections whose request has its headers but not yet its whole body.
        self._body = _Waits(body_timeout, _end_late_body, clock)

    @property
    def waiting(self) -> dict[GuardedConnection, float]:
        """Connections waiting for request headers, longest first, with when they began."""
        return self._headers.since

    @property
    def reading(self) -> dict[GuardedConnection, float]:
        """Connections waiting for the rest of a request's body, with when they began."""
        return self._body.since

    def timers(self, connection: GuardedConnection) -> list[asyncio.TimerHandle]:
        """The timers armed for a connection (for tests: fire them at a time of theirs).

        Args:
            connection: the connection.

        Returns:
            Its header timer, then its body timer, those that are armed.
        """
        return [
            timer
            for timer in (self._headers.timers.get(connection), self._body.timers.get(connection))
            if timer is not None
        ]

    def opened(self, connection: GuardedConnection) -> None:
        """A connection was accepted: start its header timer; make room if over the bound.

        Args:
            connection: the new connection.
        """
        self.open.add(connection)
        self.await_headers(connection)
        if len(self.open) > self.max_connections:
            # The newest connection is last in `waiting`: it is the victim only when
            # no other connection is waiting for its headers.
            victim = next(iter(self.waiting))
            victim.drop("connection_limit")

    def await_headers(self, connection: GuardedConnection) -> None:
        """Start the header wait of a connection between two requests (if not running).

        Args:
            connection: a connection whose next request has not arrived.
        """
        self._headers.begin(connection)

    def headers_received(self, connection: GuardedConnection) -> None:
        """End the header wait: the request's headers are complete.

        Args:
            connection: the connection.
        """
        self._headers.end(connection)

    def await_body(self, connection: GuardedConnection) -> None:
        """Start the body wait of a request whose headers arrived (if not running).

        Args:
            connection: a connection whose request's body has not ended yet.
        """
        self._body.begin(connection)

    def body_received(self, connection: GuardedConnection) -> None:
        """End the body wait: the request's body is complete (or there is none).

        Args:
            connection: the connection.
        """
        self._body.end(connection)

    def closed(self, connection: GuardedConnection) -> None:
        """Forget a closed (or closing) connection, its timers too.

        Args:
            connection: the connection.
        """
        self._headers.forget(connection)
        self._body.forget(connection)
        self.open.discard(connection)


def _drop_late_headers(connection: GuardedConnection) -> None:
    connection.drop("header_timeout")


def _end_late_body(connection: GuardedConnection) -> None:
    connection.body_late()


__all__ = [
    "ConnectionGuard",
    "GuardedConnection",
    "close_dropped",
    "end_late_request",
    "request_timeout_answer",
]
