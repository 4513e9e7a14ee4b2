"""Agent sends through the freshness gate (DESIGN section 9, seed message-freshness-gate).

An agent writes into a thread with the frontier it has seen (``seen_up_to_seq``). The
message is stored only when nothing was written after that frontier; otherwise the
answer is ``held`` and the agent refreshes before it decides whether to write at all.

One unit of work, in this order (seed sections 3.2, 3.4 and 3.5):

1. authorize ``message.create`` on the thread (not_found without read, like an unknown
   id; forbidden without write);
2. idempotency lookup by (author, client_message_id): the same digest answers
   ``already_sent`` with the stored message and its seq, another digest is
   ``idempotency_conflict``;
3. one ``rl.message`` token (the same bucket as createMessage);
4. the compare-and-set ``CasThreadSeq``, the linearization point: one row is ``sent`` with
   ``accepted_seq = seen + 1`` and no further read;
5. zero rows: the idempotency lookup again (a concurrent identical send may have won),
   then the raw frontier. A thread without restricted messages answers ``held`` with the
   raw latest seq. A thread with restricted messages runs the bounded newest-first
   visibility check over (seen, raw latest]: ``held`` only with a proved author-visible
   seq, which is then the answer's ``latest_seq`` (never an invisible seq); without a
   proof it sends through a second compare-and-set against the raw latest it read. When
   that one misses too, a concurrent send moved the frontier: the frontier is read and
   the check repeated (``freshness.visible_miss_retries`` times), and after that the
   whole unit is rerun as a retriable conflict. A held send stores no message; it writes
   one ``message.held`` event that only the owner reads (no content, docs/events.md);
6. the message is stored exactly as createMessage stores it (`MessageAppender`):
   ``message.created`` and `MessagePosted`, so the runs subscriber checks ``run_id`` and
   nothing an agent writes triggers anything.

A retriable error (deadlock, unique race on the client id) reruns the whole unit with the
same key and digest, and every lookup compares the digest, so a rerun converges to the
same answer states.
"""

from __future__ import annotations

import uuid

import attrs

from turnkeeper.application.errors import RetriableConflict
from turnkeeper.application.event_factory import EventFactory
from turnkeeper.application.ports import Clock, PostFacts, ResolvedToken, UnitOfWork
from turnkeeper.application.ports.audit import AuditAction
from turnkeeper.application.services.access import authored_post_target
from turnkeeper.application.services.identity import BearerToken, record_use
from turnkeeper.application.services.messages_append import (
    MessageAppender,
    refuse_if_limited,
    replay,
    replayed,
)
from turnkeeper.application.services.send_records import (
    LOGGER_NAME,
    outcome_fields,
    refused_fields,
    send_log,
    seq_delta,
)
from turnkeeper.application.services.send_types import (
    AgentSend,
    SendFreshness,
    SendOutcome,
    SendPath,
)
from turnkeeper.application.settings import Settings
from turnkeeper.application.telemetry import SendAnswered
from turnkeeper.application.transactions import AccessDenied, Transactor
from turnkeeper.domain.authorization import AccessTarget
from turnkeeper.domain.errors import (
    DomainError,
    FieldError,
    ValidationFailed,
    character_errors,
    reject_invalid,
)
from turnkeeper.domain.freshness import SendState
from turnkeeper.domain.messaging import Message, MessageDraft, content_errors, payload_digest
from turnkeeper.domain.world import Principal, thread_target_key

#: The action of a refused send in the audit (a person or app is not an agent).
SEND_ACTION = AuditAction.AGENT_SEND


_log = send_log


@attrs.frozen(kw_only=True)
class _Allocation:
    """The miss branch's decision: a seq to store at, or a held frontier."""

    seq: int | None = None
    held_latest: int | None = None
    path: str


def send_digest(thread_id: uuid.UUID, content: str) -> str:
    """The idempotency digest of a send: createMessage's digest of a plain text message.

    A send and a createMessage with the same client id and content replay each other.

    Args:
        thread_id: the target thread.
        content: the text.

    Returns:
        `turnkeeper.domain.messaging.payload_digest` without reply_to and audience.
    """
    return payload_digest(thread_id, content, None, None)


def send_errors(request: AgentSend, *, settings: Settings) -> list[FieldError]:
    """The body rules of a send (seed section 3.1 step 5, and the rules of its content).

    An agent names no mentions, audience, reply or kind, and its run_id is checked by the
    answer check in the unit: only the content rules of createMessage apply besides the
    gate's own.

    Args:
        request: the decoded request.
        settings: ``freshness.*`` and ``message.max_content_bytes``.

    Returns:
        Every offending member: ``/freshness`` freshness_required,
        ``/client_message_id`` client_message_id_required or too_long
        (``message.max_client_id_length``), ``/freshness/target_key``
        target_key_required or target_key_mismatch, ``/freshness/seen_up_to_seq``
        negative, ``/freshness/source_message_ids`` too_many, and ``/content`` required
        or too_long; empty when the request is fine.
    """
    errors: list[FieldError] = []
    if not request.client_message_id:
        errors.append(FieldError(pointer="/client_message_id", code="client_message_id_required"))
    elif len(request.client_message_id) > settings.max_client_id_length:
        errors.append(FieldError(pointer="/client_message_id", code="too_long"))
    else:
        errors.extend(character_errors({"/client_message_id": request.client_message_id}))
    freshness = request.freshness
    if freshness is None:
        if settings.freshness_required_for_agents:
            errors.append(FieldError(pointer="/freshness", code="freshness_required"))
    else:
        if not freshness.target_key:
            errors.append(FieldError(pointer="/freshness/target_key", code="target_key_required"))
        elif freshness.target_key != thread_target_key(request.target):
            errors.append(FieldError(pointer="/freshness/target_key", code="target_key_mismatch"))
        if freshness.seen_up_to_seq < 0:
            errors.append(FieldError(pointer="/freshness/seen_up_to_seq", code="negative"))
        if len(freshness.source_message_ids) > settings.max_source_message_ids:
            errors.append(FieldError(pointer="/freshness/source_message_ids", code="too_many"))
    errors.extend(content_errors(request.content, max_content_bytes=settings.max_content_bytes))
    return errors


def _agents_only(principal: Principal) -> AccessDenied:
    return AccessDenied(
        code="forbidden",
        reason="agents_only",
        principal_id=principal.id,
        action=SEND_ACTION,
    )


def _draft(request: AgentSend) -> MessageDraft:
    return MessageDraft(
        client_msg_id=request.client_message_id,
        content=request.content,
        run_id=request.run_id,
    )


class AgentSendService:
    """POST /v1/agent/send: agent messages through the freshness gate.

    Args:
        tx: the transactor (retries, denial audit).
        appender: stores messages and publishes them to the subscribers.
        events: builds the ``message.held`` event of a held send.
        clock: the time of a bearer token's use.
        settings: ``freshness.*``, ``message.max_content_bytes``,
            ``auth.token_last_used_interval``.
    """

    def __init__(
        self,
        tx: Transactor,
        appender: MessageAppender,
        events: EventFactory,
        clock: Clock,
        settings: Settings,
    ) -> None:
        self._tx = tx
        self._appender = appender
        self._events = events
        self._clock = clock
        self._settings = settings

    async def send(self, actor: Principal | BearerToken, request: AgentSend) -> SendOutcome:
        """Send one agent message through the freshness gate.

        Args:
            actor: the sending principal (an agent), or the request's bearer token
                (resolved in the unit's first read, its last use recorded after the unit,
                as `ConversationService.create_message` does: ADR 0026).
            request: the decoded request.

        Returns:
            sent, already_sent or held (see `SendOutcome`).

        Raises:
            Unauthenticated: for a bearer token that is unknown or revoked.
            AccessDenied: forbidden / agents_only for a person or app; not_found without
                read on the thread; forbidden or channel_read_only without write.
            ValidationFailed: body rules (`send_errors`), ``/freshness/seen_up_to_seq``
                ahead_of_latest when the frontier is above the thread's, and
                ``/run_id`` run_mismatch from the runs subscriber.
            NotFound: for an unknown thread.
            IdempotencyConflict: the client id was used with another payload.
            RateLimited: the agent's rl.message bucket is empty.
            Conflict: run_not_active for the agent's own ended run.
            RetriableConflict: when every rerun met a concurrent frontier move.
        """
        sender = actor if isinstance(actor, Principal) else None
        if sender is not None and not sender.is_agent:
            denied = _agents_only(sender)
            await self._tx.record_denial(denied)
            raise denied
        caller: ResolvedToken | None = None

        def check(author: Principal) -> None:
            # A token's principal is known once the facts are read: the same checks, in
            # the same order, inside the unit (the transactor records the denial).
            nonlocal sender
            sender = author
            if not author.is_agent:
                raise _agents_only(author)
            reject_invalid(send_errors(request, settings=self._settings))

        try:
            if isinstance(actor, Principal):
                reject_invalid(send_errors(request, settings=self._settings))
            digest = send_digest(request.target, request.content)

            async def work(uow: UnitOfWork) -> tuple[SendOutcome, ResolvedToken | None]:
                authored = await authored_post_target(
                    uow,
                    actor,
                    request.target,
                    request.client_message_id,
                    self._appender.message_take(),
                    check,
                )
                author, facts = authored.author, authored.facts
                outcome = await self._decide(uow, author, request, digest, facts)
                outcome = attrs.evolve(outcome, space_id=facts.target.space.id)
                # On the use case's span: a trace shows the gate's decision of the
                # attempt that commits (a retried attempt's values are overwritten).
                self._tx.telemetry.annotate(outcome_fields(author, request, outcome))
                return outcome, authored.token

            outcome, caller = await self._tx.run(work)
        except DomainError as refused:
            # Not for a token nobody owns, nor a person's agents_only (as before the unit).
            if sender is not None and sender.is_agent:
                _log().info("agent_send_refused", **refused_fields(sender, request, refused))
            raise
        assert sender is not None
        if caller is not None:
            await record_use(self._tx, caller, self._clock, self._settings.token_last_used_interval)
        _log().info("agent_send", **outcome_fields(sender, request, outcome))
        self._tx.telemetry.send_answered(
            SendAnswered(
                state=outcome.state.value,
                gated=request.freshness is not None,
                seq_delta=seq_delta(outcome),
            )
        )
        return outcome

    async def _decide(
        self,
        uow: UnitOfWork,
        actor: Principal,
        request: AgentSend,
        digest: str,
        facts: PostFacts,
    ) -> SendOutcome:
        target = facts.target
        key = thread_target_key(request.target)
        seen = request.freshness.seen_up_to_seq if request.freshness else None
        existing = _already_sent(
            replayed(facts.earlier, digest), request, key, seen, SendPath.REPLAY
        )
        if existing is not None:
            return existing
        refuse_if_limited(facts.retry_after)
        draft = _draft(request)
        if seen is None:
            message = await self._appender.append(uow, actor, target, draft, digest)
            return _sent(message, key, None, SendPath.COMPAT)
        seq = await uow.freshness.compare_and_allocate(request.target, seen)
        path = SendPath.CAS
        if seq is None:
            # A miss is mostly held: the owner its message.held goes to arrives with the
            # replay lookup (wasted when the send goes through after all).
            await uow.principals.prefetch_owner()
            again = await self._replay(uow, actor, request, digest, key, seen, SendPath.MISS_REPLAY)
            if again is not None:
                return again
            allocation = await self._after_miss(uow, actor, request.target, seen)
            if allocation.seq is None:
                assert allocation.held_latest is not None
                held = SendOutcome(
                    state=SendState.HELD,
                    target_key=key,
                    client_message_id=request.client_message_id,
                    seen_up_to_seq=seen,
                    latest_seq=allocation.held_latest,
                    needs_refresh_until_seq=allocation.held_latest,
                    path=allocation.path,
                )
                await self._record_held(uow, actor, request, target, held)
                return held
            seq, path = allocation.seq, allocation.path
        message = await self._appender.append(uow, actor, target, draft, digest, allocated_seq=seq)
        return _sent(message, key, seen, path)

    async def _record_held(
        self,
        uow: UnitOfWork,
        actor: Principal,
        request: AgentSend,
        target: AccessTarget,
        held: SendOutcome,
    ) -> None:
        """``message.held`` for the owner, so that the console can show the held send."""
        owner = await uow.principals.owner()
        if owner is None or held.seen_up_to_seq is None:
            return
        event = self._events.message_held(
            actor,
            target,
            owner_id=owner.id,
            seen_up_to_seq=held.seen_up_to_seq,
            latest_seq=held.latest_seq,
            client_message_id=held.client_message_id,
            run_id=request.run_id,
        )
        await uow.events.append(event)

    async def _replay(
        self,
        uow: UnitOfWork,
        actor: Principal,
        request: AgentSend,
        digest: str,
        key: str,
        seen: int | None,
        path: str,
    ) -> SendOutcome | None:
        """already_sent for a stored client id with the same digest, else None."""
        existing = await replay(uow, actor, request.client_message_id, digest)
        return _already_sent(existing, request, key, seen, path)

    async def _after_miss(
        self, uow: UnitOfWork, actor: Principal, thread_id: uuid.UUID, seen: int
    ) -> _Allocation:
        """The miss branch of the allocator (seed section 3.4, steps 1 to 7)."""
        for _ in range(self._settings.visible_miss_retries + 1):
            frontier = await uow.freshness.frontier(thread_id)
            raw = frontier.latest_seq
            if raw < seen:
                # The agent claims a frontier the thread never reached: a client bug
                # (a stale mapping, a made-up seq), not a reason to hold or to send.
                raise ValidationFailed(
                    [FieldError(pointer="/freshness/seen_up_to_seq", code="ahead_of_latest")]
                )
            if raw > seen:
                if not frontier.has_restricted:
                    return _Allocation(held_latest=raw, path=SendPath.HELD_RAW)
                visible = await self._newest_visible(uow, actor.id, thread_id, seen, raw)
                if visible is not None:
                    return _Allocation(held_latest=visible, path=SendPath.HELD_VISIBLE)
            # Nothing after `seen` is proved visible to the author (or the frontier came
            # back to it): the send linearizes through a second compare-and-set against
            # the raw frontier just read, which keeps thread_seq gapless and monotonic.
            seq = await uow.freshness.compare_and_allocate(thread_id, raw)
            if seq is not None:
                path = SendPath.CAS if raw == seen else SendPath.VISIBLE_MISS_CAS
                return _Allocation(seq=seq, path=path)
        raise RetriableConflict("freshness_frontier_moved", reason="freshness_cas_contended")

    async def _newest_visible(
        self, uow: UnitOfWork, viewer_id: uuid.UUID, thread_id: uuid.UUID, seen: int, raw: int
    ) -> int | None:
        """The newest author-visible seq in (seen, raw], when the bounded check proves one.

        Newest first, ``freshness.visible_miss_batch`` rows per batch, at most
        ``freshness.visible_miss_batches`` batches; the first batch that holds a visible
        message gives the newest visible seq of the whole range.
        """
        through = raw
        batch = self._settings.visible_miss_batch
        for _ in range(self._settings.visible_miss_batches):
            window = await uow.freshness.newest_visible(
                thread_id, viewer_id, after_seq=seen, through_seq=through, batch=batch
            )
            if window.newest_visible_seq is not None:
                return window.newest_visible_seq
            if window.examined < batch or window.lowest_seq is None:
                return None
            through = window.lowest_seq - 1
            if through <= seen:
                return None
        return None


def _already_sent(
    existing: Message | None, request: AgentSend, key: str, seen: int | None, path: str
) -> SendOutcome | None:
    """already_sent for the message a replay found, None when there is none."""
    if existing is None:
        return None
    return SendOutcome(
        state=SendState.ALREADY_SENT,
        target_key=key,
        client_message_id=request.client_message_id,
        message_id=existing.id,
        accepted_seq=existing.thread_seq,
        latest_seq=existing.thread_seq,
        seen_up_to_seq=seen,
        path=path,
    )


def _sent(message: Message, key: str, seen: int | None, path: str) -> SendOutcome:
    return SendOutcome(
        state=SendState.SENT,
        target_key=key,
        client_message_id=message.client_msg_id or "",
        message_id=message.id,
        accepted_seq=message.thread_seq,
        latest_seq=message.thread_seq,
        seen_up_to_seq=seen,
        path=path,
    )


__all__ = [
    "LOGGER_NAME",
    "SEND_ACTION",
    "AgentSend",
    "AgentSendService",
    "SendFreshness",
    "SendOutcome",
    "SendPath",
    "send_digest",
    "send_errors",
]
