"""Routes of people and agents (API.md, Conversation, and GET /v1/me): thin controllers.

A create that replays an earlier identical request answers 200 with
``Idempotent-Replay: true`` instead of 201, and publishes nothing again.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, TypeVar

from litestar import Request, Response, Router, get, post
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromPath, JSONBody, QueryParameter
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED

from turnkeeper.adapters.http.answers import (
    EventPage,
    Me,
    MessageCreated,
    MessagePage,
    Thread,
    ThreadCreated,
)
from turnkeeper.adapters.http.dependencies import bearer_token, v1_router
from turnkeeper.adapters.http.disconnect import until_client_leaves
from turnkeeper.adapters.http.fast_path import FastAnswer, FastRoute
from turnkeeper.adapters.http.openapi_problems import problems
from turnkeeper.adapters.http.requests import MessageCreate, ThreadCreate, given
from turnkeeper.application.services.conversation import ConversationService
from turnkeeper.application.services.identity import BearerToken
from turnkeeper.application.services.live import LiveDelivery
from turnkeeper.domain.events import MAX_SEQ
from turnkeeper.domain.world import Principal

T = TypeVar("T")

#: Header marking an answer that replays an earlier identical create.
REPLAY_HEADER = "Idempotent-Replay"
#: The message route's path under the application (the ``/v1`` router and this one).
MESSAGES_PATH = "/v1/threads/{thread_id:str}/messages"


_REPLAYED = ((REPLAY_HEADER.lower().encode("latin-1"), b"true"),)


def _created(content: T, replayed: bool) -> Response[T]:
    if replayed:
        return Response(content, status_code=HTTP_200_OK, headers={REPLAY_HEADER: "true"})
    return Response(content, status_code=HTTP_201_CREATED)


def _fast_created(content: object, replayed: bool) -> FastAnswer:
    # The answer of `_created`, for the fast path (ADR 0032).
    if replayed:
        return FastAnswer(content, HTTP_200_OK, _REPLAYED)
    return FastAnswer(content, HTTP_201_CREATED)


def _replay_spec(kind: type[object]) -> dict[int, ResponseSpec]:
    return {
        HTTP_200_OK: ResponseSpec(
            data_container=kind,
            description=f"replay of an earlier identical request ({REPLAY_HEADER}: true)",
        )
    }


@get("/me", responses=problems())
async def get_me(principal: NamedDependency[Principal]) -> Me:
    """The caller: ``{id, kind, handle}``."""
    return Me.of(principal)


@post(
    "/channels/{channel_id:str}/threads",
    status_code=HTTP_201_CREATED,
    responses={
        **problems(
            "first_content_required",
            "level_insufficient",
            "channel_archived",
            "idempotency_conflict",
            "message_rate_limited",
        ),
        **_replay_spec(ThreadCreated),
    },
)
async def create_thread(
    channel_id: FromPath[uuid.UUID],
    data: JSONBody[ThreadCreate],
    principal: NamedDependency[Principal],
    conversation: NamedDependency[ConversationService],
) -> Response[ThreadCreated]:
    """Create a thread with its first message."""
    created = await conversation.create_thread(
        principal,
        channel_id,
        title=given(data.title),
        first_message=data.first_message.draft(),
        kind=given(data.first_message.kind),
    )
    return _created(ThreadCreated.of(created), created.replayed)


@post(
    "/threads/{thread_id:str}/messages",
    status_code=HTTP_201_CREATED,
    responses={
        **problems(
            "content_required",
            "run_mismatch",
            "level_insufficient",
            "channel_archived",
            "idempotency_conflict",
            "run_not_active",
            "message_rate_limited",
        ),
        **_replay_spec(MessageCreated),
    },
)
async def create_message(
    thread_id: FromPath[uuid.UUID],
    data: JSONBody[MessageCreate],
    bearer: NamedDependency[BearerToken],
    conversation: NamedDependency[ConversationService],
) -> Response[MessageCreated]:
    """Write a message into a thread; the answer says what became of it (``trigger``)."""
    # The token is resolved with the post's facts, in one round trip (ADR 0026).
    posted = await conversation.create_message(
        bearer, thread_id, data.draft(), kind=given(data.kind)
    )
    return _created(MessageCreated.posted(posted), posted.replayed)


def message_fast_route(conversation: ConversationService) -> FastRoute:
    """`create_message` for `turnkeeper.adapters.http.fast_path` (ADR 0032).

    Args:
        conversation: the service the route calls.

    Returns:
        The route, with the same call and answer as `create_message`.
    """

    async def call(
        bearer: BearerToken, thread_id: uuid.UUID | None, data: MessageCreate
    ) -> FastAnswer:
        assert thread_id is not None  # the path holds one
        posted = await conversation.create_message(
            bearer, thread_id, data.draft(), kind=given(data.kind)
        )
        return _fast_created(MessageCreated.posted(posted), posted.replayed)

    return FastRoute(path=MESSAGES_PATH, body=MessageCreate, call=call)


@get("/threads/{thread_id:str}", responses=problems())
async def get_thread(
    thread_id: FromPath[uuid.UUID],
    principal: NamedDependency[Principal],
    conversation: NamedDependency[ConversationService],
) -> Thread:
    """A thread the caller may read."""
    thread = await conversation.get_thread(principal, thread_id)
    return Thread.of(thread)


@get("/threads/{thread_id:str}/messages", responses=problems())
async def list_messages(
    thread_id: FromPath[uuid.UUID],
    principal: NamedDependency[Principal],
    conversation: NamedDependency[ConversationService],
    after_seq: Annotated[
        int, QueryParameter(description="messages after this seq", ge=0, le=MAX_SEQ)
    ] = 0,
    limit: Annotated[
        int | None, QueryParameter(description="page size, page.max_limit", ge=1)
    ] = None,
) -> MessagePage:
    """The caller's view of a thread's history after a seq.

    The fixed bounds of the query (``after_seq`` at least 0, ``limit`` at least 1) are
    checked with its types, so a thread id that is not a UUID answers them as a UUID that
    names nothing does (400 ``out_of_range``), not 404; ``page.max_limit`` is the
    service's.
    """
    page = await conversation.list_messages(principal, thread_id, after_seq=after_seq, limit=limit)
    return MessagePage.of(page)


@post(
    "/threads/{thread_id:str}/close",
    status_code=HTTP_200_OK,
    responses=problems("level_insufficient", "channel_archived"),
)
async def close_thread(
    thread_id: FromPath[uuid.UUID],
    principal: NamedDependency[Principal],
    conversation: NamedDependency[ConversationService],
) -> Thread:
    """Mark a thread done (a person with write on it, or the owner)."""
    return Thread.of(await conversation.close_thread(principal, thread_id))


@get("/events", responses=problems())
async def list_events(
    request: Request[Any, Any, Any],
    principal: NamedDependency[Principal],
    live: NamedDependency[LiveDelivery],
    after: Annotated[
        int, QueryParameter(description="cursor: next_after of a page", le=MAX_SEQ)
    ] = 0,
    limit: Annotated[int | None, QueryParameter(description="page size, page.max_limit")] = None,
    wait: Annotated[
        float | None,
        QueryParameter(
            description="long-poll: seconds to wait for one event, stream.max_wait_seconds"
        ),
    ] = None,
) -> EventPage:
    """The shared events after a cursor that the caller may read.

    A long poll ends as soon as its client disconnects (`until_client_leaves`), and
    answers 401 when its token is revoked while it waits.
    """
    token = bearer_token(request) if wait else None
    bearer = None if token is None else BearerToken.of(token)
    waited = live.wait_events(principal, after=after, limit=limit, wait=wait, bearer=bearer)
    page = await (until_client_leaves(waited, request.receive) if wait else waited)
    return EventPage.of(page)


def conversation_router() -> Router:
    """The conversation routes, under ``/v1`` (`v1_router`).

    Returns:
        A new router (one per application).
    """
    return v1_router(
        "conversation",
        [
            get_me,
            create_thread,
            create_message,
            get_thread,
            list_messages,
            close_thread,
            list_events,
        ],
    )
