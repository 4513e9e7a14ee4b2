"""The connection guard of ``turnkeeper serve`` on uvicorn's httptools protocol.

httptools (the ``fast`` extra) parses requests in C; `GuardedHttpToolsProtocol` reports
to the same `turnkeeper.adapters.http.guard.ConnectionGuard` as the h11 protocol does,
from the parser's callbacks instead of h11's states: the header timer stops when a
request's headers are complete (``on_headers_complete``) and starts again when an
answer is complete and no pipelined request is waiting (``on_response_complete``).
httptools keeps a header of any length in memory and tells no byte offsets, so the bytes
of each request's head (request line and headers) are counted here: beyond
``http.max_header_bytes`` the connection gets ``431 headers_too_large`` and is closed,
before the request runs, however the head arrived (see
`GuardedHttpToolsProtocol.data_received`). An HTTP/1.1 request without a Host line, or
any request with two, is refused as malformed (RFC 9112, section 3.2), as h11 does. A
request the parser refuses gets a problem answer with a correlation id, not uvicorn's
plain text, after the answers of the requests before it on the connection.
This module imports httptools: import it only where httptools is installed.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from turnkeeper.adapters.http.corked import CorkedTransport
from turnkeeper.adapters.http.correlation import correlation_id_of
from turnkeeper.adapters.http.guard import (
    ConnectionGuard,
    close_dropped,
    end_late_request,
    end_unreadable_request,
    malformed_request_answer,
    refuse_unread,
    request_timeout_answer,
)
from turnkeeper.application.logs import get_logger

_log = get_logger("turnkeeper.http")

#: The end of a request's head: its last line's end and the empty line. llhttp takes no
#: bare LF, so every head, and every chunked body, ends with these bytes.
HEAD_END = b"\r\n\r\n"
#: How many of a read's first bytes may still finish a head end begun in the read before.
_SPLIT_END_BYTES = len(HEAD_END) - 1
#: The bytes a head end is made of.
_LINE_END_BYTES = b"\r\n"
#: The HTTP version whose requests must carry a Host line (HTTP/1.0 had none).
_HOST_REQUIRED_VERSION = "1.1"
#: The header that names the server a request is for (uvicorn lowercases names).
_HOST = b"host"


class _UnreadRequest(Exception):
    """Raised in a parser callback to stop parsing a request that must not run."""


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol that reports to a `ConnectionGuard`.

    Built per server by `turnkeeper.adapters.http.server.guarded_protocol`, which sets
    `guard`.
    """

    guard: ClassVar[ConnectionGuard]
    #: Bytes of the current request's head counted so far (0 while a body is read).
    _head_bytes = 0
    #: Whether the current request's headers are still being read.
    _reading_head = True
    #: Whether a request was refused unread: what still arrives is discarded.
    _refused = False
    #: A refusal waiting for the answers of the requests before it (431 when True).
    _refusal: bool | None = None
    #: Whether the parser was stopped because a head passed the bound.
    _too_large = False
    #: Length of the piece of a read being parsed (see `data_received`).
    _piece = 0
    #: Body bytes the parser reported in that piece.
    _piece_body = 0
    #: Whether that piece began inside the body of a request that has not ended yet.
    _piece_in_body = False
    #: Whether the body being read is chunked (it then ends with `HEAD_END`).
    _chunked = False
    #: `ConnectionGuard.request_clock` at the first byte received since the last answer
    #: ended (None: none since), the start of a refused request's duration.
    _began: float | None = None
    #: The method of a refusal waiting in `_refusal`, when the parser read it.
    _refused_method: str | None = None
    #: The URL of the last request whose message ended (uvicorn's `url`, see `_method`).
    _ended_url: bytes | None = None
    #: A pipelined request taken out of uvicorn's queue because its body is unreadable.
    _dropped: object = None
    #: The correlation id of that request (its refusal answers with it).
    _refused_id: str | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Register the connection with the guard (after uvicorn's own setup).

        uvicorn writes on a `CorkedTransport`: an answer's head and body in one send.
        """
        super().connection_made(cast("asyncio.Transport", CorkedTransport(transport, self.loop)))
        self.guard.opened(self)

    def data_received(self, data: bytes) -> None:
        """Let uvicorn parse the bytes; refuse a head longer than allowed.

        A head counts from the byte after the previous request ended (its head or its
        body) to the end of its empty line. The parser's callbacks give no offsets, so a
        read is parsed whole only when no head in it can pass the bound and none is left
        half-read at its end (it ends with `HEAD_END`, as a request without a body
        does): one comparison and one look at its last bytes. Any other read is parsed
        in pieces that each end with `HEAD_END` (or with the read), so that a head ends
        where a piece ends and its length is known when its headers are complete; where
        a request ends inside a piece is known from the body bytes the parser reported
        (a chunked body ends with `HEAD_END`, so with its piece).
        """
        if self._refused:
            return
        if self._began is None:
            self._began = self.guard.request_clock()
        limit = self.guard.max_header_bytes
        if limit is None or (self._head_bytes + len(data) <= limit and data.endswith(HEAD_END)):
            super().data_received(data)
            return
        view, size, start = memoryview(data), len(data), 0
        if self._head_bytes or not self._reading_head:
            # A head or a chunked body begun in the read before may end within this
            # read's first bytes (its empty line split between the two): fed one by one,
            # it ends where a piece ends.
            split_end = min(_SPLIT_END_BYTES, size)
            while start < split_end and data[start] in _LINE_END_BYTES and not self._refused:
                self._parse_piece(view[start : start + 1], limit)
                start += 1
        # A head end that ended by `start` was parsed: from here, each one found ends later.
        search = max(start - _SPLIT_END_BYTES, 0)
        while start < size and not self._refused:
            found = data.find(HEAD_END, search)
            end = size if found < 0 else found + len(HEAD_END)
            self._parse_piece(view[start:end], limit)
            start = search = end
        self._piece_in_body = False

    def _parse_piece(self, piece: memoryview, limit: int) -> None:
        """Parse a piece of a read, in which a head can only end where the piece does."""
        self._piece, self._piece_body = len(piece), 0
        self._piece_in_body = not self._reading_head
        if self._reading_head:
            self._head_bytes += len(piece)
        # uvicorn hands the bytes to httptools, which takes a memoryview as it is.
        super().data_received(piece)  # type: ignore[arg-type]
        if self._reading_head and self._head_bytes > limit and not self._refused:
            self._refuse(too_large=True)

    def send_400_response(self, msg: str) -> None:
        """Answer a request the parser refused as a problem (uvicorn writes plain text)."""
        self._refuse(too_large=self._too_large)

    def _refuse(self, *, too_large: bool) -> None:
        self._refused = True
        if not self._reading_head and self.cycle is not None and not self.cycle.response_complete:
            queued = [item for item in self.pipeline if item[0] is self.cycle]
            if not queued:
                # The running request's own body cannot be read (a broken chunk): it
                # ends now, instead of waiting for a body that cannot come.
                end_unreadable_request(
                    self.guard, self, self.transport, self.cycle, malformed_request_answer
                )
                return
            # Pipelined behind a request still being answered: it never runs, and is
            # refused after the answers ahead of it, as a request whose head is refused
            # is, with its own correlation id. Its body will not come: no timer waits.
            self.pipeline.remove(queued[0])
            self._dropped = self.cycle
            self._refused_id = correlation_id_of(cast("dict[str, Any]", self.cycle.scope))
            self.guard.body_received(self)
        method = self._method()
        if self.cycle is None or self.cycle.response_complete:
            refuse_unread(
                self.guard, self, self.transport, too_large, method=method, began=self._began
            )
        else:
            # Pipelined behind a request still being answered: answered after it, in the
            # order the requests came (`on_response_complete`).
            self._refusal, self._refused_method = too_large, method

    def _method(self) -> str | None:
        """The method of the request being refused, when the parser read it.

        llhttp reads the method first, then reports the URL (uvicorn's `url`, reset at
        each message's first byte), so a URL of the request means its method was read;
        the URL of the request before it (no byte of the next message began one) does
        not.
        """
        url = getattr(self, "url", None)  # set at the first message's first byte
        if not url or url is self._ended_url:
            return None
        return str(self.parser.get_method().decode("ascii"))

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the connection, then let uvicorn clean up."""
        self.guard.closed(self)
        super().connection_lost(exc)

    def on_headers_complete(self) -> None:
        """Refuse a head beyond the bound or without one Host line; else start the request.

        Stops the header timer, lets uvicorn start the request and starts the body
        timer.

        Raises:
            _UnreadRequest: the request must not run (the parser stops, and uvicorn
                calls `send_400_response`).
        """
        limit = self.guard.max_header_bytes
        if limit is not None and self._head_bytes > limit:
            self._too_large = True
            raise _UnreadRequest
        hosts = 0
        for name, _ in self.headers:
            if name == _HOST:
                hosts += 1
        if hosts != 1 and (hosts or self.parser.get_http_version() == _HOST_REQUIRED_VERSION):
            raise _UnreadRequest
        # The piece ends with this head: what the parser reads next in it is no body.
        self._reading_head, self._head_bytes, self._piece_in_body = False, 0, False
        self.guard.headers_received(self)
        super().on_headers_complete()
        self.guard.await_body(self)

    def on_body(self, body: bytes) -> None:
        """Count the piece's body bytes (to find where its request ends); uvicorn keeps them."""
        self._piece_body += len(body)
        super().on_body(body)

    def on_chunk_header(self) -> None:
        """Note that the body is chunked: its request ends where a piece ends."""
        self._chunked = True

    def on_message_complete(self) -> None:
        """Stop the body timer: the request's body is complete (or there is none)."""
        self.guard.body_received(self)
        super().on_message_complete()
        self._ended_url = self.url
        # The next request's head begins with the next byte. In a piece that began in
        # this request's Content-Length body, the bytes after the body's last one are
        # the next head's; a piece that began in a head, or in a chunked body, ends
        # with this request.
        rest = self._piece - self._piece_body if self._piece_in_body and not self._chunked else 0
        self._reading_head, self._head_bytes = True, rest
        self._piece_in_body = self._chunked = False

    def on_response_complete(self) -> None:
        """Let uvicorn finish the answer, then start the timer of the next request.

        A request refused behind the ones answered is answered now, and counts from now.
        """
        self._began = None
        # uvicorn starts the next queued request, if there is one, in its own callback.
        started_next = bool(self.pipeline)
        super().on_response_complete()
        if self.transport.is_closing():
            self.guard.closed(self)
        elif not started_next and (
            self.cycle is None or self.cycle.response_complete or self.cycle is self._dropped
        ):
            # No request in flight (one dropped unread never runs).
            if self._refusal is not None:
                refuse_unread(
                    self.guard,
                    self,
                    self.transport,
                    self._refusal,
                    method=self._refused_method,
                    correlation_id=self._refused_id,
                )
            else:
                # The next request's headers count from the end of this answer.
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
