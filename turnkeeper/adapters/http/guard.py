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
from collections.abc import Callable
from typing import Any, Protocol, cast

import msgspec
import structlog

from turnkeeper.adapters.http.correlation import CORRELATION_HEADER, correlation_id_of
from turnkeeper.adapters.http.problems import PROBLEM_MEDIA_TYPE, ProblemAnswer, problem_of

_log = structlog.get_logger("turnkeeper.http")


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
    body = msgspec.json.encode(
        problem_of(ProblemAnswer(code="request_timeout", status=408), correlation_id)
    )
    head = (
        "HTTP/1.1 408 Request Timeout\r\n"
        f"content-type: {PROBLEM_MEDIA_TYPE}\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n"
        f"{CORRELATION_HEADER.lower()}: {correlation_id}\r\n\r\n"
    )
    return head.encode("latin-1") + body


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
    _log.info("http_connection_closed", reason="body_timeout")
    if data:
        transport.write(data)
    transport.close()


class ConnectionGuard:
    """The connections of one server and the ones waiting for request headers.

    Args:
        header_timeout: ``http.header_timeout`` in seconds.
        max_connections: open connections at most (see `connection_budget`).
        body_timeout: ``http.body_timeout`` in seconds.
    """

    def __init__(
        self, *, header_timeout: float, max_connections: int, body_timeout: float = 30.0
    ) -> None:
        self.header_timeout = header_timeout
        self.max_connections = max_connections
        self.body_timeout = body_timeout
        self.open: set[GuardedConnection] = set()
        # Insertion order is arrival order: the first entry has waited longest.
        self.waiting: dict[GuardedConnection, asyncio.TimerHandle] = {}
        # Connections whose request has its headers but not yet its whole body.
        self.reading: dict[GuardedConnection, asyncio.TimerHandle] = {}

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
        """Start the header timer of a connection between two requests (if not running).

        Args:
            connection: a connection whose next request has not arrived.
        """
        if connection in self.waiting:
            return
        loop = asyncio.get_running_loop()
        self.waiting[connection] = loop.call_later(
            self.header_timeout, connection.drop, "header_timeout"
        )

    def headers_received(self, connection: GuardedConnection) -> None:
        """Stop the header timer: the request's headers are complete.

        Args:
            connection: the connection.
        """
        timer = self.waiting.pop(connection, None)
        if timer is not None:
            timer.cancel()

    def await_body(self, connection: GuardedConnection) -> None:
        """Start the body timer of a request whose headers arrived (if not running).

        Args:
            connection: a connection whose request's body has not ended yet.
        """
        if connection in self.reading:
            return
        loop = asyncio.get_running_loop()
        self.reading[connection] = loop.call_later(self.body_timeout, connection.body_late)

    def body_received(self, connection: GuardedConnection) -> None:
        """Stop the body timer: the request's body is complete (or there is none).

        Args:
            connection: the connection.
        """
        timer = self.reading.pop(connection, None)
        if timer is not None:
            timer.cancel()

    def closed(self, connection: GuardedConnection) -> None:
        """Forget a closed (or closing) connection.

        Args:
            connection: the connection.
        """
        self.headers_received(connection)
        self.body_received(connection)
        self.open.discard(connection)


__all__ = [
    "ConnectionGuard",
    "GuardedConnection",
    "close_dropped",
    "end_late_request",
    "request_timeout_answer",
]
