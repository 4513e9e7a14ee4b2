"""Routes of people and agents (API.md, Conversation, and GET /v1/me): thin controllers.

A create that replays an earlier identical request answers 200 with
``Idempotent-Replay: true`` instead of 201, and publishes nothing again.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

from litestar import Response, Router, get, post
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromPath, JSONBody, QueryParameter
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED

from turnkeeper.adapters.http.dependencies import parse_id
from turnkeeper.adapters.http.openapi import problems
from turnkeeper.adapters.http.schemas import (
    EventPage,
    Me,
    Message,
    MessageCreate,
    MessagePage,
    Thread,
    ThreadCreate,
    ThreadCreated,
    answer,
    given,
)
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.documents import (
    author_document,
    event_document,
    message_document,
    thread_document,
)
from turnkeeper.domain.messaging import MessageDraft
from turnkeeper.domain.world import Principal

T = TypeVar("T")

#: Header marking an answer that replays an earlier identical create.
REPLAY_HEADER = "Idempotent-Replay"


def _draft(body: MessageCreate) -> MessageDraft:
    restricted = given(body.restricted_to)
    return MessageDraft(
        client_msg_id=body.client_msg_id,
        content=body.content,
        mentions=tuple(given(body.mentions) or ()),
        reply_to_id=given(body.reply_to_id),
        restricted_to=tuple(restricted) if restricted is not None else None,
        run_id=given(body.run_id),
    )


def _created(content: T, replayed: bool) -> Response[T]:
    if replayed:
        return Response(content, status_code=HTTP_200_OK, headers={REPLAY_HEADER: "true"})
    return Response(content, status_code=HTTP_201_CREATED)


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
    return answer(author_document(principal), Me)


@post(
    "/channels/{channel_id:str}/threads",
    status_code=HTTP_201_CREATED,
    responses={**problems(403, 409, 429), **_replay_spec(ThreadCreated)},
)
async def create_thread(
    channel_id: FromPath[str],
    data: JSONBody[ThreadCreate],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> Response[ThreadCreated]:
    """Create a thread with its first message."""
    created = await services.conversation.create_thread(
        principal,
        parse_id(channel_id),
        title=given(data.title),
        first_message=_draft(data.first_message),
        kind=given(data.first_message.kind),
    )
    document = {
        "thread": thread_document(created.thread),
        "message": message_document(created.message, created.author),
    }
    return _created(answer(document, ThreadCreated), created.replayed)


@post(
    "/threads/{thread_id:str}/messages",
    status_code=HTTP_201_CREATED,
    responses={**problems(403, 409, 429), **_replay_spec(Message)},
)
async def create_message(
    thread_id: FromPath[str],
    data: JSONBody[MessageCreate],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> Response[Message]:
    """Write a message into a thread."""
    posted = await services.conversation.create_message(
        principal, parse_id(thread_id), _draft(data), kind=given(data.kind)
    )
    message = answer(message_document(posted.message, posted.author), Message)
    return _created(message, posted.replayed)


@get("/threads/{thread_id:str}", responses=problems())
async def get_thread(
    thread_id: FromPath[str],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> Thread:
    """A thread the caller may read."""
    thread = await services.conversation.get_thread(principal, parse_id(thread_id))
    return answer(thread_document(thread), Thread)


@get("/threads/{thread_id:str}/messages", responses=problems())
async def list_messages(
    thread_id: FromPath[str],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
    after_seq: Annotated[int, QueryParameter(description="messages after this seq")] = 0,
    limit: Annotated[int | None, QueryParameter(description="page size, page.max_limit")] = None,
) -> MessagePage:
    """The caller's view of a thread's history after a seq."""
    page = await services.conversation.list_messages(
        principal, parse_id(thread_id), after_seq=after_seq, limit=limit
    )
    document = {
        "messages": [message_document(m, page.authors[m.author_id]) for m in page.messages],
        "covers_through_seq": page.covers_through_seq,
    }
    return answer(document, MessagePage)


@post("/threads/{thread_id:str}/close", status_code=HTTP_200_OK, responses=problems(403))
async def close_thread(
    thread_id: FromPath[str],
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> Thread:
    """Mark a thread done (a person with write on it, or the owner)."""
    thread = await services.conversation.close_thread(principal, parse_id(thread_id))
    return answer(thread_document(thread), Thread)


@get("/events", responses=problems())
async def list_events(
    principal: NamedDependency[Principal],
    services: NamedDependency[Services],
    after: Annotated[int, QueryParameter(description="cursor: next_after of a page")] = 0,
    limit: Annotated[int | None, QueryParameter(description="page size, page.max_limit")] = None,
    wait: Annotated[
        float | None,
        QueryParameter(
            description="long-poll: seconds to wait for one event, stream.max_wait_seconds"
        ),
    ] = None,
) -> EventPage:
    """The shared events after a cursor that the caller may read."""
    page = await services.live.wait_events(principal, after=after, limit=limit, wait=wait)
    document = {
        "events": [event_document(event) for event in page.events],
        "next_after": page.next_after,
    }
    return answer(document, EventPage)


def conversation_router() -> Router:
    """The conversation routes, to be mounted under ``/v1``.

    Returns:
        A new router (one per application).
    """
    return Router(
        path="/",
        tags=["conversation"],
        route_handlers=[
            get_me,
            create_thread,
            create_message,
            get_thread,
            list_messages,
            close_thread,
            list_events,
        ],
    )
