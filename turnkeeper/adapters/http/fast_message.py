"""``POST /v1/threads/{thread_id}/messages`` served without Litestar's request pipeline.

The message route is the hottest request of the contract, and Litestar's pipeline around
its handler (routing, the exception middleware, a `Request` object, the header model,
the ``before_request`` body guard, the signature model and its dependencies, the
`Response` and its encoding) cost more server CPU than the handler's own work outside
the use case (ADR 0032; docs/performance.md, "The message route's own path").
`MessageFastPath` serves the request that needs none of that machinery to be answered:

- it claims only ``POST`` on exactly ``/v1/threads/<canonical uuid>/messages`` (no
  ``root_path``); every other request goes to Litestar unchanged;
- it answers only a request that passes every check the Litestar route makes, in the
  same order of precedence: one ``Authorization: Bearer`` header, a JSON media type (or
  none), a body within ``http.max_body_bytes`` that is within ``http.max_json_depth``,
  holds no duplicated member and no U+0000, and decodes strictly into `MessageCreate`.
  A request that fails any of them (or repeats one of those headers) is handed to
  Litestar's route with its body replayed, which answers it as it always has;
- what the use case raises is answered by the application's exception handler and
  ``after_exception`` hooks, exactly as Litestar's exception middleware would;
- the answer is encoded by Litestar's own encoder with the route's type encoders, with
  the status and headers of the Litestar route's `Response`.

The exchange's wrapper (`turnkeeper.adapters.http.correlation.CorrelatedApp`: the
correlation id, the request log line, the metrics and the span) wraps both paths the
same way, and the path template in the scope is the Litestar route's, so the log line
and the metrics name the route alike.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, cast

import msgspec
from litestar import Litestar
from litestar.handlers import HTTPRouteHandler
from litestar.routes import HTTPRoute
from litestar.serialization import encode_json, get_serializer
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED
from litestar.types import HTTPScope, Receive, ReceiveMessage, Scope, Send

from turnkeeper.adapters.http.answers import MessageCreated
from turnkeeper.adapters.http.body_guard import is_json_media_type, nul_member, too_deep
from turnkeeper.adapters.http.conversation import REPLAY_HEADER
from turnkeeper.adapters.http.decoding import duplicate_member
from turnkeeper.adapters.http.dependencies import mark_unresolved, token_of_header
from turnkeeper.adapters.http.problems import handle_exception
from turnkeeper.adapters.http.requests import MessageCreate, given
from turnkeeper.application.services.conversation import ConversationService
from turnkeeper.application.services.identity import BearerToken
from turnkeeper.application.settings import Settings

#: The route's path, as the ``/v1`` router and the conversation router declare it.
ROUTE_PATH = "/v1/threads/{thread_id:str}/messages"

_PREFIX = "/v1/threads/"
_SUFFIX = "/messages"
_UUID_TEXT = 36
_PATH_LENGTH = len(_PREFIX) + _UUID_TEXT + len(_SUFFIX)
_AUTHORIZATION = b"authorization"
_CONTENT_TYPE = b"content-type"
_CONTENT_LENGTH = b"content-length"
_JSON_TYPE = (b"content-type", b"application/json")
_REPLAY = (REPLAY_HEADER.lower().encode("latin-1"), b"true")

#: The ASGI application that answers a request the fast path hands back (Litestar).
Fallback = Callable[[Scope, Receive, Send], Awaitable[None]]


def _route(app: Litestar) -> tuple[HTTPRouteHandler, str]:
    """The route's POST handler and its path template (``path_template`` in a scope)."""
    for route in app.routes:
        if isinstance(route, HTTPRoute) and route.path == ROUTE_PATH:
            handler, _model = route.route_handler_map["POST"]
            return handler, route.path_format
    raise LookupError(f"no POST route {ROUTE_PATH}")


class MessageFastPath:
    """Serves the message route's plain requests; hands every other one to Litestar.

    Args:
        app: the application, its routes registered (for the route's handler, its
            path template and its type encoders, and the ``after_exception`` hooks).
        conversation: the service the route calls.
        settings: for ``http.max_body_bytes`` and ``http.max_json_depth``.

    Raises:
        LookupError: the application has no such route.
    """

    def __init__(
        self, app: Litestar, conversation: ConversationService, settings: Settings
    ) -> None:
        self._app = app
        self._conversation = conversation
        self._max_body = settings.max_body_bytes
        self._max_depth = settings.max_json_depth
        self._handler, self._template = _route(app)
        self._serializer = get_serializer(self._handler.resolve_type_encoders())

    @staticmethod
    def claims(scope: Scope) -> bool:
        """Whether the exchange is a POST to the message route's exact path.

        Args:
            scope: the ASGI scope of an HTTP exchange.

        Returns:
            True when `serve` should take it.
        """
        http = cast("HTTPScope", scope)
        path = http["path"]
        return (
            http["method"] == "POST"
            and len(path) == _PATH_LENGTH
            and path.startswith(_PREFIX)
            and path.endswith(_SUFFIX)
            and not http.get("root_path")
        )

    async def serve(self, scope: Scope, receive: Receive, send: Send, fallback: Fallback) -> None:
        """Answer one claimed exchange, or hand it to `fallback` with its body replayed.

        Args:
            scope: the ASGI scope.
            receive: the ASGI receive callable.
            send: the ASGI send callable.
            fallback: Litestar, for every request the fast path does not answer.
        """
        thread_id = _thread_id(scope["path"])
        token, content_type, declared = _headers(scope)
        if (
            thread_id is None
            or token is None
            or content_type is _REPEATED
            or not is_json_media_type(content_type)
            or declared is _REPEATED
            or (declared is not None and _too_long(declared, self._max_body))
        ):
            await fallback(scope, receive, send)
            return
        read: list[ReceiveMessage] = []
        body = await self._body(receive, read)
        data = None if body is None else self._decoded(body)
        if data is None:
            await fallback(scope, _replay(read, receive), send)
            return
        await self._answer(scope, receive, send, thread_id, BearerToken.of(token), data)

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

    def _decoded(self, body: bytes) -> MessageCreate | None:
        """The body as the route's struct, or None when any body check would refuse it."""
        if (
            too_deep(body, self._max_depth) is not None
            or duplicate_member(body) is not None
            or nul_member(body) is not None
        ):
            return None
        try:
            return msgspec.json.decode(body, type=MessageCreate, strict=True)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            # loose_member and Litestar's decoder answer it on the route.
            return None

    async def _answer(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        thread_id: uuid.UUID,
        bearer: BearerToken,
        data: MessageCreate,
    ) -> None:
        # What Litestar's routing and the route's dependencies leave in the scope.
        scope["app"] = scope["litestar_app"] = self._app
        scope["route_handler"] = self._handler
        scope["path_template"] = self._template
        scope["path_params"] = {"thread_id": str(thread_id)}
        mark_unresolved(scope, bearer)
        try:
            posted = await self._conversation.create_message(
                bearer, thread_id, data.draft(), kind=given(data.kind)
            )
        except Exception as exc:
            await self._refuse(scope, receive, send, exc)
            return
        body = encode_json(MessageCreated.posted(posted), self._serializer)
        headers = [_JSON_TYPE, (_CONTENT_LENGTH, str(len(body)).encode("latin-1"))]
        if posted.replayed:
            headers.insert(0, _REPLAY)
        await send(
            {
                "type": "http.response.start",
                "status": HTTP_200_OK if posted.replayed else HTTP_201_CREATED,
                "headers": headers,
            }
        )
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, exc: Exception) -> None:
        """Answer what the use case raised as Litestar's exception middleware does."""
        for hook in self._app.after_exception:
            await hook(exc, scope)
        request = self._app.request_class(scope=scope, receive=receive, send=send)
        response = handle_exception(request, exc)
        asgi = response.to_asgi_response(
            app=None, request=request, type_encoders=self._handler.resolve_type_encoders()
        )
        await asgi(scope, receive, send)


#: A header given more than once (the fast path leaves such a request to Litestar).
_REPEATED: Any = object()


def _thread_id(path: str) -> uuid.UUID | None:
    text = path[len(_PREFIX) : len(_PREFIX) + _UUID_TEXT]
    try:
        parsed = uuid.UUID(text)
    except ValueError:
        return None
    # Other spellings Litestar may accept are left to it.
    return parsed if str(parsed) == text else None


def _headers(scope: Scope) -> tuple[str | None, Any, Any]:
    """The bearer token, the content type and the declared length (or `_REPEATED`)."""
    authorization: Any = None
    content_type: Any = None
    declared: Any = None
    for raw_name, value in scope["headers"]:
        name = raw_name.lower()
        if name == _AUTHORIZATION:
            authorization = _REPEATED if authorization is not None else value
        elif name == _CONTENT_TYPE:
            content_type = _REPEATED if content_type is not None else value.decode("latin-1")
        elif name == _CONTENT_LENGTH:
            declared = _REPEATED if declared is not None else value
    if authorization is None or authorization is _REPEATED:
        return None, content_type, declared
    return token_of_header(authorization.decode("latin-1")), content_type, declared


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


__all__ = ["ROUTE_PATH", "Fallback", "MessageFastPath"]
