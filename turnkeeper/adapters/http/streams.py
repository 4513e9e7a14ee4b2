"""Event streams (API.md, Live delivery): ``text/event-stream`` over the live delivery.

``GET /v1/events/stream`` and ``GET /v1/agent/events/stream`` answer Server-Sent Events:
each event is ``id: <seq>``, ``event: <type>`` and ``data: <Event or AgentEvent JSON>``
(the very documents of the page routes), and an idle stream sends the comment
``: heartbeat`` every ``stream.heartbeat_seconds``. The cursor is the ``Last-Event-ID``
request header when present (a reconnecting EventSource sends it), else ``?after=``,
else the page route's default (0 for the shared feed, the acknowledged position for
the agent feed).

Everything that can fail is checked before the answer starts, so it fails as a
problem+json: the cursor, the caller's kind, ``stream.max_per_principal`` (429
rate_limited). Once streaming, a failed read (the database went away) ends the
stream; the client reconnects with ``Last-Event-ID`` and loses nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any, TypeVar

import msgspec
from litestar import Request, Router, get
from litestar.di import NamedDependency
from litestar.openapi.spec import OpenAPI, OpenAPIMediaType, OpenAPIType, Operation, Schema
from litestar.params import HeaderParameter, QueryParameter
from litestar.response import ServerSentEvent, ServerSentEventMessage
from litestar.response.base import ASGIResponse
from litestar.types import Receive, Scope, Send

from turnkeeper.adapters.http.answers import Event
from turnkeeper.adapters.http.correlation import answers_head
from turnkeeper.adapters.http.dependencies import agent_route, bearer_token, v1_router
from turnkeeper.adapters.http.openapi_problems import problems
from turnkeeper.adapters.http.query_guard import INTEGER
from turnkeeper.adapters.http.run_answers import AgentEvent
from turnkeeper.application.logs import get_logger
from turnkeeper.application.ports.audit import AuditAction
from turnkeeper.application.services.conversation import EventPage
from turnkeeper.application.services.identity import BearerToken
from turnkeeper.application.services.live import LiveDelivery
from turnkeeper.application.services.live_stream import Heartbeat, LiveStream
from turnkeeper.application.services.runs import AgentEventPage
from turnkeeper.domain.errors import DomainError, FieldError, ValidationFailed
from turnkeeper.domain.events import MAX_SEQ
from turnkeeper.domain.world import Principal

#: The request header of a reconnecting EventSource.
LAST_EVENT_ID = "Last-Event-ID"
#: The media type of the answers.
EVENT_STREAM = "text/event-stream"
#: The comment of a heartbeat.
HEARTBEAT_COMMENT = "heartbeat"
#: The paths of the stream routes below /v1 (for the OpenAPI document and the log).
SHARED_STREAM_PATH = "/v1/events/stream"
AGENT_STREAM_PATH = "/v1/agent/events/stream"

_log = get_logger("turnkeeper.http.streams")
_encoder = msgspec.json.Encoder()
#: Digits of the largest seq: a longer whole number is out of range without reading it.
_SEQ_DIGITS = len(str(MAX_SEQ))
_PageT = TypeVar("_PageT", EventPage, AgentEventPage)


def stream_cursor(last_event_id: str | None, after: int | None) -> int | None:
    """The cursor of a stream request: ``Last-Event-ID`` wins over ``?after=``.

    Args:
        last_event_id: the header, None when absent.
        after: the query parameter, None when absent.

    Returns:
        The cursor, or None for the feed's default.

    Raises:
        ValidationFailed: ``/Last-Event-ID`` invalid_type for a header that is not a
            whole number, out_of_range for a negative one or one beyond the largest
            seq (`MAX_SEQ`); ``/after`` out_of_range.
    """
    if last_event_id is not None and last_event_id.strip():
        text = last_event_id.strip()
        if not INTEGER.fullmatch(text):
            raise ValidationFailed([FieldError(pointer=f"/{LAST_EVENT_ID}", code="invalid_type")])
        if len(text.lstrip("-")) > _SEQ_DIGITS or not 0 <= int(text) <= MAX_SEQ:
            raise ValidationFailed([FieldError(pointer=f"/{LAST_EVENT_ID}", code="out_of_range")])
        return int(text)
    if after is not None and after < 0:
        raise ValidationFailed([FieldError(pointer="/after", code="out_of_range")])
    return after


def refuse_repeated_cursor(request: Request[Any, Any, Any]) -> None:
    """Refuse a ``Last-Event-ID`` given twice, as a query parameter given twice is.

    Which of two cursors the client meant cannot be known; taking one (or both joined,
    which is no number) would resume from a place it may not have asked for.

    Args:
        request: the stream request.

    Raises:
        ValidationFailed: ``/Last-Event-ID`` duplicate_member.
    """
    if len(request.headers.getall(LAST_EVENT_ID, [])) > 1:
        raise ValidationFailed([FieldError(pointer=f"/{LAST_EVENT_ID}", code="duplicate_member")])


def _event_message(answer: Event | AgentEvent) -> ServerSentEventMessage:
    data = _encoder.encode(answer).decode("utf-8")
    return ServerSentEventMessage(data=data, event=str(answer.type), id=answer.seq)


def _shared_messages(page: EventPage) -> list[ServerSentEventMessage]:
    return [_event_message(Event.of(event)) for event in page.events]


def _agent_messages(page: AgentEventPage) -> list[ServerSentEventMessage]:
    return [_event_message(AgentEvent.delivered(d)) for d in page.deliveries]


class _ClosingAnswer(ASGIResponse):
    """An answer that runs `close` once it is done, however it ended.

    Args:
        answer: the answer to send.
        close: what to run after it (it must be idempotent and must not wait).
    """

    __slots__ = ("_answer", "_close")

    def __init__(self, answer: ASGIResponse, close: Callable[[], Awaitable[None]]) -> None:
        # The wrapper's own members (status, headers, body) are never sent: only
        # `__call__` is, and it sends `answer`.
        super().__init__()
        self._answer = answer
        self._close = close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._answer(scope, receive, send)
        finally:
            await self._close()


class _LiveEvents(ServerSentEvent):
    """The SSE answer of an open stream, which frees the stream's place however it ends.

    The messages' generator closes the stream when it ends, fails or is cancelled. But a
    client gone before the answer's first message leaves it unstarted (Litestar cancels
    the body's task before it runs, and an unstarted generator runs no ``finally``), and
    a send that raises leaves it suspended until the garbage collector finds it. So the
    answer closes the stream itself when it is done (`LiveStream.aclose` is idempotent).

    Args:
        stream: the open stream.
        encode: the SSE messages of one of its pages.
    """

    __slots__ = ("_close",)

    def __init__(
        self, stream: LiveStream[_PageT], encode: Callable[[_PageT], list[ServerSentEventMessage]]
    ) -> None:
        super().__init__(_messages(stream, encode))
        self._close = stream.aclose

    def to_asgi_response(self, *args: Any, **kwargs: Any) -> ASGIResponse:
        """Litestar's streaming answer, wrapped to close the stream once it is done."""
        return _ClosingAnswer(super().to_asgi_response(*args, **kwargs), self._close)


async def _messages(
    stream: LiveStream[_PageT],
    encode: Callable[[_PageT], list[ServerSentEventMessage]],
) -> AsyncIterator[ServerSentEventMessage]:
    """The SSE messages of a stream; the stream is closed however this ends."""
    try:
        async for item in stream:
            if isinstance(item, Heartbeat):
                yield ServerSentEventMessage(data=None, comment=HEARTBEAT_COMMENT)
                continue
            for message in encode(item):
                yield message
    except DomainError as exc:
        # The answer has started: a problem cannot be sent any more. The client resumes
        # with Last-Event-ID once the server can read again.
        _log.warning("event_stream_read_failed", code=exc.code)
    finally:
        await stream.aclose()


def _bearer(request: Request[Any, Any, Any]) -> BearerToken | None:
    """The token the caller was resolved from: its stream ends once it is revoked."""
    token = bearer_token(request)
    return None if token is None else BearerToken.of(token)


_CURSOR_DOC = "cursor; the Last-Event-ID header wins"
_HEADER_DOC = "resume after this seq (sent by a reconnecting EventSource)"


@get("/events/stream", responses=problems("stream_limit"), media_type=EVENT_STREAM)
async def stream_events(
    request: Request[Any, Any, Any],
    principal: NamedDependency[Principal],
    live: NamedDependency[LiveDelivery],
    after: Annotated[int | None, QueryParameter(description=_CURSOR_DOC, le=MAX_SEQ)] = None,
    last_event_id: Annotated[
        str | None, HeaderParameter(name=LAST_EVENT_ID, description=_HEADER_DOC)
    ] = None,
) -> ServerSentEvent:
    """The shared events the caller may read, as they are committed."""
    refuse_repeated_cursor(request)
    cursor = stream_cursor(last_event_id, after)
    stream = await live.open_events(principal, after=cursor or 0, bearer=_bearer(request))
    return _LiveEvents(stream, _shared_messages)


@get(
    "/agent/events/stream",
    responses=problems("agents_only", "stream_limit"),
    media_type=EVENT_STREAM,
    opt=agent_route(AuditAction.AGENT_EVENTS_CONSUME),
)
async def stream_agent_events(
    request: Request[Any, Any, Any],
    principal: NamedDependency[Principal],
    live: NamedDependency[LiveDelivery],
    after: Annotated[int | None, QueryParameter(description=_CURSOR_DOC, le=MAX_SEQ)] = None,
    last_event_id: Annotated[
        str | None, HeaderParameter(name=LAST_EVENT_ID, description=_HEADER_DOC)
    ] = None,
) -> ServerSentEvent:
    """The agent's personal events as they are committed, a fresh token per delivery.

    A HEAD opens no stream and delivers nothing: the request's checks, then the head.
    """
    refuse_repeated_cursor(request)
    cursor = stream_cursor(last_event_id, after)
    if answers_head(request.scope):
        await live.check_agent_feed(principal, after=cursor)
        return ServerSentEvent(_no_messages())
    stream = await live.open_agent_events(principal, after=cursor, bearer=_bearer(request))
    return _LiveEvents(stream, _agent_messages)


async def _no_messages() -> AsyncIterator[ServerSentEventMessage]:
    """The messages of a HEAD's stream: none (its head alone is sent)."""
    nothing: tuple[ServerSentEventMessage, ...] = ()
    for message in nothing:
        yield message


def streams_router() -> Router:
    """The stream routes, under ``/v1`` (`v1_router`).

    Returns:
        A new router (one per application).
    """
    return v1_router("live delivery", [stream_events, stream_agent_events])


_FRAMING = (
    "Server-Sent Events: per event `id: <seq>`, `event: <type>`, `data: <{kind} JSON>`; "
    "the comment `: heartbeat` every stream.heartbeat_seconds while idle."
)


def document_streams(openapi: OpenAPI) -> OpenAPI:
    """Describe the 200 answers of the stream routes (Litestar writes no schema for them).

    Each says ``text/event-stream`` with a string schema, and names the JSON document of
    every ``data:`` line (``x-event-schema``: Event or AgentEvent).

    Args:
        openapi: the generated document; changed in place.

    Returns:
        The same document.
    """
    for path, kind in ((SHARED_STREAM_PATH, "Event"), (AGENT_STREAM_PATH, "AgentEvent")):
        item = (openapi.paths or {}).get(path)
        operation = getattr(item, "get", None)
        if not isinstance(operation, Operation) or operation.responses is None:
            continue
        ok: Any = operation.responses.get("200")
        if ok is None:
            continue
        ok.description = _FRAMING.format(kind=kind)
        ok.content = {
            EVENT_STREAM: OpenAPIMediaType(
                schema=Schema(
                    type=OpenAPIType.STRING,
                    description=f"data: lines hold #/components/schemas/{kind}",
                )
            )
        }
    return openapi


__all__ = [
    "AGENT_STREAM_PATH",
    "EVENT_STREAM",
    "LAST_EVENT_ID",
    "SHARED_STREAM_PATH",
    "document_streams",
    "stream_agent_events",
    "stream_cursor",
    "stream_events",
    "streams_router",
]
