"""Correlation ids, and the request log line of every exchange.

`CorrelatedApp` wraps every HTTP exchange, unknown routes and framework errors included:
it takes the id from ``X-Correlation-Id`` (or makes one), binds it to the log context,
adds it to the answer, and writes one log line per request with the method, the route
template, the status and the duration (at debug for the successful polls, stream reads
and heartbeats of `request_log.QUIET_ROUTES`, at info otherwise). Bodies, query strings
and headers are never logged, so neither tokens nor message content can reach the log.
A request the server answered without reading it never reaches the application: the
connection guard has it logged and counted the same way, with route ``(unread)``
(`CorrelatedApp.unread_answered`).

The line is written by `turnkeeper.adapters.http.request_log.RequestLog` (ADR 0028). The
correlation id is bound to the log context with a token that resets it (no copy of the
whole context per request).
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol, cast

import structlog
from litestar import Litestar
from litestar.routes import BaseRoute, HTTPRoute
from litestar.types import Message, Receive, ReceiveMessage, Scope, Send

from turnkeeper.adapters.http.request_log import RequestLog

#: The request and answer header of the correlation id.
CORRELATION_HEADER = "X-Correlation-Id"

_HEADER_KEY = CORRELATION_HEADER.lower().encode("latin-1")
_STATE_KEY = "turnkeeper.correlation_id"
#: The longest client correlation id echoed; a longer one is replaced by a new id.
CORRELATION_ID_MAX_CHARS = 128
# A client id is echoed when it is printable ASCII (spaces only inside) and not too long:
# no control character, so it cannot smuggle line breaks or escape sequences into
# headers and logs.
_ACCEPTED = re.compile(rf"^[!-~](?:[ -~]{{0,{CORRELATION_ID_MAX_CHARS - 2}}}[!-~])?$")
_MS_PER_S = 1000.0
#: The scope key set on a request whose body the HTTP parser could not read: the server
#: answered it ``400 malformed_request`` and ended its connection, so its log line and
#: count say 400, whatever the application made of it.
UNREADABLE_BODY = "turnkeeper.unreadable_body"
#: The status the server answered such a request with.
UNREADABLE_STATUS = 400

#: The route of a request the server answered without reading it (in its log line and
#: its count), and its method when the parser had not read one.
UNREAD = "(unread)"


_request_log = RequestLog()


def _client_id(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == _HEADER_KEY:
            text = value.decode("latin-1")
            return text if _ACCEPTED.match(text) else None
    return None


class _IdSource:
    """New correlation ids: random version 4 UUIDs in their text form.

    An id marks a request in logs and answers; it needs to be unique, not secret. So the
    randomness is a generator seeded once per process from the operating system (and
    again in a forked child, which would otherwise repeat its parent's ids), instead of
    `uuid.uuid4`'s system call per request.
    """

    def __init__(self) -> None:
        self._random = random.Random()  # noqa: S311 - ids, not secrets (see above)
        os.register_at_fork(after_in_child=self._random.seed)

    def new(self) -> str:
        """A new id, spelt as `str(uuid.uuid4())` spells one."""
        bits = self._random.getrandbits(_UUID_BITS)
        text = f"{bits & _V4_CLEAR | _V4_SET:032x}"
        return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


_UUID_BITS = 128
# The version (4) and variant (RFC 4122) bits of a version 4 UUID, as `uuid.UUID` sets them.
_V4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_V4_SET = (4 << 76) | (0x8000 << 48)
_new_ids = _IdSource()


class UnreadAnswered(Protocol):
    """Logs and counts a request the server answered without reading it.

    The connection guard answers such a request itself (``400 malformed_request``,
    ``431 headers_too_large``): the application never sees it. `log_unread` writes its
    line; `CorrelatedApp.unread_answered` also counts it as the application counts
    every request.
    """

    def __call__(
        self, *, method: str | None, status: int, seconds: float, correlation_id: str
    ) -> None:
        """Log (and count) one request answered unread.

        Args:
            method: its method, when the parser read it (else None: logged as
                ``(unread)``).
            status: the answer's status (400 or 431).
            seconds: from the request's first byte, or from the end of the answer
                before it on the connection, to its answer.
            correlation_id: the id in the answer's ``X-Correlation-Id``.
        """


def log_unread(*, method: str | None, status: int, seconds: float, correlation_id: str) -> None:
    """Write the request log line of a request answered unread (counted nowhere).

    For a server whose application is not a `CorrelatedApp`; see `UnreadAnswered`.

    Args:
        method: its method, when the parser read it.
        status: the answer's status.
        seconds: from its first byte to its answer.
        correlation_id: the answer's correlation id.
    """
    _unread(None, method, status, seconds, correlation_id)


def _unread(
    answered: Callable[[Scope, Exchange, float], None] | None,
    method: str | None,
    status: int,
    seconds: float,
    correlation_id: str,
) -> None:
    """Count (through `answered`) and log a request answered unread, as `_serve_http` does."""
    read = method or UNREAD
    tokens = structlog.contextvars.bind_contextvars(correlation_id=correlation_id)
    try:
        try:
            if answered is not None:
                exchange = Exchange(correlation_id, time.perf_counter() - seconds)
                exchange.status = status
                scope = {"type": "http", "method": read, "path_template": UNREAD}
                answered(cast("Scope", scope), exchange, seconds)
        finally:
            _request_log.write(
                method=read, route=UNREAD, status=status, duration_ms=round(seconds * _MS_PER_S, 3)
            )
    finally:
        structlog.contextvars.reset_contextvars(**tokens)


#: Scope key set on the GET that answers a HEAD (`CorrelatedApp._head`).
_HEAD_KEY = "turnkeeper.head"


def answers_head(scope: Scope | dict[str, Any]) -> bool:
    """Whether the request runs as the GET of a HEAD (its content is never sent).

    A route whose GET changes something (the agent feed delivers) checks this, so that
    its HEAD stays safe (RFC 9110) and answers the head without the change.

    Args:
        scope: the ASGI scope of the request.

    Returns:
        True for the GET that answers a HEAD.
    """
    return bool(scope.get(_HEAD_KEY))


def correlation_id_of(scope: Scope | dict[str, Any]) -> str:
    """The correlation id of an exchange, fixed on first use.

    Args:
        scope: the ASGI scope of the request.

    Returns:
        The client's ``X-Correlation-Id`` when acceptable, else a new UUID.
    """
    state = cast("dict[str, Any]", scope).setdefault("state", {})
    found = state.get(_STATE_KEY)
    if isinstance(found, str):
        return found
    chosen = _client_id(cast("Scope", scope)) or _new_ids.new()
    state[_STATE_KEY] = chosen
    return chosen


_ALLOW = b"allow"
#: What the application reads once a HEAD's head is sent: the exchange is over.
_DISCONNECT: ReceiveMessage = {"type": "http.disconnect"}


def allowed_methods(methods: Iterable[str]) -> str:
    """The ``Allow`` value of a route's methods, with HEAD wherever GET is (`_head`).

    Args:
        methods: the methods the route's handlers have.

    Returns:
        The methods, sorted, comma-separated.
    """
    named = set(methods)
    if "GET" in named:
        named.add("HEAD")
    return ", ".join(sorted(named))


def _allow_of(routes: Sequence[BaseRoute], template: str | None) -> bytes | None:
    """The ``Allow`` value of the HTTP route with this path template, if one has it."""
    for route in routes:
        if isinstance(route, HTTPRoute) and route.path_format == template:
            return allowed_methods(route.methods).encode("latin-1")
    return None


class Exchange:
    """What the wrapper knows of one HTTP exchange, for the hooks of a subclass.

    Args:
        correlation_id: the exchange's correlation id.
        started: `time.perf_counter` at its start.
    """

    __slots__ = ("correlation_id", "started", "status")

    def __init__(self, correlation_id: str, started: float) -> None:
        self.correlation_id = correlation_id
        self.started = started
        #: The answer's status once it started (500 until then).
        self.status = 500


#: The ASGI application that answers a request a `FastPath` hands back (Litestar).
Fallback = Callable[[Scope, Receive, Send], Awaitable[None]]
#: Wraps the send of an exchange whose answer a part of Litestar gives in a shape of its
#: own (`CorrelatedApp.send_filters`).
SendFilter = Callable[[Scope, Send], Send]


class FastPath(Protocol):
    """A route served without Litestar's request pipeline (ADR 0032).

    Its exchanges are correlated, logged, counted and traced like every other one.
    """

    def claims(self, scope: Scope) -> bool:
        """Whether the exchange is one of the route's (else Litestar serves it)."""
        ...

    async def serve(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        fallback: Fallback,
    ) -> None:
        """Answer a claimed exchange, or hand it to `fallback` (Litestar) unanswered."""
        ...


class CorrelatedApp(Litestar):
    """A Litestar application that correlates and logs every HTTP exchange.

    A subclass observes the exchange through two hooks instead of a second wrapper (one
    closure, one id lookup and one clock pair per request): `_handle_http` runs the
    application, `_answered` learns the outcome.
    """

    #: The route served without Litestar's pipeline, when one is set (`create_app`).
    fast_path: FastPath | None = None
    #: Send wrappers by path prefix (`create_app` sets them).
    send_filters: tuple[tuple[str, SendFilter], ...] = ()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Serve one ASGI connection.

        Args:
            scope: the ASGI scope.
            receive: the ASGI receive callable.
            send: the ASGI send callable.
        """
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        await self._serve_http(scope, receive, send)

    async def _handle_http(
        self, scope: Scope, receive: Receive, send: Send, exchange: Exchange
    ) -> None:
        """Run the application for one exchange (a subclass wraps it in a span).

        Args:
            scope: the ASGI scope.
            receive: the ASGI receive callable.
            send: the ASGI send callable (it records the status into `exchange`).
            exchange: the exchange.
        """
        fast = self.fast_path
        if fast is not None and fast.claims(scope):
            await fast.serve(scope, receive, send, self._litestar)
            return
        method = scope.get("method")
        if method == "OPTIONS":
            send = self._allowing(scope, send)
        for prefix, wrap in self.send_filters:
            if scope["path"].startswith(prefix):
                send = wrap(scope, send)
        if method == "HEAD":
            await self._head(scope, receive, send)
            return
        await Litestar.__call__(self, scope, receive, send)

    async def _head(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer HEAD as the GET of the same request, without its content (RFC 9110).

        Litestar routes GET only, so the request runs as a GET on a copy of the scope;
        the server's scope keeps HEAD, so uvicorn writes no content (it knows the
        method). The head ends the exchange at once: the content is never sent, and the
        application is told the client left, so that an event stream closes instead of
        waiting for its first event.
        """
        inner = cast("Scope", {**scope, "method": "GET", _HEAD_KEY: True})
        answered = asyncio.Event()

        async def send_head(message: Message) -> None:
            if answered.is_set() or message["type"] != "http.response.start":
                return
            await send(message)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            answered.set()

        async def receive_head() -> ReceiveMessage:
            if answered.is_set():
                return _DISCONNECT
            received = asyncio.ensure_future(receive())
            head_done = asyncio.ensure_future(answered.wait())
            done, _pending = await asyncio.wait(
                {received, head_done}, return_when=asyncio.FIRST_COMPLETED
            )
            if received in done:
                head_done.cancel()
                return received.result()
            received.cancel()
            return _DISCONNECT

        try:
            await Litestar.__call__(self, inner, receive_head, send_head)
        finally:
            template = inner.get("path_template")
            if template is not None:
                scope["path_template"] = template

    def _allowing(self, scope: Scope, send: Send) -> Send:
        """`send` with the ``Allow`` of an OPTIONS answer naming every method of its path.

        Litestar's OPTIONS handler is made with a path's first handler and keeps naming
        only that handler's methods once other handlers join the path (its 405 answers
        name them all), so the answer's ``Allow`` is taken from the route it matched.
        """

        async def send_allowing(message: Message) -> None:
            if message["type"] == "http.response.start":
                allow = _allow_of(self.routes, scope.get("path_template"))
                if allow is not None:
                    headers = [h for h in message.get("headers", ()) if h[0].lower() != _ALLOW]
                    headers.append((_ALLOW, allow))
                    message = {**message, "headers": headers}
            await send(message)

        return send_allowing

    async def _litestar(self, scope: Scope, receive: Receive, send: Send) -> None:
        await Litestar.__call__(self, scope, receive, send)

    def _answered(self, scope: Scope, exchange: Exchange, seconds: float) -> None:
        """Learn the outcome of one exchange, before its log line (a subclass counts it).

        Args:
            scope: the ASGI scope (``path_template`` set once a route matched; `UNREAD`
                for a request the server answered unread).
            exchange: the exchange, its status final.
            seconds: its duration.
        """

    def unread_answered(
        self, *, method: str | None, status: int, seconds: float, correlation_id: str
    ) -> None:
        """Count and log a request the server answered without reading it (`UnreadAnswered`).

        The connection guard of ``turnkeeper serve`` calls it: the request never reached
        the application, yet it is learnt (`_answered`, so counted by route `UNREAD`)
        and logged with route `UNREAD` like every other request.

        Args:
            method: its method, when the parser read it (else logged as `UNREAD`).
            status: the answer's status (400 or 431).
            seconds: from the request's first byte to its answer.
            correlation_id: the answer's correlation id.
        """
        _unread(self._answered, method, status, seconds, correlation_id)

    async def _serve_http(self, scope: Scope, receive: Receive, send: Send) -> None:
        correlation_id = correlation_id_of(scope)
        exchange = Exchange(correlation_id, time.perf_counter())
        header = (_HEADER_KEY, correlation_id.encode("latin-1"))

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                exchange.status = message["status"]
                headers = [h for h in message.get("headers", ()) if h[0].lower() != _HEADER_KEY]
                headers.append(header)
                message = {**message, "headers": headers}
            await send(message)

        tokens = structlog.contextvars.bind_contextvars(correlation_id=correlation_id)
        try:
            await self._handle_http(scope, receive, send_with_id, exchange)
        finally:
            try:
                seconds = time.perf_counter() - exchange.started
                if scope.get(UNREADABLE_BODY):
                    exchange.status = UNREADABLE_STATUS
                try:
                    self._answered(scope, exchange, seconds)
                finally:
                    _request_log.write(
                        method=str(scope.get("method", "")),
                        route=scope.get("path_template") or "(unmatched)",
                        status=exchange.status,
                        duration_ms=round(seconds * _MS_PER_S, 3),
                    )
            finally:
                structlog.contextvars.reset_contextvars(**tokens)
