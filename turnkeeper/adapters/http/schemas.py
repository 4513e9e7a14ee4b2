"""msgspec structs of the HTTP contract (API.md): request bodies and answers.

Requests forbid unknown members (400 ``unknown_member``). Answers are built from the
documents of `turnkeeper.application.documents` with `msgspec.convert`, which also checks that a
document matches the published schema; every optional member defaults to ``UNSET`` and
every struct omits defaults, so no answer ever contains JSON null.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

T = TypeVar("T", bound=msgspec.Struct)

#: The largest seq or version a request may name: the stores keep them as signed 64-bit
#: integers (PostgreSQL ``bigint``), and a larger one names nothing that exists. Beyond it:
#: 400 ``out_of_range``.
MAX_SEQ = 2**63 - 1
#: A seq or version in a request body.
Seq = Annotated[int, msgspec.Meta(le=MAX_SEQ)]
V = TypeVar("V")


class Body(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Base of request bodies: unknown members are refused."""


class Answer(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Base of answers: a document member missing here fails loudly in the tests."""


def answer(document: dict[str, Any], kind: type[T]) -> T:
    """Convert an application document into its answer struct.

    Args:
        document: a dict from `turnkeeper.application.documents` (no None values).
        kind: the answer struct.

    Returns:
        The struct, ready for msgspec encoding.
    """
    return msgspec.convert(document, type=kind)


def given(value: V | UnsetType) -> V | None:
    """A request member, or None when the client left it out.

    Args:
        value: the decoded member.

    Returns:
        The value, or None for ``UNSET``.
    """
    return None if isinstance(value, UnsetType) else value


# -- requests ---------------------------------------------------------------------------


class PrincipalCreate(Body):
    """Body of POST /v1/principals."""

    kind: Literal["person", "agent"]
    handle: str
    display_name: str | UnsetType = UNSET
    billing_mode: Literal["organization", "personal"] | UnsetType = UNSET
    holder_id: uuid.UUID | UnsetType = UNSET
    supports_followups: bool | UnsetType = UNSET


class SpaceCreate(Body):
    """Body of POST /v1/spaces."""

    name: str
    default_operator_id: uuid.UUID | UnsetType = UNSET


class ChannelCreate(Body):
    """Body of POST /v1/spaces/{space_id}/channels."""

    name: str
    type: Literal["text", "forum"]
    operator_mode: Literal["inherit", "agent", "none"] | UnsetType = UNSET
    operator_id: uuid.UUID | UnsetType = UNSET


class BehaviorUpdate(Body):
    """Body of PUT /v1/channels/{channel_id}/behavior; absent switches stay as they are."""

    free_response: bool | UnsetType = UNSET
    allow_mentioned_agents: bool | UnsetType = UNSET
    thread_require_mention: bool | UnsetType = UNSET


class OperatorUpdate(Body):
    """Body of PUT /v1/channels/{channel_id}/operator."""

    mode: Literal["inherit", "agent", "none"]
    operator_id: uuid.UUID | UnsetType = UNSET


class GrantCreate(Body):
    """Body of POST /v1/grants."""

    principal_id: uuid.UUID
    resource_kind: Literal["space", "channel"]
    resource_id: uuid.UUID
    level: Literal["read", "write", "trigger"]


class AgentConfigUpdate(Body):
    """Body of PUT /v1/agents/{agent_id}/config."""

    supports_followups: bool | UnsetType = UNSET
    enabled: bool | UnsetType = UNSET


class MessageCreate(Body):
    """MessageCreate: body of POST /v1/threads/{thread_id}/messages.

    ``kind`` is free text here so that the message rules answer ``system`` and ``run``
    with their own pointer and code.
    """

    client_msg_id: str
    content: str
    kind: str | UnsetType = UNSET
    mentions: list[uuid.UUID] | UnsetType = UNSET
    reply_to_id: uuid.UUID | UnsetType = UNSET
    restricted_to: list[uuid.UUID] | UnsetType = UNSET
    run_id: uuid.UUID | UnsetType = UNSET


class ThreadCreate(Body):
    """Body of POST /v1/channels/{channel_id}/threads."""

    first_message: MessageCreate
    title: str | UnsetType = UNSET


# -- answers ----------------------------------------------------------------------------


class FieldErrorOut(Answer):
    """One offending member of a request."""

    pointer: str
    code: str


class Problem(Answer):
    """An ``application/problem+json`` answer (RFC 9457 with turnkeeper members)."""

    type: str
    title: str
    status: int
    code: str
    correlation_id: str
    reason: str | UnsetType = UNSET
    errors: list[FieldErrorOut] | UnsetType = UNSET
    current: dict[str, Any] | UnsetType = UNSET


class Me(Answer):
    """``{id, kind, handle}`` of a principal."""

    id: uuid.UUID
    kind: Literal["person", "agent", "app"]
    handle: str


class Author(Me):
    """The author of a message."""


class Agent(Answer):
    """A principal as the owner sees it (answer of agent configuration)."""

    id: uuid.UUID
    kind: Literal["person", "agent", "app"]
    handle: str
    display_name: str | UnsetType = UNSET
    billing_mode: Literal["organization", "personal"] | UnsetType = UNSET
    holder_id: uuid.UUID | UnsetType = UNSET
    supports_followups: bool | UnsetType = UNSET
    enabled: bool | UnsetType = UNSET


class PrincipalCreated(Agent, kw_only=True):
    """Answer of POST /v1/principals: the principal and its token, shown once."""

    token: str


class Space(Answer):
    """A space."""

    id: uuid.UUID
    name: str
    created_by: uuid.UUID
    created_at: datetime
    default_operator_id: uuid.UUID | UnsetType = UNSET


class Channel(Answer):
    """A channel (text channels carry ``main_thread_id``)."""

    id: uuid.UUID
    space_id: uuid.UUID
    name: str
    type: Literal["text", "forum"]
    operator_mode: Literal["inherit", "agent", "none"]
    free_response: bool
    allow_mentioned_agents: bool
    thread_require_mention: bool
    archived: bool
    created_at: datetime
    operator_id: uuid.UUID | UnsetType = UNSET
    main_thread_id: uuid.UUID | UnsetType = UNSET


class Grant(Answer):
    """A grant of a level on a space or channel."""

    id: uuid.UUID
    principal_id: uuid.UUID
    resource_kind: Literal["space", "channel"]
    resource_id: uuid.UUID
    level: Literal["read", "write", "trigger"]
    created_at: datetime


class GrantList(Answer):
    """Answer of GET /v1/grants."""

    grants: list[Grant]


class Thread(Answer):
    """A thread; ``latest_seq`` is the raw frontier."""

    id: uuid.UUID
    channel_id: uuid.UUID
    title_source: Literal["human", "auto"]
    state: Literal["open", "done"]
    latest_seq: int
    target_key: str
    created_by: uuid.UUID
    created_at: datetime
    title: str | UnsetType = UNSET
    operator_id: uuid.UUID | UnsetType = UNSET


class Message(Answer):
    """A message as its reader sees it."""

    id: uuid.UUID
    thread_id: uuid.UUID
    thread_seq: int
    author: Author
    origin: Literal["human", "agent", "app", "system"]
    kind: Literal["text", "system", "run"]
    content: str
    mentions: list[uuid.UUID]
    created_at: datetime
    version: int
    reply_to_id: uuid.UUID | UnsetType = UNSET
    restricted_to: list[uuid.UUID] | UnsetType = UNSET
    client_msg_id: str | UnsetType = UNSET
    trigger_state: str | UnsetType = UNSET
    trigger_state_reason: str | UnsetType = UNSET
    run_id: uuid.UUID | UnsetType = UNSET


class ThreadCreated(Answer):
    """Answer of POST /v1/channels/{channel_id}/threads."""

    thread: Thread
    message: Message


class MessagePage(Answer):
    """One page of a thread's history."""

    messages: list[Message]
    covers_through_seq: int


class EventActor(Answer):
    """Who caused an event."""

    id: uuid.UUID
    kind: str


class EventScope(Answer):
    """Where an event happened."""

    space_id: uuid.UUID
    channel_id: uuid.UUID
    thread_id: uuid.UUID | UnsetType = UNSET


class EventResource(Answer):
    """What an event is about."""

    kind: str
    id: uuid.UUID
    version: int | UnsetType = UNSET


class Event(Answer):
    """One event of the shared feed."""

    seq: int
    type: str
    actor: EventActor
    scope: EventScope
    resource: EventResource
    payload: dict[str, Any]
    created_at: datetime


class EventPage(Answer):
    """One page of the shared event feed."""

    events: list[Event]
    next_after: int


class Health(Answer):
    """Answer of /healthz and /readyz."""

    status: Literal["ok", "ready"]


# -- runs and the agent runtime ---------------------------------------------------------


class InvocationTokenBody(Body):
    """Body of POST /v1/runs/{run_id}/start and /resume."""

    invocation_token: str


class AwaitInputBody(Body):
    """Body of POST /v1/runs/{run_id}/await-input (the question is not stored)."""

    question: str | UnsetType = UNSET


class FinishBody(Body):
    """Body of POST /v1/runs/{run_id}/finish."""

    state: Literal["completed", "failed", "cancelled"]
    reason: str | UnsetType = UNSET


class AckBody(Body):
    """Body of POST /v1/agent/events/ack."""

    through_seq: Seq


class Capabilities(Body):
    """Capabilities an agent reports."""

    followups: Literal["steer", "queue"] | UnsetType = UNSET


class HeartbeatBody(Body):
    """Body of PUT /v1/agent/heartbeat."""

    capabilities: Capabilities


class RunFollowup(Answer):
    """One follow-up of a run."""

    state: str


class Run(Answer):
    """The run document; its version is also the ETag."""

    id: uuid.UUID
    thread_id: uuid.UUID
    agent_id: uuid.UUID
    state: Literal["queued", "running", "waiting_input", "completed", "failed", "cancelled"]
    trigger_kind: Literal["message"]
    triggering_message_id: uuid.UUID
    triggered_by: uuid.UUID
    version: int
    followups: dict[str, RunFollowup]
    created_at: datetime
    updated_at: datetime
    state_reason: str | UnsetType = UNSET
    cancel_requested: bool | UnsetType = UNSET


class AgentEvent(Event, kw_only=True):
    """An event of an agent's personal feed, with a fresh token where it applies."""

    invocation_token: str | UnsetType = UNSET
    redelivered: bool | UnsetType = UNSET


class AgentEventPage(Answer):
    """One page of an agent's feed."""

    events: list[AgentEvent]
    next_after: int


class RunPatchOp(Body):
    """One operation of PATCH /v1/runs/{run_id}."""

    op: Literal["replace"]
    path: str
    value: Literal["delivered", "absorbed"]


class RunPatch(Body):
    """Body of PATCH /v1/runs/{run_id}."""

    base_version: Seq
    ops: list[RunPatchOp]


# -- the freshness gate (POST /v1/agent/send) -------------------------------------------


class SendFreshnessBody(Body):
    """``freshness`` of POST /v1/agent/send: the frontier the agent saw in its target."""

    seen_up_to_seq: Seq
    target_key: str | UnsetType = UNSET
    source_message_ids: list[str] | UnsetType = UNSET


class AgentSendBody(Body):
    """Body of POST /v1/agent/send (``target`` is a thread id).

    ``client_message_id`` and ``freshness`` may be left out so that the service answers
    with its own pointers and codes (client_message_id_required, freshness_required).
    """

    target: uuid.UUID
    content: str
    client_message_id: str | UnsetType = UNSET
    run_id: uuid.UUID | UnsetType = UNSET
    freshness: SendFreshnessBody | UnsetType = UNSET


class AgentSendResult(Answer):
    """Answer of POST /v1/agent/send: sent, already_sent or held."""

    state: Literal["sent", "already_sent", "held"]
    target_key: str
    client_message_id: str
    latest_seq: int
    message_id: uuid.UUID | UnsetType = UNSET
    seen_up_to_seq: int | UnsetType = UNSET
    accepted_seq: int | UnsetType = UNSET
    needs_refresh_until_seq: int | UnsetType = UNSET
