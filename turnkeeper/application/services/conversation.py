"""Conversation use cases: threads, messages, history and the shared event feed.

Writing a message: the body rules first (no I/O), then in one unit of work: authorize,
replay lookup by (author, client_msg_id), references, rate limit, reopen a done thread
with a system line, allocate thread_seq under the thread row lock, insert, append
message.created, then publish `MessagePosted` so that in-transaction subscribers (the
runs capability) can act or veto. Nothing here knows about runs; the answer shows the
message and thread as the unit commits them (after the subscribers), and what became of
the message as the store tells it (`message_trigger`, the same on every replay). The storing steps
are shared with the freshness gate of agent sends
(`turnkeeper.application.services.messages_append`).
"""

from __future__ import annotations

import uuid

import attrs

from turnkeeper.application.event_factory import EventFactory
from turnkeeper.application.ports import Clock, IdGenerator, ResolvedToken, UnitOfWork
from turnkeeper.application.services.access import (
    authored_post_target,
    authorized_thread,
    channel_target,
    enforce,
    reader_scope,
    require,
    thread_of,
)
from turnkeeper.application.services.identity import BearerToken, record_use
from turnkeeper.application.services.messages_append import (
    MessageAppender,
    draft_digests,
    prefetch_references,
    reference_errors,
    refuse_if_limited,
    replay,
    replayed,
)
from turnkeeper.application.services.send_records import report_ungated
from turnkeeper.application.services.trigger_report import message_trigger
from turnkeeper.application.settings import Settings
from turnkeeper.application.tracking import TrackedUnit
from turnkeeper.application.transactions import Transactor
from turnkeeper.domain.authorization import AccessTarget, Action
from turnkeeper.domain.errors import (
    FieldError,
    NotFound,
    ValidationFailed,
    character_errors,
    reject_invalid,
)
from turnkeeper.domain.events import MAX_SEQ, Event
from turnkeeper.domain.messaging import (
    Message,
    MessageDraft,
    draft_errors,
    thread_title,
)
from turnkeeper.domain.trigger_report import MessageTrigger
from turnkeeper.domain.world import (
    Principal,
    Thread,
    ThreadState,
    TitleSource,
    effective_operator,
)

#: Where a thread's first message sits in the request that creates the thread.
FIRST_MESSAGE_POINTER = "/first_message"


@attrs.frozen(kw_only=True)
class PostedMessage:
    """The answer of createMessage.

    Attributes:
        message: the stored message as committed (with the trigger_state and version the
            in-transaction decisions gave it), or on a replay the message as it is now.
        author: its author.
        replayed: True when an earlier identical request stored it.
        trigger: what became of the message (the same on every replay).
    """

    message: Message
    author: Principal
    replayed: bool
    trigger: MessageTrigger


@attrs.frozen(kw_only=True)
class CreatedThread:
    """The answer of createThread.

    Attributes:
        thread: the thread as committed (its latest_seq counts a run anchor the first
            message opened), or on a replay as it is now.
        message: its first message, as committed or as it is now.
        author: the author of the first message.
        replayed: True when an earlier identical request created it.
        trigger: what became of the first message (the same on every replay).
    """

    thread: Thread
    message: Message
    author: Principal
    replayed: bool
    trigger: MessageTrigger


@attrs.frozen(kw_only=True)
class MessagePage:
    """One page of a thread's history.

    Attributes:
        messages: the visible messages, oldest first.
        authors: the authors of those messages by id.
        covers_through_seq: every seq up to this one was considered (visible ones are in
            this page or an earlier one), so a reader may treat it as seen.
    """

    messages: list[Message]
    authors: dict[uuid.UUID, Principal]
    covers_through_seq: int


@attrs.frozen(kw_only=True)
class EventPage:
    """One page of the shared event feed.

    Attributes:
        events: the events, by seq.
        next_after: the cursor for the next call.
    """

    events: list[Event]
    next_after: int


class ConversationService:
    """Threads and messages for people and agents.

    Args:
        tx: the transactor.
        appender: stores messages and publishes them to the subscribers.
        events: the event factory.
        clock: the time.
        ids: the UUIDv7 source.
        settings: limits (``message.max_content_bytes``, ``page.*``).
    """

    def __init__(
        self,
        tx: Transactor,
        appender: MessageAppender,
        events: EventFactory,
        clock: Clock,
        ids: IdGenerator,
        settings: Settings,
    ) -> None:
        self._tx = tx
        self._appender = appender
        self._events = events
        self._clock = clock
        self._ids = ids
        self._settings = settings

    # -- writing -------------------------------------------------------------------------

    async def create_thread(
        self,
        actor: Principal,
        channel_id: uuid.UUID,
        *,
        title: str | None,
        first_message: MessageDraft,
        kind: str | None = None,
    ) -> CreatedThread:
        """Create a thread with its first message (a report thread when an agent does it).

        The thread gets the channel's effective operator as its fixed operator; an
        agent's thread gets title_source auto and, without a title, the first line of a
        public first message (`auto_title`: none from a restricted one).

        Args:
            actor: the author.
            channel_id: the channel (text or forum).
            title: optional title.
            first_message: the first message.
            kind: the first message's ``kind`` member as sent.

        Returns:
            The thread and its first message (or the replayed originals).

        Raises:
            ValidationFailed: body rules (pointers under ``/first_message``).
            AccessDenied: without write on the channel (not_found without read).
            NotFound: for an unknown channel.
            IdempotencyConflict: a reused client id with another payload.
            RateLimited: the author's rl.message bucket is empty.
        """
        reject_invalid(
            [
                *character_errors({"/title": title}),
                *draft_errors(
                    first_message,
                    author_kind=actor.kind,
                    kind=kind,
                    max_content_bytes=self._settings.max_content_bytes,
                    max_client_id_length=self._settings.max_client_id_length,
                    prefix=FIRST_MESSAGE_POINTER,
                    first_message=True,
                ),
            ]
        )

        async def work(uow: TrackedUnit) -> CreatedThread:
            await prefetch_references(uow, first_message)
            target = await channel_target(uow, channel_id)
            await require(uow, actor, Action.THREAD_CREATE, target)
            # The first message's digest names the channel and title: the thread id does
            # not exist before the first request, and a replay must find the same one. A
            # title that counts as none digests as none, and the audience as it is stored
            # (with the author), so that every request of one thread and message replays.
            digest, earlier = draft_digests(
                channel_id, first_message, actor.id, first_of_thread=True, title=title
            )
            existing = await replay(uow, actor, first_message.client_msg_id, digest, earlier)
            if existing is not None:
                thread = await uow.threads.get(existing.thread_id)
                if thread is None:
                    raise NotFound()
                return CreatedThread(
                    thread=thread,
                    message=existing,
                    author=actor,
                    replayed=True,
                    trigger=await message_trigger(uow, existing),
                )
            reject_invalid(
                await reference_errors(
                    uow,
                    first_message,
                    thread_id=None,
                    author_id=actor.id,
                    prefix=FIRST_MESSAGE_POINTER,
                )
            )
            await self._appender.take_rate_token(uow, actor)
            thread = Thread(
                id=self._ids.new_id(),
                channel_id=channel_id,
                title=thread_title(title, first_message, by_agent=actor.is_agent),
                title_source=TitleSource.AUTO if actor.is_agent else TitleSource.HUMAN,
                operator_agent_id=effective_operator(target.channel, target.space),
                created_by=actor.id,
                created_at=self._clock.now(),
            )
            await uow.threads.add(thread)
            # The event shows the thread with its first message, as a reader of the log
            # meets it: the message.created that follows is seq 1.
            await uow.events.append(
                self._events.thread_created(attrs.evolve(thread, latest_seq=1), actor, target)
            )
            in_thread = AccessTarget(space=target.space, channel=target.channel, thread=thread)
            try:
                stored = await self._appender.append(uow, actor, in_thread, first_message, digest)
            except ValidationFailed as refused:
                # A subscriber of `MessagePosted` points into the message it was given,
                # which sits under /first_message of this request.
                raise refused.under(FIRST_MESSAGE_POINTER) from refused
            message = uow.written.message(stored)
            return CreatedThread(
                thread=uow.written.thread(thread),
                message=message,
                author=actor,
                replayed=False,
                trigger=await message_trigger(uow, message),
            )

        created = await self._tx.run(work)
        report_ungated(self._tx.telemetry, created.author, created.message, created.replayed)
        return created

    async def create_message(
        self,
        actor: Principal | BearerToken,
        thread_id: uuid.UUID,
        draft: MessageDraft,
        *,
        kind: str | None = None,
    ) -> PostedMessage:
        """Write a message into a thread, as a person or an agent.

        Args:
            actor: the author, or the request's bearer token (resolved in the unit's
                first read, its last use recorded after the unit as
                `IdentityService.authenticate` records it: ADR 0026).
            thread_id: the thread.
            draft: the decoded request.
            kind: the request's ``kind`` member as sent.

        Returns:
            The stored message, or the original on a replay (nothing published again).

        Raises:
            Unauthenticated: for a bearer token that is unknown or revoked.
            ValidationFailed: body rules, unknown mentions, reply_to in another thread.
            AccessDenied: without write (not_found without read; channel_read_only).
            NotFound: for an unknown thread.
            IdempotencyConflict: a reused client id with another payload.
            RateLimited: the author's rl.message bucket is empty.
            DomainError: whatever an in-transaction subscriber vetoes with.
        """

        def check_draft(author: Principal) -> None:
            reject_invalid(
                draft_errors(
                    draft,
                    author_kind=author.kind,
                    kind=kind,
                    max_content_bytes=self._settings.max_content_bytes,
                    max_client_id_length=self._settings.max_client_id_length,
                )
            )

        if isinstance(actor, Principal):
            check_draft(actor)

        async def work(uow: TrackedUnit) -> tuple[PostedMessage, ResolvedToken | None]:
            await prefetch_references(uow, draft)
            authored = await authored_post_target(
                uow,
                actor,
                thread_id,
                draft.client_msg_id,
                self._appender.message_take(),
                check_draft,
            )
            author, facts, caller = authored.author, authored.facts, authored.token
            # The audience as stored (with the author, known only now for a token): a
            # retry naming the author or not is the same request.
            digest, earlier = draft_digests(thread_id, draft, author.id)
            existing = replayed(facts.earlier, digest, earlier)
            if existing is not None:
                posted = PostedMessage(
                    message=existing,
                    author=author,
                    replayed=True,
                    trigger=await message_trigger(uow, existing),
                )
                return posted, caller
            reject_invalid(
                await reference_errors(uow, draft, thread_id=thread_id, author_id=author.id)
            )
            refuse_if_limited(facts.retry_after)
            message = uow.written.message(
                await self._appender.append(uow, author, facts.target, draft, digest)
            )
            posted = PostedMessage(
                message=message,
                author=author,
                replayed=False,
                trigger=await message_trigger(uow, message),
            )
            return posted, caller

        posted, caller = await self._tx.run(work)
        if caller is not None:
            await record_use(self._tx, caller, self._clock, self._settings.token_last_used_interval)
        report_ungated(self._tx.telemetry, posted.author, posted.message, posted.replayed)
        return posted

    async def close_thread(self, actor: Principal, thread_id: uuid.UUID) -> Thread:
        """Mark a thread done (a person with write on it, or the owner).

        Raises:
            AccessDenied: for agents and people without write.
            NotFound: for an unknown thread.
        """

        async def work(uow: UnitOfWork) -> Thread:
            # Under the row lock: a close that waited for the thread behind posts decides
            # on an archive committed meanwhile (ADR 0044).
            target = await authorized_thread(uow, actor, Action.THREAD_CLOSE, thread_id, lock=True)
            thread_of(target)  # a channel is no thread (404)
            # The thread as the close left it: a post committed while the close waited
            # for the row moved the frontier the target was read at.
            return await uow.threads.set_state(thread_id, ThreadState.DONE)

        return await self._tx.run(work)

    # -- reading -------------------------------------------------------------------------

    async def get_thread(self, actor: Principal, thread_id: uuid.UUID) -> Thread:
        """A thread the caller may read.

        Raises:
            AccessDenied: not_found without read.
            NotFound: for an unknown thread.
        """

        async def work(uow: UnitOfWork) -> Thread:
            return thread_of(await authorized_thread(uow, actor, Action.THREAD_READ, thread_id))

        return await self._tx.read(work)

    async def list_messages(
        self,
        actor: Principal,
        thread_id: uuid.UUID,
        *,
        after_seq: int = 0,
        limit: int | None = None,
    ) -> MessagePage:
        """The caller's view of a thread's history after a seq.

        Args:
            actor: the reader.
            thread_id: the thread.
            after_seq: return messages with a higher thread_seq.
            limit: page size, at most ``page.max_limit`` (default ``page.default_limit``).

        Returns:
            The page with ``covers_through_seq``.

        Raises:
            ValidationFailed: for a negative after_seq or a limit out of range.
            AccessDenied: not_found without read.
            NotFound: for an unknown thread.
        """
        size = self._settings.page_size(limit)
        reject_invalid(_cursor_errors("/after_seq", after_seq))

        async def work(uow: UnitOfWork) -> MessagePage:
            # The thread, the grants and the page in one round trip: a refused page is
            # read and dropped, answered with nothing of it.
            facts = await uow.threads.history_facts(thread_id, actor.id, after_seq, size)
            if facts is None:
                raise NotFound()
            enforce(actor, Action.THREAD_READ, facts.target, facts.grants)
            thread = thread_of(facts.target)
            messages = facts.messages
            authors = await uow.principals.get_many(list({m.author_id for m in messages}))
            # A short page saw everything up to the frontier read with the thread (hidden
            # restricted messages included); a full page covers through its last message.
            # A cursor past the end covers nothing beyond what exists: seqs not written yet
            # are not seen, whatever the caller asked after.
            if len(messages) < size:
                covers = thread.latest_seq
                if messages:
                    covers = max(covers, messages[-1].thread_seq)
            else:
                covers = messages[-1].thread_seq
            return MessagePage(messages=messages, authors=authors, covers_through_seq=covers)

        return await self._tx.read(work)

    async def list_events(
        self, actor: Principal, *, after: int = 0, limit: int | None = None
    ) -> EventPage:
        """The shared events after a cursor that the caller may read.

        Raises:
            ValidationFailed: for a negative cursor or a limit out of range.
        """
        size = self._settings.page_size(limit)
        reject_invalid(_cursor_errors("/after", after))

        async def work(uow: UnitOfWork) -> EventPage:
            scope = await reader_scope(uow, actor)
            events = await uow.events.read(scope, after, size)
            return EventPage(events=events, next_after=events[-1].seq if events else after)

        return await self._tx.read(work)


def _cursor_errors(pointer: str, value: int) -> list[FieldError]:
    return [] if 0 <= value <= MAX_SEQ else [FieldError(pointer=pointer, code="out_of_range")]
