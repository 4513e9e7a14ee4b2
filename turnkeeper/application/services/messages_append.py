"""Appending a message to a thread: the steps createMessage and the freshness gate share.

Both writers of a text message (`ConversationService` and `AgentSendService`) store it the
same way, inside their unit of work: check its references, take an ``rl.message`` token,
reopen a done thread with a system line, store the message under the thread row lock,
append ``message.created`` and publish `MessagePosted` so that the in-transaction
subscribers (the runs capability) can act or veto. The only difference is who allocates
the first thread_seq: createMessage takes it unconditionally (``AllocateThreadSeq``),
the freshness gate brings the one its compare-and-set already allocated.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from turnkeeper.application.bus import EventBus, MessagePosted
from turnkeeper.application.documents import message_document
from turnkeeper.application.ports import Clock, IdGenerator, UnitOfWork
from turnkeeper.application.services.access import thread_of
from turnkeeper.application.settings import Settings
from turnkeeper.domain.authorization import AccessTarget
from turnkeeper.domain.errors import FieldError, RateLimited, ValidationFailed
from turnkeeper.domain.events import EventType, NewEvent
from turnkeeper.domain.messaging import (
    SYSTEM_REOPENED_CONTENT,
    Message,
    MessageDraft,
    MessageKind,
    Origin,
    origin_for,
)
from turnkeeper.domain.ratelimit import RL_MESSAGE
from turnkeeper.domain.world import Principal, ThreadState


class MessageAppender:
    """Stores messages into threads with their events, inside the caller's unit of work.

    Args:
        bus: the in-transaction bus (`MessagePosted` is published on it).
        clock: the time.
        ids: the UUIDv7 source.
        settings: ``ratelimit.rl.message.*``.
    """

    def __init__(self, bus: EventBus, clock: Clock, ids: IdGenerator, settings: Settings) -> None:
        self._bus = bus
        self._clock = clock
        self._ids = ids
        self._settings = settings

    async def take_rate_token(self, uow: UnitOfWork, actor: Principal) -> None:
        """Take one token of the author's ``rl.message`` bucket (locked for the unit).

        Args:
            uow: the unit of work.
            actor: the author.

        Raises:
            RateLimited: the bucket is empty (nothing is stored: the unit rolls back).
        """
        retry_after = await uow.buckets.take_token(
            actor.id,
            RL_MESSAGE,
            self._clock.now(),
            burst=self._settings.rl_message_burst,
            per_minute=self._settings.rl_message_per_minute,
        )
        if retry_after is not None:
            raise RateLimited(retry_after)

    async def check_references(
        self,
        uow: UnitOfWork,
        draft: MessageDraft,
        *,
        thread_id: uuid.UUID | None,
        pointer_prefix: str = "",
    ) -> None:
        """Check that mentions, audience and reply_to name things that exist.

        Args:
            uow: the unit of work.
            draft: the request.
            thread_id: the target thread (None while createThread makes it).
            pointer_prefix: where the message sits in the request body
                (``/first_message`` for createThread), prefixed to every pointer.

        Raises:
            ValidationFailed: unknown principals, or reply_to outside the thread.
        """
        errors: list[FieldError] = []
        named = list(dict.fromkeys([*draft.mentions, *(draft.restricted_to or ())]))
        found = await uow.principals.get_many(named) if named else {}
        errors.extend(
            FieldError(pointer=f"{pointer_prefix}/mentions/{i}", code="unknown_principal")
            for i, mention in enumerate(draft.mentions)
            if mention not in found
        )
        errors.extend(
            FieldError(pointer=f"{pointer_prefix}/restricted_to/{i}", code="unknown_principal")
            for i, member in enumerate(draft.restricted_to or ())
            if member not in found
        )
        if draft.reply_to_id is not None:
            reply = await uow.messages.get(draft.reply_to_id)
            if reply is None or thread_id is None or reply.thread_id != thread_id:
                errors.append(
                    FieldError(pointer=f"{pointer_prefix}/reply_to_id", code="not_in_thread")
                )
        if errors:
            raise ValidationFailed(errors)

    async def append(
        self,
        uow: UnitOfWork,
        actor: Principal,
        target: AccessTarget,
        draft: MessageDraft,
        digest: str,
        *,
        kind: MessageKind,
        allocated_seq: int | None = None,
    ) -> Message:
        """Store a message (after a reopen line when the thread is done) and publish it.

        Args:
            uow: the unit of work.
            actor: the author.
            target: the thread with its channel and space.
            draft: the request.
            digest: the payload digest stored for idempotency.
            kind: the message kind.
            allocated_seq: a thread_seq the caller already allocated under the thread row
                lock (the freshness gate's compare-and-set); None to allocate here. The
                first row written takes it: the reopen line when there is one, else the
                message.

        Returns:
            The stored message.

        Raises:
            RetriableConflict: (author, client_msg_id) taken by a concurrent unit.
            DomainError: whatever an in-transaction subscriber vetoes with.
        """
        thread = thread_of(target)
        now = self._clock.now()
        pending = [] if allocated_seq is None else [allocated_seq]

        async def next_seq() -> int:
            if pending:
                return pending.pop()
            return await uow.threads.allocate_seq(thread.id)

        # reopen() takes the row lock and changes only a done thread, so of two concurrent
        # posts into a done thread exactly one writes the system line.
        if thread.state is ThreadState.DONE and await uow.threads.reopen(thread.id):
            await uow.events.append(
                self.event(
                    EventType.THREAD_REOPENED,
                    actor,
                    target,
                    resource_kind="thread",
                    resource_id=thread.id,
                    payload={"thread_id": str(thread.id)},
                )
            )
            line = Message(
                id=self._ids.new_id(),
                thread_id=thread.id,
                thread_seq=await next_seq(),
                author_id=actor.id,
                origin=Origin.SYSTEM,
                kind=MessageKind.SYSTEM,
                content=SYSTEM_REOPENED_CONTENT,
                created_at=now,
            )
            await uow.messages.add(line)
            await self.message_created(uow, actor, target, line)
            await self._bus.publish(uow, posted_event(line, actor, target, run_id=None))
        seq = await next_seq()
        restricted = stored_audience(draft.restricted_to, actor.id)
        message = Message(
            id=self._ids.new_id(),
            thread_id=thread.id,
            thread_seq=seq,
            author_id=actor.id,
            origin=origin_for(actor.kind),
            kind=kind,
            content=draft.content,
            mentions=draft.mentions,
            reply_to_id=draft.reply_to_id,
            restricted_to=restricted,
            client_msg_id=draft.client_msg_id,
            digest=digest,
            created_at=now,
        )
        await uow.messages.add(message)
        if restricted is not None and not thread.has_restricted:
            await uow.threads.mark_restricted(thread.id)
        await self.message_created(uow, actor, target, message)
        await self._bus.publish(uow, posted_event(message, actor, target, run_id=draft.run_id))
        return message

    async def message_created(
        self, uow: UnitOfWork, actor: Principal, target: AccessTarget, message: Message
    ) -> None:
        """Append the ``message.created`` event of a stored message.

        Args:
            uow: the unit of work.
            actor: who wrote it.
            target: its thread, channel and space.
            message: the message.
        """
        await uow.events.append(
            self.event(
                EventType.MESSAGE_CREATED,
                actor,
                target,
                resource_kind="message",
                resource_id=message.id,
                resource_version=message.version,
                restricted_to=message.restricted_to,
                payload={"message": message_document(message, actor)},
            )
        )

    def event(
        self,
        type_: EventType,
        actor: Principal,
        target: AccessTarget,
        *,
        resource_kind: str,
        resource_id: uuid.UUID,
        payload: dict[str, object],
        resource_version: int | None = None,
        restricted_to: tuple[uuid.UUID, ...] | None = None,
    ) -> NewEvent:
        """A new event of the shared log, stamped now.

        Args:
            type_: the event type.
            actor: who caused it.
            target: where (space, channel, thread when there is one).
            resource_kind: what it is about.
            resource_id: the resource's id.
            payload: the payload (no content for agents, no tokens, no None).
            resource_version: the resource's version, when it has one.
            restricted_to: the audience of a restricted message's event.

        Returns:
            The event, to append.
        """
        return new_event(
            type_,
            target,
            actor_id=actor.id,
            actor_kind=actor.kind.value,
            resource_kind=resource_kind,
            resource_id=resource_id,
            payload=payload,
            at=self._clock.now(),
            resource_version=resource_version,
            restricted_to=restricted_to,
        )


def new_event(
    type_: EventType,
    target: AccessTarget,
    *,
    actor_id: uuid.UUID,
    actor_kind: str,
    resource_kind: str,
    resource_id: uuid.UUID,
    payload: dict[str, object],
    at: datetime,
    resource_version: int | None = None,
    audience_id: uuid.UUID | None = None,
    restricted_to: tuple[uuid.UUID, ...] | None = None,
) -> NewEvent:
    """A new event of the log, placed where its target is (the one builder of events).

    Args:
        type_: the event type.
        target: where (space, channel, thread when there is one).
        actor_id: who caused it.
        actor_kind: the actor's kind (person, agent, app).
        resource_kind: what it is about.
        resource_id: the resource's id.
        payload: the payload (no content for agents, no tokens, no None).
        at: when (the clock port's time).
        resource_version: the resource's version, when it has one.
        audience_id: the one agent of a personal event (None: the shared log).
        restricted_to: the audience of a restricted message's event.

    Returns:
        The event, to append.
    """
    return NewEvent(
        type=type_,
        actor_id=actor_id,
        actor_kind=actor_kind,
        space_id=target.space.id,
        channel_id=target.channel.id,
        thread_id=target.thread.id if target.thread else None,
        resource_kind=resource_kind,
        resource_id=resource_id,
        resource_version=resource_version,
        audience_id=audience_id,
        restricted_to=restricted_to,
        payload=payload,
        created_at=at,
    )


def stored_audience(
    members: Sequence[uuid.UUID] | None, author_id: uuid.UUID
) -> tuple[uuid.UUID, ...] | None:
    """The stored audience of a restricted message: its members plus the author.

    Args:
        members: ``restricted_to`` of the request, None for a public message.
        author_id: the author.

    Returns:
        The audience, or None for a public message.
    """
    if members is None:
        return None
    return tuple(dict.fromkeys([*members, author_id]))


def posted_event(
    message: Message, author: Principal, target: AccessTarget, *, run_id: uuid.UUID | None
) -> MessagePosted:
    """The in-transaction event of a stored message.

    Args:
        message: the stored message.
        author: its author.
        target: its thread, channel and space.
        run_id: the run an agent's answer names (validated by the runs subscriber).

    Returns:
        The `MessagePosted` to publish.
    """
    return MessagePosted(
        message_id=message.id,
        thread_id=message.thread_id,
        channel_id=target.channel.id,
        space_id=target.space.id,
        author_id=author.id,
        author_kind=author.kind,
        origin=message.origin,
        kind=message.kind,
        mentions=message.mentions,
        run_id=run_id,
        restricted_to=message.restricted_to,
        target=target,
    )


__all__ = ["MessageAppender", "posted_event", "stored_audience"]
