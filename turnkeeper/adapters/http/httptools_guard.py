"""The connection guard of ``turnkeeper serve`` on uvicorn's httptools protocol.

httptools (the ``fast`` extra) parses requests in C; `GuardedHttpToolsProtocol` reports
to the same `turnkeeper.adapters.http.guard.ConnectionGuard` as the h11 protocol does,
from the parser's callbacks instead of h11's states: the header timer stops when a
request's headers are complete (``on_headers_complete``) and starts again when an
answer is complete and no pipelined request is waiting (``on_response_complete``).
This module imports httptools: import it only where httptools is installed.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar, cast

import structlog
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from turnkeeper.adapters.http.corked import CorkedTransport
from turnkeeper.adapters.http.guard import (
    ConnectionGuard,
    close_dropped,
    end_late_request,
    request_timeout_answer,
)

_log = structlog.get_logger("turnkeeper.http")


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol that reports to a `ConnectionGuard`.

    Built per server by `turnkeeper.adapters.http.server.guarded_protocol`, which sets
    `guard`.
    """

    guard: ClassVar[ConnectionGuard]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Register the connection with the guard (after uvicorn's own setup).

        uvicorn writes on a `CorkedTransport`: an answer's head and body in one send.
        """
        super().connection_made(cast("asyncio.Transport", CorkedTransport(transport, self.loop)))
        self.guard.opened(self)

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the connection, then let uvicorn clean up."""
        self.guard.closed(self)
        super().connection_lost(exc)

    def on_headers_complete(self) -> None:
        """Stop the header timer, let uvicorn start the request, start the body timer."""
        self.guard.headers_received(self)
        super().on_headers_complete()
        self.guard.await_body(self)

    def on_message_complete(self) -> None:
        """Stop the body timer: the request's body is complete (or there is none)."""
        self.guard.body_received(self)
        super().on_message_complete()

    def on_response_complete(self) -> None:
        """Let uvicorn finish the answer, then start the timer of the next request."""
        super().on_response_complete()
        if self.transport.is_closing():
            self.guard.closed(self)
        elif self.cycle is None or self.cycle.response_complete:
            # No request in flight (a pipelined one would be the current cycle now): the
            # next request's headers count from the end of this answer.
            self.guard.await_headers(self)

    def drop(self, reason: str) -> None:
        """Close the connection because it is too slow or room is needed.

        Args:
            reason: ``header_timeout`` or ``connection_limit`` (logged).
        """
        close_dropped(self.guard, self, self.transport, reason)

    def body_late(self) -> None:
        """The request's body did not arrive within ``http.body_timeout``: end it.

        Answers ``408 request_timeout`` when the answer has not started, tells the
        application's request that the client is gone (its body read ends), and closes
        the connection.
        """
        end_late_request(self.guard, self, self.transport, self.cycle, request_timeout_answer)
