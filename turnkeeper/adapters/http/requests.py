"""Request bodies of the HTTP contract (API.md) and what each becomes for a service.

Litestar decodes every body into one of these msgspec structs; `Body` refuses unknown
members (400 ``unknown_member``), and an optional member left out is ``UNSET`` (`given`
reads it as None). A body that needs more than a field-by-field copy to become a
service's input says so in one method (`MessageCreate.draft`, `AgentSendBody.send`,
`RunPatch.followup_ops`), so the handlers stay one call. How a body that does not
decode is answered: `turnkeeper.adapters.http.decoding`.
"""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Literal, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from turnkeeper.application.services.agent_send import AgentSend, SendFreshness
from turnkeeper.application.services.runs import FollowupOp
from turnkeeper.domain.events import MAX_SEQ
from turnkeeper.domain.followups import FollowupState
from turnkeeper.domain.messaging import MessageDraft

#: A seq or version in a request body: from 0 to `MAX_SEQ` (outside: 400 ``out_of_range``).
Seq = Annotated[int, msgspec.Meta(ge=0, le=MAX_SEQ)]
#: ``freshness.seen_up_to_seq``: the gate's own rule answers a negative one (code
#: ``negative``, the seed's validation error), so only the upper bound is the decoder's.
FrontierSeq = Annotated[int, msgspec.Meta(le=MAX_SEQ)]
V = TypeVar("V")

#: The path of a run patch operation: the state of one follow-up.
_FOLLOWUP_PATH = re.compile(r"/followups/(?P<message_id>[^/]+)/state")


class Body(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, frozen=True):
    """Base of request bodies: unknown members are refused; a decoded body is not changed.

    Each subclass repeats ``frozen=True``: type checkers do not inherit it.
    """


class OptionalBody(Body, frozen=True):
    """Base of bodies whose members are all optional: a request without a body is ``{}``.

    A route takes one as ``data: JSONBody[Kind] = Kind()`` (frozen, so the one default
    is safe to share), and the OpenAPI document marks its body not required.
    """


def given(value: V | UnsetType) -> V | None:
    """A request member, or None when the client left it out.

    Args:
        value: the decoded member.

    Returns:
        The value, or None for ``UNSET``.
    """
    return None if isinstance(value, UnsetType) else value


# -- administration and conversation ---------------------------------------------------


class PrincipalCreate(Body, frozen=True):
    """Body of POST /v1/principals."""

    kind: Literal["person", "agent"]
    handle: str
    display_name: str | UnsetType = UNSET
    billing_mode: Literal["organization", "personal"] | UnsetType = UNSET
    holder_id: uuid.UUID | UnsetType = UNSET
    supports_followups: bool | UnsetType = UNSET


class SpaceCreate(Body, frozen=True):
    """Body of POST /v1/spaces."""

    name: str
    default_operator_id: uuid.UUID | UnsetType = UNSET


class ChannelCreate(Body, frozen=True):
    """Body of POST /v1/spaces/{space_id}/channels."""

    name: str
    type: Literal["text", "forum"]
    operator_mode: Literal["inherit", "agent", "none"] | UnsetType = UNSET
    operator_id: uuid.UUID | UnsetType = UNSET


class BehaviorUpdate(OptionalBody, frozen=True):
    """Body of PUT /v1/channels/{channel_id}/behavior; absent switches stay as they are."""

    free_response: bool | UnsetType = UNSET
    allow_mentioned_agents: bool | UnsetType = UNSET
    thread_require_mention: bool | UnsetType = UNSET


class OperatorUpdate(Body, frozen=True):
    """Body of PUT /v1/channels/{channel_id}/operator."""

    mode: Literal["inherit", "agent", "none"]
    operator_id: uuid.UUID | UnsetType = UNSET


class GrantCreate(Body, frozen=True):
    """Body of POST /v1/grants."""

    principal_id: uuid.UUID
    resource_kind: Literal["space", "channel"]
    resource_id: uuid.UUID
    level: Literal["read", "write", "trigger"]


class AgentConfigUpdate(OptionalBody, frozen=True):
    """Body of PUT /v1/agents/{agent_id}/config."""

    supports_followups: bool | UnsetType = UNSET
    enabled: bool | UnsetType = UNSET


class MessageCreate(Body, frozen=True):
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

    def draft(self) -> MessageDraft:
        """The message to validate and store (its ``kind`` goes to the service apart).

        Returns:
            The draft.
        """
        restricted = given(self.restricted_to)
        return MessageDraft(
            client_msg_id=self.client_msg_id,
            content=self.content,
            mentions=tuple(given(self.mentions) or ()),
            reply_to_id=given(self.reply_to_id),
            restricted_to=tuple(restricted) if restricted is not None else None,
            run_id=given(self.run_id),
        )


class ThreadCreate(Body, frozen=True):
    """Body of POST /v1/channels/{channel_id}/threads."""

    first_message: MessageCreate
    title: str | UnsetType = UNSET


# -- runs and the agent runtime ---------------------------------------------------------


class InvocationTokenBody(Body, frozen=True):
    """Body of POST /v1/runs/{run_id}/start and /resume."""

    invocation_token: str


class AwaitInputBody(OptionalBody, frozen=True):
    """Body of POST /v1/runs/{run_id}/await-input (the question is not stored)."""

    question: str | UnsetType = UNSET


class FinishBody(Body, frozen=True):
    """Body of POST /v1/runs/{run_id}/finish."""

    state: Literal["completed", "failed", "cancelled"]
    reason: str | UnsetType = UNSET


class AckBody(Body, frozen=True):
    """Body of POST /v1/agent/events/ack."""

    through_seq: Seq


class Capabilities(Body, frozen=True):
    """Capabilities an agent reports."""

    followups: Literal["steer", "queue"] | UnsetType = UNSET


class HeartbeatBody(Body, frozen=True):
    """Body of PUT /v1/agent/heartbeat."""

    capabilities: Capabilities


class RunPatchOp(Body, frozen=True):
    """One operation of PATCH /v1/runs/{run_id}."""

    op: Literal["replace"]
    path: str
    value: Literal["delivered", "absorbed"]

    def followup_op(self) -> FollowupOp:
        """The replacement this operation asks for.

        Returns:
            The operation; its message id is None when the path names no follow-up
            (the service answers that with the operation's pointer).
        """
        return FollowupOp(message_id=_followup_target(self.path), value=FollowupState(self.value))


class RunPatch(Body, frozen=True):
    """Body of PATCH /v1/runs/{run_id}."""

    base_version: Seq
    ops: list[RunPatchOp]

    def followup_ops(self) -> list[FollowupOp]:
        """The replacements of the patch, in order.

        Returns:
            One operation per member of ``ops``.
        """
        return [op.followup_op() for op in self.ops]


def _followup_target(path: str) -> uuid.UUID | None:
    """The message id a patch path names, or None for a path that names no follow-up."""
    # The whole path: ``$`` of `re.match` also matches before a trailing line break.
    match = _FOLLOWUP_PATH.fullmatch(path)
    if match is None:
        return None
    text = match["message_id"]
    try:
        message_id = uuid.UUID(text)
    except ValueError:
        return None
    # The path names a member of the run document's ``followups``, keyed by the id's
    # canonical spelling: capitals, braces or a missing hyphen name none.
    return message_id if str(message_id) == text else None


# -- the freshness gate (POST /v1/agent/send) -------------------------------------------


class SendFreshnessBody(Body, frozen=True):
    """``freshness`` of POST /v1/agent/send: the frontier the agent saw in its target."""

    seen_up_to_seq: FrontierSeq
    target_key: str | UnsetType = UNSET
    source_message_ids: list[str] | UnsetType = UNSET


class AgentSendBody(Body, frozen=True):
    """Body of POST /v1/agent/send (``target`` is a thread id).

    ``client_message_id`` and ``freshness`` may be left out so that the service answers
    with its own pointers and codes (client_message_id_required, freshness_required).
    """

    target: uuid.UUID
    content: str
    client_message_id: str | UnsetType = UNSET
    run_id: uuid.UUID | UnsetType = UNSET
    freshness: SendFreshnessBody | UnsetType = UNSET

    def send(self) -> AgentSend:
        """The send for the service; members left out become "" or None.

        Returns:
            The send.
        """
        freshness = given(self.freshness)
        return AgentSend(
            target=self.target,
            content=self.content,
            client_message_id=given(self.client_message_id) or "",
            run_id=given(self.run_id),
            freshness=None
            if freshness is None
            else SendFreshness(
                target_key=given(freshness.target_key) or "",
                seen_up_to_seq=freshness.seen_up_to_seq,
                source_message_ids=tuple(given(freshness.source_message_ids) or ()),
            ),
        )
