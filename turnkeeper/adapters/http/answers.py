"""Answers of the HTTP contract (API.md): one msgspec struct per resource, built from the domain.

Each struct is the wire shape of its resource, and the OpenAPI document is generated from
it. ``of`` builds it straight from the domain value or the service's result; msgspec
encodes it. Every optional member defaults to ``UNSET`` and every struct omits defaults,
so no answer ever contains JSON null: a value the domain holds as None is left out.

This module holds the problem, health, administration and conversation answers; the
answers of runs and of the agent runtime are in `turnkeeper.adapters.http.run_answers`.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, Literal, Self, TypeVar, cast

import msgspec
from msgspec import UNSET, UnsetType

from turnkeeper.application.services import conversation
from turnkeeper.domain import events, messaging, trigger_report, world

V = TypeVar("V")


class Answer(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Base of answers."""


def optional(value: V | None) -> V | UnsetType:
    """A member the domain may hold as None: absent from the answer then.

    Args:
        value: the domain's value.

    Returns:
        The value, or ``UNSET`` for None.
    """
    return UNSET if value is None else value


def utc(at: datetime) -> datetime:
    """A time in UTC, so that every answer writes it with the ``Z`` suffix.

    Args:
        at: a timezone-aware time.

    Returns:
        The same instant in UTC.
    """
    return at.astimezone(UTC)


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


class Health(Answer):
    """Answer of /healthz and /readyz."""

    status: Literal["ok", "ready"]


# -- administration ---------------------------------------------------------------------


class Me(Answer):
    """``{id, kind, handle}`` of a principal."""

    id: uuid.UUID
    kind: Literal["person", "agent", "app"]
    handle: str

    @classmethod
    def of(cls, principal: world.Principal) -> Self:
        """The answer of a principal."""
        return cls(id=principal.id, kind=principal.kind.value, handle=principal.handle)


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

    @classmethod
    def of(cls, principal: world.Principal) -> Agent:
        """The answer of a principal; ``enabled`` only for agents."""
        billing_mode = principal.billing_mode
        return cls(
            id=principal.id,
            kind=principal.kind.value,
            handle=principal.handle,
            display_name=principal.display_name or UNSET,
            billing_mode=UNSET if billing_mode is None else billing_mode.value,
            holder_id=optional(principal.holder_id),
            supports_followups=optional(principal.supports_followups),
            enabled=principal.enabled if principal.is_agent else UNSET,
        )


class PrincipalCreated(Agent, kw_only=True):
    """Answer of POST /v1/principals: the principal and its token, shown once."""

    token: str

    @classmethod
    def created(cls, principal: world.Principal, token: str) -> PrincipalCreated:
        """The answer of a new principal with its token."""
        return cls(**msgspec.structs.asdict(Agent.of(principal)), token=token)


class Space(Answer):
    """A space."""

    id: uuid.UUID
    name: str
    created_by: uuid.UUID
    created_at: datetime
    default_operator_id: uuid.UUID | UnsetType = UNSET

    @classmethod
    def of(cls, space: world.Space) -> Space:
        """The answer of a space."""
        return cls(
            id=space.id,
            name=space.name,
            created_by=space.created_by,
            created_at=utc(space.created_at),
            default_operator_id=optional(space.default_operator_id),
        )


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

    @classmethod
    def of(cls, channel: world.Channel) -> Channel:
        """The answer of a channel."""
        behavior = channel.behavior
        return cls(
            id=channel.id,
            space_id=channel.space_id,
            name=channel.name,
            type=channel.type.value,
            operator_mode=channel.operator_mode.value,
            free_response=behavior.free_response,
            allow_mentioned_agents=behavior.allow_mentioned_agents,
            thread_require_mention=behavior.thread_require_mention,
            archived=channel.archived,
            created_at=utc(channel.created_at),
            operator_id=optional(channel.operator_id),
            main_thread_id=optional(channel.main_thread_id),
        )


class Grant(Answer):
    """A grant of a level on a space or channel."""

    id: uuid.UUID
    principal_id: uuid.UUID
    resource_kind: Literal["space", "channel"]
    resource_id: uuid.UUID
    level: Literal["read", "write", "trigger"]
    created_at: datetime

    @classmethod
    def of(cls, grant: world.Grant) -> Grant:
        """The answer of a grant."""
        return cls(
            id=grant.id,
            principal_id=grant.principal_id,
            resource_kind=grant.resource_kind.value,
            resource_id=grant.resource_id,
            # Level.label names the three levels; typed str in the domain.
            level=cast(Literal["read", "write", "trigger"], grant.level.label),
            created_at=utc(grant.created_at),
        )


# -- conversation -----------------------------------------------------------------------


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

    @classmethod
    def of(cls, thread: world.Thread) -> Thread:
        """The answer of a thread."""
        return cls(
            id=thread.id,
            channel_id=thread.channel_id,
            title_source=thread.title_source.value,
            state=thread.state.value,
            latest_seq=thread.latest_seq,
            target_key=thread.target_key,
            created_by=thread.created_by,
            created_at=utc(thread.created_at),
            title=optional(thread.title),
            operator_id=optional(thread.operator_agent_id),
        )


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

    @classmethod
    def of(cls, message: messaging.Message, author: world.Principal, **more: Any) -> Self:
        """The answer of a message; ``run_id`` only for run anchors.

        Args:
            message: the message.
            author: its author.
            **more: the members of a subclass (``trigger``), built in the same call.

        Returns:
            The answer.
        """
        restricted = message.restricted_to
        trigger_state = message.trigger_state
        return cls(
            id=message.id,
            thread_id=message.thread_id,
            thread_seq=message.thread_seq,
            author=Author.of(author),
            origin=message.origin.value,
            kind=message.kind.value,
            content=message.content,
            mentions=list(message.mentions),
            created_at=utc(message.created_at),
            version=message.version,
            reply_to_id=optional(message.reply_to_id),
            restricted_to=UNSET if restricted is None else list(restricted),
            client_msg_id=optional(message.client_msg_id),
            trigger_state=UNSET if trigger_state is None else trigger_state.value,
            trigger_state_reason=optional(message.trigger_state_reason),
            run_id=optional(message.run_id),
            **more,
        )


class Trigger(Answer):
    """What became of a created message (API.md Trigger), derived from stored facts."""

    outcome: Literal["run_opened", "followup", "refused", "none"]
    run_id: uuid.UUID | UnsetType = UNSET
    mode: Literal["steer", "queue", "none"] | UnsetType = UNSET
    reason: str | UnsetType = UNSET

    @classmethod
    def of(cls, trigger: trigger_report.MessageTrigger) -> Trigger:
        """The answer of a trigger report."""
        mode = trigger.mode
        return cls(
            outcome=trigger.outcome.value,
            run_id=optional(trigger.run_id),
            mode=UNSET if mode is None else mode.value,
            reason=optional(trigger.reason),
        )


class MessageCreated(Message, kw_only=True):
    """Answer of POST /v1/threads/{thread_id}/messages: the Message plus its ``trigger``."""

    trigger: Trigger

    @classmethod
    def posted(cls, posted: conversation.PostedMessage) -> MessageCreated:
        """The answer of a created (or replayed) message."""
        return cls.of(posted.message, posted.author, trigger=Trigger.of(posted.trigger))


class ThreadCreated(Answer):
    """Answer of POST /v1/channels/{channel_id}/threads."""

    thread: Thread
    message: Message
    trigger: Trigger

    @classmethod
    def of(cls, created: conversation.CreatedThread) -> ThreadCreated:
        """The answer of a created (or replayed) thread."""
        return cls(
            thread=Thread.of(created.thread),
            message=Message.of(created.message, created.author),
            trigger=Trigger.of(created.trigger),
        )


class MessagePage(Answer):
    """One page of a thread's history."""

    messages: list[Message]
    covers_through_seq: int

    @classmethod
    def of(cls, page: conversation.MessagePage) -> MessagePage:
        """The answer of a history page."""
        return cls(
            messages=[Message.of(m, page.authors[m.author_id]) for m in page.messages],
            covers_through_seq=page.covers_through_seq,
        )


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

    @classmethod
    def of(cls, event: events.Event) -> Event:
        """The answer of an event."""
        return cls(
            seq=event.seq,
            type=event.type.value,
            actor=EventActor(id=event.actor_id, kind=event.actor_kind),
            scope=EventScope(
                space_id=event.space_id,
                channel_id=event.channel_id,
                thread_id=optional(event.thread_id),
            ),
            resource=EventResource(
                kind=event.resource_kind,
                id=event.resource_id,
                version=optional(event.resource_version),
            ),
            payload=dict(event.payload),
            created_at=utc(event.created_at),
        )


class EventPage(Answer):
    """One page of the shared event feed."""

    events: list[Event]
    next_after: int

    @classmethod
    def of(cls, page: conversation.EventPage) -> EventPage:
        """The answer of a page of the shared feed."""
        return cls(events=[Event.of(e) for e in page.events], next_after=page.next_after)
