"""Decoding of the server's answers (API.md, Agent runtime and Conversation).

Answers are decoded with msgspec into private structs that accept members the client
does not know (a route may grow fields) and refuse missing or mistyped ones; they are
then turned into the frozen values of `turnkeeper.adapters.client.models`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

import attrs
import httpx
import msgspec

from turnkeeper.adapters.client.errors import UNEXPECTED_ANSWER, AnswerInvalid, ClientProblem
from turnkeeper.adapters.client.models import (
    AgentEvent,
    AppliedFollowupMode,
    EventPage,
    HistoryMessage,
    PostedMessage,
    ThreadTarget,
    Trigger,
    TriggerOutcome,
)
from turnkeeper.domain.errors import FieldError

T = TypeVar("T")


class _Wire(msgspec.Struct):
    """Base of answer structs: unknown members are accepted."""


class _FieldError(_Wire):
    pointer: str
    code: str


class _Problem(_Wire):
    status: int
    code: str
    title: str | None = None
    reason: str | None = None
    errors: list[_FieldError] = msgspec.field(default_factory=list)
    correlation_id: str | None = None


class _Actor(_Wire):
    id: str
    kind: str


class _Scope(_Wire):
    thread_id: str | None = None


class _AgentEvent(_Wire):
    seq: int
    type: str
    actor: _Actor
    created_at: datetime
    scope: _Scope = msgspec.field(default_factory=_Scope)
    payload: dict[str, Any] = msgspec.field(default_factory=dict)
    invocation_token: str | None = None
    redelivered: bool = False


class _EventPage(_Wire):
    events: list[_AgentEvent]
    next_after: int


class _Thread(_Wire):
    id: str
    latest_seq: int
    target_key: str


class _Author(_Wire):
    id: str
    kind: str
    handle: str


class _Message(_Wire):
    id: str
    thread_id: str
    thread_seq: int
    author: _Author
    origin: str
    kind: str
    content: str
    created_at: datetime
    mentions: list[str] = msgspec.field(default_factory=list)
    reply_to_id: str | None = None
    run_id: str | None = None


class _Trigger(_Wire):
    outcome: Literal["run_opened", "followup", "refused", "none"]
    run_id: str | None = None
    mode: Literal["steer", "queue", "none"] | None = None
    reason: str | None = None


class _MessageCreated(_Message, kw_only=True):
    trigger: _Trigger


class _MessagePage(_Wire):
    messages: list[_Message]
    covers_through_seq: int
    target_key: str | None = None


#: A seq: an integer of 0 or more (a negative one breaks the contract).
_Seq = Annotated[int, msgspec.Meta(ge=0)]


class _SendAnswer(_Wire):
    """The wire form of the send answer: a member may be absent but never null."""

    state: Literal["sent", "already_sent", "held"]
    target_key: str
    latest_seq: _Seq
    client_message_id: str | msgspec.UnsetType = msgspec.UNSET
    message_id: str | msgspec.UnsetType = msgspec.UNSET
    seen_up_to_seq: _Seq | msgspec.UnsetType = msgspec.UNSET
    accepted_seq: _Seq | msgspec.UnsetType = msgspec.UNSET
    needs_refresh_until_seq: _Seq | msgspec.UnsetType = msgspec.UNSET


@attrs.frozen(kw_only=True)
class SendAnswer:
    """The answer of POST /v1/agent/send, absent members as None."""

    state: Literal["sent", "already_sent", "held"]
    target_key: str
    latest_seq: int
    client_message_id: str | None = None
    message_id: str | None = None
    seen_up_to_seq: int | None = None
    accepted_seq: int | None = None
    needs_refresh_until_seq: int | None = None


def decode(response: httpx.Response, kind: type[T]) -> T:
    """Decode a success answer.

    Args:
        response: the answer.
        kind: the struct to decode into.

    Returns:
        The decoded struct.

    Raises:
        AnswerInvalid: when the body is not JSON of that shape.
    """
    try:
        return msgspec.json.decode(response.content, type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise AnswerInvalid(
            f"{response.request.method} {response.request.url.path}: {exc}"
        ) from exc


def _retry_after(response: httpx.Response) -> int | None:
    value = response.headers.get("Retry-After", "")
    return int(value) if value.isdigit() else None


def problem(response: httpx.Response) -> ClientProblem:
    """The `ClientProblem` of an error answer.

    Args:
        response: an answer with a 4xx or 5xx status.

    Returns:
        The problem; code ``unexpected_answer`` when the body is not problem+json.
    """
    correlation_id = response.headers.get("X-Correlation-Id")
    retry_after = _retry_after(response)
    try:
        body = msgspec.json.decode(response.content, type=_Problem)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return ClientProblem(
            response.status_code,
            UNEXPECTED_ANSWER,
            correlation_id=correlation_id,
            retry_after=retry_after,
        )
    return ClientProblem(
        response.status_code,
        body.code,
        body.reason,
        [FieldError(pointer=e.pointer, code=e.code) for e in body.errors],
        title=body.title,
        correlation_id=body.correlation_id or correlation_id,
        retry_after=retry_after,
    )


def _payload_str(payload: dict[str, Any], key: str) -> str | None:
    value = payload.get(key)
    return value if isinstance(value, str) else None


def _agent_event(e: _AgentEvent) -> AgentEvent:
    return AgentEvent(
        seq=e.seq,
        type=e.type,
        created_at=e.created_at,
        actor_id=e.actor.id,
        thread_id=_payload_str(e.payload, "thread_id") or e.scope.thread_id,
        run_id=_payload_str(e.payload, "run_id"),
        message_id=_payload_str(e.payload, "message_id"),
        invocation_token=e.invocation_token,
        redelivered=e.redelivered,
    )


def event_page(response: httpx.Response) -> EventPage:
    """Decode a page of GET /v1/agent/events.

    Args:
        response: the 200 answer.

    Returns:
        The typed page.
    """
    page = decode(response, _EventPage)
    return EventPage(events=tuple(_agent_event(e) for e in page.events), next_after=page.next_after)


def agent_event(data: str) -> AgentEvent:
    """Decode the ``data:`` of one event of GET /v1/agent/events/stream.

    Args:
        data: the AgentEvent JSON.

    Returns:
        The typed event.

    Raises:
        AnswerInvalid: when it is not an AgentEvent.
    """
    try:
        return _agent_event(msgspec.json.decode(data, type=_AgentEvent))
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise AnswerInvalid(f"GET /v1/agent/events/stream: {exc}") from exc


def thread_target(response: httpx.Response) -> ThreadTarget:
    """Decode GET /v1/threads/{id} into a send target.

    Args:
        response: the 200 answer.

    Returns:
        The thread's id, target key and raw latest seq.
    """
    thread = decode(response, _Thread)
    return ThreadTarget(
        thread_id=thread.id, target_key=thread.target_key, latest_seq=thread.latest_seq
    )


def history(response: httpx.Response) -> tuple[tuple[HistoryMessage, ...], int, str | None]:
    """Decode a page of GET /v1/threads/{id}/messages.

    Args:
        response: the 200 answer.

    Returns:
        The messages, ``covers_through_seq`` and the target key when the answer has one.
    """
    page = decode(response, _MessagePage)
    messages = tuple(_history_message(m) for m in page.messages)
    return messages, page.covers_through_seq, page.target_key


def _history_message(m: _Message) -> HistoryMessage:
    return HistoryMessage(
        id=m.id,
        thread_id=m.thread_id,
        thread_seq=m.thread_seq,
        author_id=m.author.id,
        author_kind=m.author.kind,
        author_handle=m.author.handle,
        origin=m.origin,
        kind=m.kind,
        content=m.content,
        mentions=tuple(m.mentions),
        created_at=m.created_at,
        reply_to_id=m.reply_to_id,
        run_id=m.run_id,
    )


def posted_message(response: httpx.Response) -> PostedMessage:
    """Decode the answer of POST /v1/threads/{id}/messages (201, or 200 for a replay).

    Args:
        response: the success answer.

    Returns:
        The message with what became of it (``trigger``).
    """
    answer = decode(response, _MessageCreated)
    trigger = answer.trigger
    return PostedMessage(
        message=_history_message(answer),
        trigger=Trigger(
            outcome=TriggerOutcome(trigger.outcome),
            run_id=trigger.run_id,
            mode=None if trigger.mode is None else AppliedFollowupMode(trigger.mode),
            reason=trigger.reason,
        ),
        replayed=response.headers.get("Idempotent-Replay") == "true",
    )


def _present(value: T | msgspec.UnsetType) -> T | None:
    return None if isinstance(value, msgspec.UnsetType) else value


def _send_answer_faults(
    answer: SendAnswer, *, target_key: str, client_message_id: str, seen_up_to_seq: int
) -> list[str]:
    """What in a decoded send answer contradicts the request it answers."""
    faults: list[str] = []
    if answer.target_key != target_key:
        faults.append("names another target_key")
    if answer.client_message_id not in (None, client_message_id):
        faults.append("names another client_message_id")
    if answer.seen_up_to_seq not in (None, seen_up_to_seq):
        faults.append("names another seen_up_to_seq")
    if answer.state == "held":
        # Held means messages after the claimed frontier: the thread is past it.
        if answer.latest_seq <= seen_up_to_seq:
            faults.append("is held at a latest_seq not past the seen_up_to_seq it was sent")
        return faults
    if answer.message_id is None or answer.accepted_seq is None:
        faults.append("lacks message_id or accepted_seq")
    elif answer.accepted_seq > answer.latest_seq:
        faults.append("has an accepted_seq past its latest_seq")
    elif answer.state == "sent" and answer.accepted_seq <= seen_up_to_seq:
        # A new message comes after every message its sender had seen.
        faults.append("has an accepted_seq not past the seen_up_to_seq it was sent")
    return faults


def send_answer(
    response: httpx.Response, *, target_key: str, client_message_id: str, seen_up_to_seq: int
) -> SendAnswer:
    """Decode the answer of POST /v1/agent/send and check it against its request.

    Args:
        response: the 200 answer.
        target_key: the target key the request carried.
        client_message_id: the request's idempotency key.
        seen_up_to_seq: the frontier the request claimed.

    Returns:
        The answer.

    Raises:
        AnswerInvalid: when the answer has a null, a negative seq or a missing member, or
            contradicts the request (another target key or client message id, a sent
            message not after the claimed frontier, a hold at a thread not past it).
    """
    wire = decode(response, _SendAnswer)
    answer = SendAnswer(
        state=wire.state,
        target_key=wire.target_key,
        latest_seq=wire.latest_seq,
        client_message_id=_present(wire.client_message_id),
        message_id=_present(wire.message_id),
        seen_up_to_seq=_present(wire.seen_up_to_seq),
        accepted_seq=_present(wire.accepted_seq),
        needs_refresh_until_seq=_present(wire.needs_refresh_until_seq),
    )
    faults = _send_answer_faults(
        answer,
        target_key=target_key,
        client_message_id=client_message_id,
        seen_up_to_seq=seen_up_to_seq,
    )
    if faults:
        raise AnswerInvalid(f"a {answer.state} answer " + "; ".join(faults))
    return answer
