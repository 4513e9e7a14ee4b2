"""Appending a message to a thread: the steps createMessage and the freshness gate share.

Both writers of a text message (`ConversationService` and `AgentSendService`) store it the
same way, inside their unit of work: look up an earlier identical request (`replay`),
check its references, take an ``rl.message`` token, reopen a done thread with a system
line, store the message under the thread row lock, append ``message.created`` and publish
`MessagePosted` so that the in-transaction subscribers (the runs capability) can act or
veto. The only difference is who allocates the first thread_seq: createMessage takes it
unconditionally (``AllocateThreadSeq``), the freshness gate brings the one its
compare-and-set already allocated. A run's anchor message is stored by `store` too.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Collection, Sequence
from datetime import datetime

from turnkeeper.application.bus import EventBus, MessagePosted
from turnkeeper.application.event_factory import EventFactory
from turnkeeper.application.ports import BucketTake, Clock, IdGenerator, UnitOfWork
from turnkeeper.application.services.access import thread_of
from turnkeeper.application.settings import Settings
from turnkeeper.domain.authorization import AccessTarget
from turnkeeper.domain.errors import FieldError, IdempotencyConflict, RateLimited
from turnkeeper.domain.messaging import (
    SYSTEM_REOPENED_CONTENT,
    Message,
    MessageDraft,
    MessageKind,
    Origin,
    given_title,
    origin_for,
    payload_digest,
    visible_to,
)
from turnkeeper.domain.ratelimit import RL_MESSAGE
from turnkeeper.domain.world import Principal, ThreadState


async def replay(
    uow: UnitOfWork,
    author: Principal,
    client_msg_id: str,
    digest: str,
    earlier: Callable[[], Collection[str]] | None = None,
) -> Message | None:
    """The one idempotency lookup: the message an identical earlier request stored.

    Args:
        uow: the unit of work.
        author: the author of the request.
        client_msg_id: its idempotency key.
        digest: the payload digest of this request.
        earlier: see `replayed`.

    Returns:
        The stored message as it is now, or None when the key is new.

    Raises:
        IdempotencyConflict: the key was used with another payload.
    """
    return replayed(await uow.messages.by_client_id(author.id, client_msg_id), digest, earlier)


def replayed(
    existing: Message | None,
    digest: str,
    earlier: Callable[[], Collection[str]] | None = None,
) -> Message | None:
    """The idempotency rule on a message already read by client id.

    Args:
        existing: the message the author stored under the request's key, or None.
        digest: the payload digest of this request.
        earlier: the digests this request had before (its inputs read as given, and
            the forms earlier versions stored, `draft_digests`); called only when the
            stored digest is not `digest`, so that a message stored before still
            replays the request it stored.

    Returns:
        `existing` when the request is a replay of it, None when the key is new.

    Raises:
        IdempotencyConflict: the key was used with another payload.
    """
    if (
        existing is not None
        and existing.digest != digest
        and (earlier is None or existing.digest not in earlier())
    ):
        raise IdempotencyConflict()
    return existing


def _named(draft: MessageDraft) -> list[uuid.UUID]:
    """The people a draft names (mentions, then the audience), each once."""
    return list(dict.fromkeys([*draft.mentions, *(draft.restricted_to or ())]))


async def prefetch_references(uow: UnitOfWork, draft: MessageDraft) -> None:
    """Queue the reads a draft's references cost, to arrive with the post's own facts.

    The people it names and the message it replies to (`reference_errors`), and one
    read of the grants of the people it mentions (the trigger decision's guests with
    write): a message that names someone takes no round trip more for it than one that
    does not. For a draft that is refused or replayed they are wasted work, never a
    wrong answer (the ports' ``prefetch``).

    Args:
        uow: the unit of work, before the post's first read.
        draft: the request.
    """
    named = _named(draft)
    if named:
        await uow.principals.prefetch(named)
    if draft.mentions:
        await uow.grants.prefetch(draft.mentions)
    if draft.reply_to_id is not None:
        await uow.messages.prefetch(draft.reply_to_id)


async def reference_errors(
    uow: UnitOfWork,
    draft: MessageDraft,
    *,
    thread_id: uuid.UUID | None,
    author_id: uuid.UUID,
    prefix: str = "",
) -> list[FieldError]:
    """Check that mentions, audience and reply_to name things that exist.

    Args:
        uow: the unit of work.
        draft: the request.
        thread_id: the target thread (None while createThread makes it).
        author_id: the writing principal: a reply names a message it may see.
        prefix: the pointer of the draft in its request (``/first_message``).

    Returns:
        ``unknown_principal`` for unknown mentions and audience members,
        ``not_in_thread`` for a reply_to outside the thread or restricted from the
        author (answered as an unknown one, so that no reply tells a restricted
        message's existence); empty when all exist.
    """
    errors: list[FieldError] = []
    named = _named(draft)
    found = await uow.principals.get_many(named) if named else {}
    errors.extend(
        FieldError(pointer=f"{prefix}/mentions/{i}", code="unknown_principal")
        for i, mention in enumerate(draft.mentions)
        if mention not in found
    )
    errors.extend(
        FieldError(pointer=f"{prefix}/restricted_to/{i}", code="unknown_principal")
        for i, member in enumerate(draft.restricted_to or ())
        if member not in found
    )
    if draft.reply_to_id is not None:
        reply = await uow.messages.get(draft.reply_to_id)
        if (
            reply is None
            or thread_id is None
            or reply.thread_id != thread_id
            or not visible_to(reply, author_id)
        ):
            errors.append(FieldError(pointer=f"{prefix}/reply_to_id", code="not_in_thread"))
    return errors


def refuse_if_limited(retry_after: int | None) -> None:
    """Refuse a post whose rate-limit take found the bucket empty.

    Args:
        retry_after: the take's answer (None: a token was taken, or none was needed).

    Raises:
        RateLimited: with the seconds to wait; the unit rolls back, and the take with it.
    """
    if retry_after is not None:
        raise RateLimited(retry_after)


class MessageAppender:
    """Stores messages into threads with their events, inside the caller's unit of work.

    Args:
        bus: the in-transaction bus (`MessagePosted` is published on it).
        events: the event factory.
        clock: the time.
        ids: the UUIDv7 source.
        settings: ``ratelimit.rl.message.*``.
    """

    def __init__(
        self,
        bus: EventBus,
        events: EventFactory,
        clock: Clock,
        ids: IdGenerator,
        settings: Settings,
    ) -> None:
        self._bus = bus
        self._events = events
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
        take = self.message_take()
        refuse_if_limited(
            await uow.buckets.take_token(
                actor.id, take.limit_class, take.now, burst=take.burst, per_minute=take.per_minute
            )
        )

    def message_take(self) -> BucketTake:
        """The ``rl.message`` token a post takes with its facts (`post_target`).

        Returns:
            The take, at the clock's time.
        """
        return BucketTake(
            limit_class=RL_MESSAGE,
            now=self._clock.now(),
            burst=self._settings.rl_message_burst,
            per_minute=self._settings.rl_message_per_minute,
        )

    async def append(
        self,
        uow: UnitOfWork,
        actor: Principal,
        target: AccessTarget,
        draft: MessageDraft,
        digest: str,
        *,
        allocated_seq: int | None = None,
    ) -> Message:
        """Store a text message (after a reopen line when the thread is done) and publish it.

        Args:
            uow: the unit of work.
            actor: the author.
            target: the thread with its channel and space.
            draft: the request.
            digest: the payload digest stored for idempotency.
            allocated_seq: a thread_seq the caller already allocated under the thread row
                lock (the freshness gate's compare-and-set); None to allocate here. The
                first row written takes it: the reopen line when there is one, else the
                message.

        Returns:
            The message as it was inserted (the subscribers may change it after; the
            unit's `turnkeeper.application.tracking.WrittenRows` has its last write).

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

        await self.reopen_if_done(uow, actor, target, next_seq, at=now)
        restricted = stored_audience(draft.restricted_to, actor.id)
        message = Message(
            id=self._ids.new_id(),
            thread_id=thread.id,
            thread_seq=await next_seq(),
            author_id=actor.id,
            origin=origin_for(actor.kind),
            kind=MessageKind.TEXT,
            content=draft.content,
            mentions=draft.mentions,
            reply_to_id=draft.reply_to_id,
            restricted_to=restricted,
            client_msg_id=draft.client_msg_id,
            digest=digest,
            created_at=now,
        )
        if restricted is not None and not thread.has_restricted:
            await uow.threads.mark_restricted(thread.id)
        await self.store(uow, message, actor, target, run_id=draft.run_id)
        return message

    async def reopen_if_done(
        self,
        uow: UnitOfWork,
        actor: Principal,
        target: AccessTarget,
        next_seq: Callable[[], Awaitable[int]] | None = None,
        *,
        at: datetime,
    ) -> None:
        """Before a message is stored in a done thread: reopen it with its system line.

        The decision is taken on the state read under the thread row lock (the state
        read with the target took no lock, and a close may have committed since): a
        close either waits for this unit or is seen here, so a message after a done
        state always comes after a reopen line. Of two concurrent writers into a done
        thread the second sees it open: exactly one writes the line.

        Args:
            uow: the unit of work (it holds the thread row lock from here on).
            actor: the author of the message that follows (the line's author).
            target: the thread with its channel and space.
            next_seq: allocates the line's seq (None: the thread's next seq).
            at: the time of the message that follows, which the line takes too (it is
                written first and must not look later).
        """
        thread = thread_of(target)
        locked = await uow.threads.lock_state(thread.id)
        if locked is not ThreadState.DONE or not await uow.threads.reopen(thread.id):
            return
        await uow.events.append(self._events.thread_reopened(thread, actor, target))
        seq = await (next_seq() if next_seq is not None else uow.threads.allocate_seq(thread.id))
        line = Message(
            id=self._ids.new_id(),
            thread_id=thread.id,
            thread_seq=seq,
            author_id=actor.id,
            origin=Origin.SYSTEM,
            kind=MessageKind.SYSTEM,
            content=SYSTEM_REOPENED_CONTENT,
            created_at=at,
        )
        await self.store(uow, line, actor, target)

    async def store(
        self,
        uow: UnitOfWork,
        message: Message,
        author: Principal,
        target: AccessTarget,
        *,
        run_id: uuid.UUID | None = None,
    ) -> None:
        """Insert a message at its allocated seq, append message.created, publish it.

        Args:
            uow: the unit of work (holding the thread row lock of the seq).
            message: the message, its thread_seq allocated.
            author: its author.
            target: its thread, channel and space.
            run_id: the run a kind run anchor belongs to, or the run an agent's answer
                names (checked by the subscribers, never stored on a text message).

        Raises:
            RetriableConflict: (author, client_msg_id) taken by a concurrent unit.
            DomainError: whatever an in-transaction subscriber vetoes with.
        """
        await uow.messages.add(message, self._events.message_created(message, author, target))
        await self._bus.publish(
            uow, MessagePosted(message=message, author=author, target=target, run_id=run_id)
        )


def draft_digests(
    place_id: uuid.UUID,
    draft: MessageDraft,
    author_id: uuid.UUID,
    *,
    first_of_thread: bool = False,
    title: str | None = None,
) -> tuple[str, Callable[[], tuple[str, ...]]]:
    """A request's payload digest, and the digests it had before (`replayed`'s ``earlier``).

    The digest reads the request's inputs as they are stored: the audience with its
    author (`stored_audience`) and, for a thread's first message, a title that counts as
    none as none (`given_title`). The earlier ones are what versions before stored
    under the same ``v1:`` prefix, so that their retries still replay: the inputs read
    as given; before 2026-12-06 the audience as a sorted list that kept a repeated id,
    and a thread's title joined to its content by a line break, with no reply; before
    2026-12-07 a title of the information separators U+001C to U+001F as none.

    Args:
        place_id: the thread (createThread: the channel).
        draft: the message asked for.
        author_id: its author.
        first_of_thread: createThread's first message, whose digest holds the title.
        title: createThread's title as requested.

    Returns:
        The digest, and the reader of the earlier ones.
    """
    digest = payload_digest(
        place_id,
        draft.content,
        draft.reply_to_id,
        stored_audience(draft.restricted_to, author_id),
        title=(given_title(title) or "") if first_of_thread else None,
    )

    def earlier() -> tuple[str, ...]:
        given = draft.restricted_to
        forms = [
            payload_digest(
                place_id,
                draft.content,
                draft.reply_to_id,
                given,
                title=(title or "") if first_of_thread else None,
            )
        ]
        if given is not None and len(set(given)) != len(given):
            forms.append(
                payload_digest(
                    place_id,
                    draft.content,
                    draft.reply_to_id,
                    given,
                    title=(title or "") if first_of_thread else None,
                    audience_repeats=True,
                )
            )
        if first_of_thread:
            forms.append(
                payload_digest(
                    place_id, f"{title or ''}\n{draft.content}", None, given, audience_repeats=True
                )
            )
            if title is not None and not title.strip() and given_title(title) is not None:
                # Before 2026-12-07 Python's white space (the information separators
                # U+001C to U+001F too) made a title count as none.
                forms.append(
                    payload_digest(
                        place_id,
                        draft.content,
                        draft.reply_to_id,
                        stored_audience(draft.restricted_to, author_id),
                        title="",
                    )
                )
        return tuple(forms)

    return digest, earlier


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


__all__ = [
    "MessageAppender",
    "draft_digests",
    "prefetch_references",
    "reference_errors",
    "refuse_if_limited",
    "replay",
    "replayed",
    "stored_audience",
]
