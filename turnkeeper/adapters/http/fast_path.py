"""The hot bearer routes' plain requests served without Litestar's request pipeline.

``POST /v1/threads/{thread_id}/messages`` and ``POST /v1/agent/send`` are the hottest
requests of the contract, and Litestar's pipeline around their handlers (routing, the
exception middleware, a `Request` object, the header model, the ``before_request`` body
guard, the signature model and its dependencies, the `Response` and its encoding) cost
more server CPU than the handlers' own work outside the use cases (ADR 0032;
docs/performance.md, "The hot routes' own path"). `BearerPostFastPath` serves the
request of such a route that needs none of that machinery to be answered:

- it claims only ``POST`` on exactly a route's path (a path parameter spelt as a
  36-character id), without ``root_path``; every other request goes to Litestar
  unchanged;
- it answers only a request that passes every check the Litestar route makes: one
  ``Authorization: Bearer`` header, a JSON media type (or none), a body within
  ``http.max_body_bytes`` that is within ``http.max_json_depth``, holds no duplicated
  member and no U+0000, and decodes strictly into the route's body struct, with the
  path's id in its canonical spelling. A request that fails any of them (or repeats one
  of those headers) is handed to Litestar's route with its body replayed, which answers
  it as it always has;
- what the use case raises is answered by the application's exception handler and
  ``after_exception`` hooks, exactly as Litestar's exception middleware would;
- the answer is encoded by Litestar's own encoder with the route's type encoders, with
  the status and headers the Litestar handler gives it.

Each route's call and answer live beside its Litestar handler (`FastRoute`, in
`turnkeeper.adapters.http.conversation` and `turnkeeper.adapters.http.agent_send`). The
exchange's wrapper (`turnkeeper.adapters.http.correlation.CorrelatedApp`: the
correlation id, the request log line, the metrics and the span) wraps both paths the
same way, and the path template in the scope is the Litestar route's, so the log line
and the metrics name the route alike.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

import attrs
import msgspec
from litestar import Litestar
from litestar.handlers import HTTPRouteHandler
from litestar.routes import HTTPRoute
from litestar.serialization import encode_json, get_serializer
from litestar.types import HTTPScope, Receive, ReceiveMessage, Scope, Send, Serializer

from turnkeeper.adapters.http.body_guard import hostile_member, is_json_media_type
from turnkeeper.adapters.http.correlation import Fallback
from turnkeeper.adapters.http.dependencies import mark_reached, mark_unresolved, token_of_header
from turnkeeper.adapters.http.problems import handle_exception
from turnkeeper.application.services.identity import BearerToken
from turnkeeper.application.settings import Settings

_UUID_TEXT = 36
_AUTHORIZATION = b"authorization"
_CONTENT_TYPE = b"content-type"
_CONTENT_LENGTH = b"content-length"
_CONTENT_ENCODING = b"content-encoding"
_JSON_TYPE = (b"content-type", b"application/json")


@attrs.frozen
class FastAnswer:
    """What a route's call answers: the content, its status and its own headers.

    Attributes:
        content: the answer struct (encoded as the Litestar handler's would be).
        status: the HTTP status.
        headers: headers before ``content-type`` and ``content-length``, lower-case.
    """

    content: object
    status: int
    headers: tuple[tuple[bytes, bytes], ...] = ()


#: A route's use case: the unresolved token, the path's id (None for a route without
#: one) and the decoded body; what it raises is answered as a problem.
FastCall = Callable[[BearerToken, uuid.UUID | None, Any], Awaitable[FastAnswer]]


@attrs.frozen
class FastRoute:
    """A bearer POST route that `BearerPostFastPath` serves.

    Attributes:
        path: the route's path as the application declares it (``/v1/agent/send``;
            at most one parameter, ``{name:str}``, holding an id).
        body: the route's body struct.
        call: the route's use case and answer, as its Litestar handler makes them.
    """

    path: str
    body: type[Any]
    call: FastCall


@attrs.frozen
class _Served:
    """A route bound to the application: its handler, template, encoder and path parts."""

    route: FastRoute
    handler: HTTPRouteHandler
    template: str
    serializer: Serializer
    prefix: str
    suffix: str
    parameter: str | None
    #: The length of a matching path (with a parameter: its id spelt in 36 characters).
    length: int

    def matches(self, path: str) -> bool:
        if self.parameter is None:
            return path == self.prefix
        return (
            len(path) == self.length and path.startswith(self.prefix) and path.endswith(self.suffix)
        )


def _bind(app: Litestar, route: FastRoute) -> _Served:
    for declared in app.routes:
        if isinstance(declared, HTTPRoute) and declared.path == route.path:
            handler, _model = declared.route_handler_map["POST"]
            break
    else:
        raise LookupError(f"no POST route {route.path}")
    prefix, brace, rest = route.path.partition("{")
    parameter, suffix = None, ""
    if brace:
        name, _, suffix = rest.partition("}")
        parameter = name.partition(":")[0]
    return _Served(
        route=route,
        handler=handler,
        template=declared.path_format,
        serializer=get_serializer(handler.resolve_type_encoders()),
        prefix=prefix,
        suffix=suffix,
        parameter=parameter,
        length=len(prefix) + len(suffix) + (_UUID_TEXT if parameter else 0),
    )


class BearerPostFastPath:
    """Serves the plain requests of bearer POST routes; hands every other one to Litestar.

    Args:
        app: the application, its routes registered (for each route's handler, path
            template and type encoders, and the ``after_exception`` hooks).
        settings: for ``http.max_body_bytes`` and ``http.max_json_depth``.
        routes: the routes to serve.

    Raises:
        LookupError: the application declares no POST route at one of the paths.
    """

    def __init__(self, app: Litestar, settings: Settings, routes: Sequence[FastRoute]) -> None:
        self._app = app
        self._max_body = settings.max_body_bytes
        self._max_depth = settings.max_json_depth
        self._routes = tuple(_bind(app, route) for route in routes)

    def _served(self, scope: Scope) -> _Served | None:
        http = cast("HTTPScope", scope)
        # A query is Litestar's to refuse (these routes declare none: unknown_member).
        if http["method"] != "POST" or http.get("root_path") or http.get("query_string"):
            return None
        path = http["path"]
        for served in self._routes:
            if served.matches(path):
                return served
        return None

    def claims(self, scope: Scope) -> bool:
        """Whether the exchange is a POST to one of the routes' exact paths.

        Args:
            scope: the ASGI scope of an HTTP exchange.

        Returns:
            True when `serve` should take it.
        """
        return self._served(scope) is not None

    async def serve(self, scope: Scope, receive: Receive, send: Send, fallback: Fallback) -> None:
        """Answer one claimed exchange, or hand it to `fallback` with its body replayed.

        Args:
            scope: the ASGI scope.
            receive: the ASGI receive callable.
            send: the ASGI send callable.
            fallback: Litestar, for every request the fast path does not answer.
        """
        served = self._served(scope)
        if served is None:
            await fallback(scope, receive, send)
            return
        path: str = scope["path"]
        found = (
            None
            if served.parameter is None
            else _canonical_id(path[len(served.prefix) : len(served.prefix) + _UUID_TEXT])
        )
        heads = _headers(scope)
        if (
            heads is None
            or (served.parameter is not None and found is None)
            or not is_json_media_type(heads.content_type)
            or (heads.declared is not None and _too_long(heads.declared, self._max_body))
        ):
            await fallback(scope, receive, send)
            return
        read: list[ReceiveMessage] = []
        body = await self._body(receive, read)
        data = None if body is None else self._decoded(body, served.route.body)
        if data is None:
            await fallback(scope, _replay(read, receive), send)
            return
        # What Litestar's routing and the route's dependencies leave in the scope.
        scope["app"] = scope["litestar_app"] = self._app
        scope["route_handler"] = served.handler
        scope["path_template"] = served.template
        scope["path_params"] = {} if served.parameter is None else {served.parameter: str(found)}
        bearer = BearerToken.of(heads.token)
        mark_unresolved(scope, bearer)
        try:
            answer = await served.route.call(bearer, found, data)
        except Exception as exc:
            # The use case was called (and recorded what it refused): only a refusal
            # needs the mark, so an answered request does not pay for it.
            mark_reached(scope)
            await self._refuse(scope, receive, send, served, exc)
            return
        content = encode_json(answer.content, served.serializer)
        headers = [
            *answer.headers,
            _JSON_TYPE,
            (_CONTENT_LENGTH, str(len(content)).encode("latin-1")),
        ]
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        await send({"type": "http.response.body", "body": content, "more_body": False})

    async def _body(self, receive: Receive, read: list[ReceiveMessage]) -> bytes | None:
        """The whole body, or None when it is longer than allowed or the client left."""
        size = 0
        chunks: list[bytes] = []
        while True:
            message = await receive()
            read.append(message)
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._max_body:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _decoded(self, body: bytes, kind: type[Any]) -> Any:
        """The body as the route's struct, or None when any body check would refuse it."""
        if hostile_member(body, self._max_depth) is not None:
            return None
        try:
            return msgspec.json.decode(body, type=kind, strict=True)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            # The guard's loose_member and Litestar's decoder answer it on the route.
            return None

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, served: _Served, exc: Exception
    ) -> None:
        """Answer what the use case raised as Litestar's exception middleware does."""
        for hook in self._app.after_exception:
            await hook(exc, scope)
        request = self._app.request_class(scope=scope, receive=receive, send=send)
        response = handle_exception(request, exc)
        asgi = response.to_asgi_response(
            app=None, request=request, type_encoders=served.handler.resolve_type_encoders()
        )
        await asgi(scope, receive, send)


def _canonical_id(text: str) -> uuid.UUID | None:
    try:
        parsed = uuid.UUID(text)
    except ValueError:
        return None
    # Other spellings Litestar may accept are left to it.
    return parsed if str(parsed) == text else None


@attrs.frozen
class _Heads:
    """The headers the fast path reads: the bearer token, content type, declared length."""

    token: str
    content_type: str | None
    declared: bytes | None


def _headers(scope: Scope) -> _Heads | None:
    """The headers of a request the fast path may answer, or None to leave it to Litestar.

    Litestar answers a request without a bearer token, with one of these headers given
    twice (its guards refuse most such requests), or with a ``Content-Encoding`` (its body
    guard refuses every coding but ``identity``).
    """
    authorization: bytes | None = None
    content_type: str | None = None
    declared: bytes | None = None
    for raw_name, value in scope["headers"]:
        name = raw_name.lower()
        if name == _AUTHORIZATION:
            if authorization is not None:
                return None
            authorization = value
        elif name == _CONTENT_TYPE:
            if content_type is not None:
                return None
            content_type = value.decode("latin-1")
        elif name == _CONTENT_LENGTH:
            if declared is not None:
                return None
            declared = value
        elif name == _CONTENT_ENCODING:
            return None
    token = None if authorization is None else token_of_header(authorization.decode("latin-1"))
    if token is None:
        return None
    return _Heads(token, content_type, declared)


def _too_long(declared: bytes, limit: int) -> bool:
    """Whether a declared length exceeds the limit (or is no plain length at all)."""
    return not declared.isdigit() or int(declared) > limit


def _replay(read: list[ReceiveMessage], receive: Receive) -> Receive:
    """A receive that gives the messages read already, then the client's own."""
    pending = list(read)

    async def replayed() -> ReceiveMessage:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


__all__ = ["BearerPostFastPath", "FastAnswer", "FastCall", "FastRoute"]
