"""The connection guard of ``turnkeeper serve`` on uvicorn's httptools protocol.

httptools (the ``fast`` extra) parses requests in C; `GuardedHttpToolsProtocol` reports
to the same `turnkeeper.adapters.http.guard.ConnectionGuard` as the h11 protocol does,
from the parser's callbacks instead of h11's states: the header timer stops when a
request's headers are complete (``on_headers_complete``) and starts again when an
answer is complete and no pipelined request is waiting (``on_response_complete``).
httptools keeps a header of any length in memory, so the bytes received before a
request's headers are complete are counted here: beyond ``http.max_header_bytes`` the
connection gets ``431 headers_too_large`` and is closed. A request the parser refuses
gets a problem answer with a correlation id, not uvicorn's plain text.
This module imports httptools: import it only where httptools is installed.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from turnkeeper.adapters.http.corked import CorkedTransport
from turnkeeper.adapters.http.guard import (
    ConnectionGuard,
    close_dropped,
    end_late_request,
    refuse_unread,
    request_timeout_answer,
)
from turnkeeper.application.logs import get_logger

_log = get_logger("turnkeeper.http")


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol that reports to a `ConnectionGuard`.

    Built per server by `turnkeeper.adapters.http.server.guarded_protocol`, which sets
    `guard`.
    """

    guard: ClassVar[ConnectionGuard]
    #: Bytes received since the current request's headers began (while they are read).
    _head_bytes = 0
    #: Whether the current request's headers are still being read.
    _reading_head = True
    #: Whether a request was refused unread: what still arrives is discarded.
    _refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Register the connection with the guard (after uvicorn's own setup).

        uvicorn writes on a `CorkedTransport`: an answer's head and body in one send.
        """
        super().connection_made(cast("asyncio.Transport", CorkedTransport(transport, self.loop)))
        self.guard.opened(self)

    def data_received(self, data: bytes) -> None:
        """Let uvicorn parse the bytes; refuse headers longer than allowed."""
        if self._refused:
            return
        if self._reading_head:
            self._head_bytes += len(data)
        super().data_received(data)
        limit = self.guard.max_header_bytes
        if self._reading_head and limit is not None and self._head_bytes > limit:
            self._refuse(too_large=True)

    def send_400_response(self, msg: str) -> None:
        """Answer a request the parser refused as a problem (uvicorn writes plain text)."""
        self._refuse(too_large=False)

    def _refuse(self, *, too_large: bool) -> None:
        self._refused = True
        refuse_unread(self.guard, self, self.transport, too_large)

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the connection, then let uvicorn clean up."""
        self.guard.closed(self)
        super().connection_lost(exc)

    def on_headers_complete(self) -> None:
        """Stop the header timer, let uvicorn start the request, start the body timer."""
        self._reading_head = False
        self.guard.headers_received(self)
        super().on_headers_complete()
        self.guard.await_body(self)

    def on_message_complete(self) -> None:
        """Stop the body timer: the request's body is complete (or there is none)."""
        self.guard.body_received(self)
        super().on_message_complete()
        # The next request's headers begin with the next byte.
        self._reading_head, self._head_bytes = True, 0

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
