"""The HTTP server of ``turnkeeper serve``: uvicorn, guarded against slow clients.

uvicorn parses with httptools when it is installed (``http.parser``, the ``fast`` extra),
else with h11; the guard of this module hooks into either (ADR 0021).

uvicorn closes an idle keep-alive connection after ``timeout_keep_alive``, but every byte
received restarts that timer, and a connection that never completes its first request
has no timer at all: a client that opens connections and trickles header bytes keeps
them open forever, until the process runs out of file descriptors and accepts nobody
(see ADR 0014). And a request whose body trickles in (headers complete, then a byte now
and then) holds its connection and its request's work for as long as the client likes.
`turnkeeper.adapters.http.guard.ConnectionGuard` adds the three bounds uvicorn lacks:

- ``http.header_timeout``: a connection must complete the headers of each request within
  this long after it opened (first request) or after the previous answer ended
  (keep-alive); bytes received meanwhile do not extend it. Then it is closed.
- ``http.body_timeout``: a request must complete its body within this long after its
  headers; bytes received meanwhile do not extend it. Then the server answers ``408
  request_timeout`` (problem+json) when the answer has not started, and closes the
  connection; the application's read of the body ends (``http.disconnect``).
- ``http.max_connections``: when a new connection would exceed it, the connection that
  has waited longest for its headers is closed to make room (the newcomer is closed
  instead when every other connection is busy with a request). A polite client, which
  sends its request at once, is served while any number of slow ones queue behind it.

The bound is kept below the process's open file limit (`connection_budget`), so the
server never stops accepting for lack of a descriptor. A stopping server waits at most
``http.shutdown_timeout`` for its open answers (`StreamClosingServer`), so a client that
stopped reading cannot hold the process up either. The bounds live in
`GuardedH11Protocol` (uvicorn's h11 protocol with three hooks) or
`turnkeeper.adapters.http.httptools_guard.GuardedHttpToolsProtocol`; the answer is left
to uvicorn and the application.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import math
import resource
import socket
from collections.abc import Callable
from typing import Any, ClassVar, cast

import h11
import msgspec
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from turnkeeper.adapters.http.corked import CorkedTransport
from turnkeeper.adapters.http.correlation import CORRELATION_HEADER, CorrelatedApp, log_unread
from turnkeeper.adapters.http.guard import (
    ConnectionGuard,
    close_dropped,
    end_late_request,
    end_unreadable_request,
    refuse_unread,
)
from turnkeeper.adapters.http.problems import (
    MALFORMED_REQUEST,
    PROBLEM_MEDIA_TYPE,
    ProblemAnswer,
    problem_of,
)
from turnkeeper.adapters.http.shutdown import StreamClosingServer
from turnkeeper.application.logs import get_logger
from turnkeeper.application.services.live import LiveDelivery
from turnkeeper.application.settings import Settings

#: Descriptors the process needs besides client connections and the database pool: the
#: listening socket, the event loop, log files and the embedded database's pipes.
FD_RESERVE = 64
#: The listen backlog, which is also how many connections asyncio accepts in one pass of
#: its loop before the guard sees any of them: the budget keeps room for two passes
#: (the one accepted and the one whose evicted sockets are not closed yet).
ACCEPT_BACKLOG = 128
#: Passes of the accept loop the budget keeps room for.
ACCEPT_PASSES = 2
#: The status h11 gives a request it refuses for the length of its head.
HEAD_TOO_LARGE_STATUS = 431

_log = get_logger("turnkeeper.http")


class HeadBoundConnection(h11.Connection):
    """h11's server side that refuses a request head longer than ``http.max_header_bytes``.

    h11 bounds only what it holds of an incomplete head (``max_incomplete_event_size``):
    a head that arrives whole, in one read or behind a pipelined request, is parsed
    however long it is. This connection measures each head it takes from its buffer
    and refuses one beyond the bound as h11 refuses an incomplete one (431).

    Args:
        max_head_bytes: ``http.max_header_bytes``: bytes a request's line and headers
            may take.
    """

    def __init__(self, max_head_bytes: int) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=max_head_bytes)
        self.max_head_bytes = max_head_bytes
        #: Whether a request was refused because its head passed the bound.
        self.head_too_large = False
        #: The method of that request, when h11 had read its head (a head that came
        #: whole); None when h11 refused the head before it was complete.
        self.refused_method: str | None = None

    def next_event(self) -> h11.Event | type[h11.NEED_DATA] | type[h11.PAUSED]:
        """h11's next event, or `h11.RemoteProtocolError` for a head beyond the bound.

        Raises:
            h11.RemoteProtocolError: the request cannot be read (``error_status_hint``
                431: its head is beyond the bound).
        """
        if self.their_state is not h11.IDLE:
            return super().next_event()
        # A head is taken from the buffer whole: when the buffer holds no more than the
        # bound (the common case), neither can the head, and nothing is measured.
        buffered = len(self._receive_buffer)
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as exc:
            self.head_too_large = exc.error_status_hint == HEAD_TOO_LARGE_STATUS
            raise
        if (
            buffered > self.max_head_bytes
            and type(event) is h11.Request
            and buffered - len(self._receive_buffer) > self.max_head_bytes
        ):
            self.head_too_large = True
            self.refused_method = event.method.decode("ascii")
            raise h11.RemoteProtocolError(
                "request head too long", error_status_hint=HEAD_TOO_LARGE_STATUS
            )
        return event


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol that reports to a `ConnectionGuard`.

    Built per server by `guarded_protocol`, which sets `guard`. Its h11 connection is a
    `HeadBoundConnection` when the guard has a ``http.max_header_bytes``.
    """

    guard: ClassVar[ConnectionGuard]
    #: Whether a request was refused unread: what still arrives is discarded.
    _refused = False
    #: `ConnectionGuard.request_clock` at the first byte received since the last answer
    #: ended (None: none since), the start of a refused request's duration.
    _began: float | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.guard.max_header_bytes is not None:
            self.conn = HeadBoundConnection(self.guard.max_header_bytes)

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

    def data_received(self, data: bytes) -> None:
        """Let uvicorn parse the bytes, then follow the connection's state."""
        if self._refused:
            return
        if self._began is None:
            self._began = self.guard.request_clock()
        super().data_received(data)
        if not self._refused:
            self._follow()

    def send_400_response(self, msg: str) -> None:
        """Answer a request h11 refused as a problem (uvicorn writes plain text).

        A head beyond ``http.max_header_bytes`` is ``431 headers_too_large``; any other
        request h11 cannot read (a missing or second Host line among them) is ``400
        validation_failed``. h11 reads a pipelined request only once the answers before
        it are complete, so the refusal comes after them.
        """
        self._refused = True
        if self.cycle is not None and not self.cycle.response_complete:
            # h11 reads no request behind one still being answered: the running
            # request's own body cannot be read (a broken chunk), and it ends now.
            end_unreadable_request(self.guard, self, self.transport, self.cycle, self._malformed)
            return
        too_large, method = False, None
        if isinstance(self.conn, HeadBoundConnection):
            too_large, method = self.conn.head_too_large, self.conn.refused_method
        refuse_unread(self.guard, self, self.transport, too_large, method=method, began=self._began)

    def on_response_complete(self) -> None:
        """Let uvicorn finish the answer, then follow the connection's state.

        A request refused now (pipelined, its bytes already here) counts from now.
        """
        self._began = None
        super().on_response_complete()
        self._follow()

    def _follow(self) -> None:
        if self.transport.is_closing():
            self.guard.closed(self)
        elif self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE:
            # Between two requests: the next one's headers have not arrived yet.
            self.guard.body_received(self)
            self.guard.await_headers(self)
        else:
            self.guard.headers_received(self)
            if self.conn.their_state is h11.SEND_BODY:
                self.guard.await_body(self)
            else:
                self.guard.body_received(self)

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
        end_late_request(self.guard, self, self.transport, self.cycle, self._request_timeout)

    def _request_timeout(self, correlation_id: str) -> bytes:
        """The bytes of a 408 problem answer, or none when h11 cannot send one now."""
        return self._closing_problem(
            ProblemAnswer(code="request_timeout", status=408), correlation_id, b"Request Timeout"
        )

    def _malformed(self, correlation_id: str) -> bytes:
        """The bytes of a 400 ``malformed_request`` answer, or none when h11 cannot send one."""
        return self._closing_problem(MALFORMED_REQUEST, correlation_id, b"Bad Request")

    def _closing_problem(self, answer: ProblemAnswer, correlation_id: str, phrase: bytes) -> bytes:
        body = msgspec.json.encode(problem_of(answer, correlation_id))
        headers = [
            (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
            (CORRELATION_HEADER.lower().encode(), correlation_id.encode()),
        ]
        head_only = self.cycle is not None and self.cycle.scope.get("method") == "HEAD"
        try:
            head = self.conn.send(
                h11.Response(status_code=answer.status, headers=headers, reason=phrase)
            )
            # An answer to HEAD has no body (h11 refuses one and nothing would be sent).
            data = None if head_only else self.conn.send(h11.Data(data=body))
            end = self.conn.send(h11.EndOfMessage())
        except h11.LocalProtocolError:
            return b""
        return (head or b"") + (data or b"") + (end or b"")


def httptools_installed() -> bool:
    """Whether httptools can be imported (the ``fast`` extra).

    Returns:
        True when it is installed.
    """
    return importlib.util.find_spec("httptools") is not None


def event_loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop ``turnkeeper serve`` runs on, by ``http.event_loop``.

    Args:
        choice: ``auto`` (uvloop when installed), ``uvloop`` or ``asyncio``.

    Returns:
        uvloop's loop factory, or None for asyncio's default loop.

    Raises:
        ModuleNotFoundError: ``uvloop`` is asked for and not installed.
    """
    if choice == "asyncio" or (choice == "auto" and importlib.util.find_spec("uvloop") is None):
        return None
    import uvloop  # optional (the fast extra): imported only when chosen

    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def settle_heap(gen0_threshold: int) -> int:
    """Freeze what start-up built, then collect the young generation less often.

    Called once per serving process, after the application is built and before it
    serves. Python's cyclic garbage collector otherwise scans the application's
    long-lived objects (modules, routes, schemas: about 110,000 in ``turnkeeper serve``)
    at every full collection, and a request's short-lived objects are scanned every 700
    allocations; requests make no reference cycles worth the search (docs/performance.md,
    "The garbage collector of serve"). Frozen objects are never collected, which is
    what start-up objects are for.

    Args:
        gen0_threshold: ``http.gc_threshold``; the older generations keep their own.

    Returns:
        How many objects were frozen (logged as ``heap_settled``).
    """
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(gen0_threshold, older, oldest)
    frozen = gc.get_freeze_count()
    _log.info("heap_settled", frozen_objects=frozen, gc_threshold=gen0_threshold)
    return frozen


def guarded_protocol(guard: ConnectionGuard, parser: str = "h11") -> type[asyncio.Protocol]:
    """The protocol class of one server, bound to its guard.

    Args:
        guard: the server's guard.
        parser: ``http.parser``: ``auto`` (httptools when installed), ``httptools``
            or ``h11``.

    Returns:
        A subclass of `GuardedH11Protocol` or of ``GuardedHttpToolsProtocol`` for
        uvicorn's ``http`` setting.

    Raises:
        ModuleNotFoundError: ``httptools`` is asked for and not installed.
    """
    if parser == "httptools" or (parser == "auto" and httptools_installed()):
        # Imported here: httptools is optional, and its module imports it.
        from turnkeeper.adapters.http.httptools_guard import GuardedHttpToolsProtocol

        return type("GuardedHttpTools", (GuardedHttpToolsProtocol,), {"guard": guard})
    return type("GuardedH11", (GuardedH11Protocol,), {"guard": guard})


def connection_budget(settings: Settings) -> int:
    """How many connections the process can hold: ``http.max_connections`` if it fits.

    The soft open file limit is raised towards the hard limit when it is too low for
    ``http.max_connections`` plus the pool, `FD_RESERVE` and two accept passes
    (`ACCEPT_BACKLOG`); when even the hard limit is too low, the budget is what fits
    (with a warning).

    Args:
        settings: for ``http.max_connections`` and ``database.pool_max_size``.

    Returns:
        The connection bound of the server.
    """
    overhead = settings.pool_max_size + FD_RESERVE + ACCEPT_PASSES * ACCEPT_BACKLOG
    wanted = settings.max_connections + overhead
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (ValueError, OSError):
            pass  # keep the soft limit as it is
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return settings.max_connections
    budget = max(1, soft - overhead)
    _log.warning(
        "http_max_connections_lowered",
        configured=settings.max_connections,
        budget=budget,
        open_file_limit=soft,
    )
    return budget


def guarded_server(
    app: Any,
    *,
    host: str,
    port: int,
    settings: Settings,
    live: LiveDelivery,
    sock: socket.socket | None = None,
) -> StreamClosingServer:
    """The uvicorn server of ``turnkeeper serve``, with the guard of this module.

    It ends the process's event streams before it waits for open answers at shutdown
    (`StreamClosingServer`), so that clients reconnect with Last-Event-ID, and waits
    for them at most ``http.shutdown_timeout``: then the connections still open are
    aborted and their answers cancelled (a client sees its connection closed, never an
    answer the application did not write).

    Args:
        app: the ASGI application (a `CorrelatedApp` also counts the requests the
            server answers without reading them, `CorrelatedApp.unread_answered`).
        host: the address to listen on.
        port: the port.
        settings: for ``http.header_timeout``, ``http.body_timeout``,
            ``http.max_connections``, ``http.shutdown_timeout`` and
            ``database.pool_max_size``.
        live: the live delivery service of the application (its streams end first).
        sock: a listening socket shared with other worker processes (then `host` and
            `port` only name it); None: the server binds its own.

    Returns:
        The server (logged as ``http_server_stack`` with its parser and event loop);
        run it with ``await server.serve()`` (the socket, if any, is
        passed along by `StreamClosingServer.serve`).
    """
    guard = ConnectionGuard(
        header_timeout=settings.header_timeout.total_seconds(),
        max_connections=connection_budget(settings),
        body_timeout=settings.body_timeout.total_seconds(),
        max_header_bytes=settings.max_header_bytes,
        # A request answered unread is counted by the application, as every request is.
        unread=app.unread_answered if isinstance(app, CorrelatedApp) else log_unread,
    )
    protocol = guarded_protocol(guard, settings.http_parser)
    _log.info(
        "http_server_stack",
        parser="httptools" if protocol.__name__ == "GuardedHttpTools" else "h11",
        event_loop=type(asyncio.get_running_loop()).__module__.split(".")[0],
        max_connections=guard.max_connections,
    )
    return StreamClosingServer(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            http=protocol,
            backlog=ACCEPT_BACKLOG,
            log_config=None,  # adapters.logging owns the format
            access_log=False,  # the HTTP adapter logs every request itself
            # No ``server: uvicorn`` on every answer: the contract has no such header, and
            # it would name the stack to every client for nothing.
            server_header=False,
            lifespan="on",
            # No bound of uvicorn's: StreamClosingServer bounds the wait by
            # http.shutdown_timeout itself, aborting connections before their answers
            # are cancelled (uvicorn's own bound answered them with a text/plain 500).
            timeout_graceful_shutdown=None,
            # An idle kept-alive connection is the guard's to close, after
            # http.header_timeout (uvicorn's own default closed it after 5 seconds).
            timeout_keep_alive=math.ceil(settings.header_timeout.total_seconds()),
            # h11 buffers at most this much of an incomplete request head.
            h11_max_incomplete_event_size=settings.max_header_bytes,
        ),
        live,
        shutdown_timeout=settings.shutdown_timeout.total_seconds(),
        sock=sock,
    )
