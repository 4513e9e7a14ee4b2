"""Agent runs: trigger acceptance, agent feed, lifecycle, end of run and jobs.

The agent feed delivers fresh invocation tokens; one end-of-run function serves every
path that ends a run; the periodic jobs are application services driven by the clock.

Lock order everywhere: thread row (message append), then run row, then messages. The
acceptance runs inside the unit of work of the message that triggers it (as the
subscriber of `MessagePosted`), so a trigger and its message commit or roll back together.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import attrs
import structlog

from turnkeeper.application.bus import EventBus, MessagePosted
from turnkeeper.application.documents import Document, message_document, rfc3339
from turnkeeper.application.errors import BaseVersionConflict, InvalidToken
from turnkeeper.application.ports import (
    AgentCursor,
    Clock,
    IdGenerator,
    InvocationClaims,
    TokenSigner,
    UnitOfWork,
)
from turnkeeper.application.services.access import require, thread_of, thread_target
from turnkeeper.application.services.messages_append import new_event
from turnkeeper.application.settings import Settings
from turnkeeper.application.transactions import AccessDenied, Transactor, window_start
from turnkeeper.domain.authorization import AccessTarget, Action, effective_level
from turnkeeper.domain.errors import (
    Conflict,
    FieldError,
    InvalidStateTransition,
    NotFound,
    ValidationFailed,
)
from turnkeeper.domain.events import Event, EventType, NewEvent
from turnkeeper.domain.followups import (
    OPEN_STATES,
    FollowupMode,
    FollowupState,
    RunEnd,
    advance_followup,
    effective_followup_mode,
    followup_event_needed,
    plan_run_end,
)
from turnkeeper.domain.messaging import Message, MessageKind, Origin, TriggerState
from turnkeeper.domain.runs import (
    TRIGGER_STATE_OF,
    AgentFacts,
    AnswerVerdict,
    EndReason,
    InvokeFacts,
    OutcomeKind,
    Run,
    RunState,
    TriggerFacts,
    TriggerKind,
    answer_verdict,
    check_invoke,
    decide_trigger,
    end,
    finish,
    move,
)
from turnkeeper.domain.world import BillingMode, Level, Principal, PrincipalKind, effective_operator

_log = structlog.get_logger("turnkeeper.runs")
_T = TypeVar("_T")

#: Called by the end-of-run function after the transition, in the same unit of work:
#: (unit, run before, run after). The follow-ups capability settles its rows here.
RunEndHook = Callable[[UnitOfWork, Run, Run], Awaitable[None]]


@attrs.frozen(kw_only=True)
class Delivery:
    """One event of an agent's personal feed as delivered now.

    Attributes:
        event: the stored event.
        invocation_token: a fresh token for agent.invocation and agent.followup.
        redelivered: the event was delivered before without an ack.
    """

    event: Event
    invocation_token: str | None
    redelivered: bool


@attrs.frozen(kw_only=True)
class AgentEventPage:
    """A page of an agent's feed.

    Attributes:
        deliveries: the deliverable events.
        next_after: the cursor for the next poll.
    """

    deliveries: list[Delivery]
    next_after: int


@attrs.frozen(kw_only=True)
class RunView:
    """A run as its document shows it.

    Attributes:
        run: the run.
        followups: follow-up states by message id.
    """

    run: Run
    followups: dict[uuid.UUID, str] = attrs.field(factory=dict)


def run_document(view: RunView) -> Document:
    """The Run document of API.md (no null; ``cancel_requested`` only when true)."""
    run = view.run
    doc: Document = {
        "id": str(run.id),
        "thread_id": str(run.thread_id),
        "agent_id": str(run.agent_id),
        "state": run.state.value,
        "trigger_kind": run.trigger_kind.value,
        "triggering_message_id": str(run.triggering_message_id),
        "triggered_by": str(run.triggered_by),
        "version": run.version,
        "followups": {str(k): {"state": v} for k, v in view.followups.items()},
        "created_at": rfc3339(run.created_at),
        "updated_at": rfc3339(run.updated_at),
    }
    if run.state_reason is not None:
        doc["state_reason"] = run.state_reason
    if run.cancel_requested:
        doc["cancel_requested"] = True
    return doc


class RunsService:
    """Everything about runs.

    Args:
        tx: the transactor.
        bus: the in-transaction bus (this service subscribes to MessagePosted).
        clock: the time.
        ids: UUIDv7 and jti source.
        settings: ``agent.*``, ``run.*``, ``jobs.*``, ``page.*``.
        signer: signs invocation tokens.
    """

    def __init__(
        self,
        tx: Transactor,
        bus: EventBus,
        clock: Clock,
        ids: IdGenerator,
        settings: Settings,
        signer: TokenSigner,
    ) -> None:
        self._tx = tx
        self._clock = clock
        self._ids = ids
        self._settings = settings
        self._signer = signer
        self._bus = bus
        self.end_hooks: list[RunEndHook] = []
        bus.subscribe(MessagePosted, self.on_message_posted)

    # -- acceptance ----------------------------------------------------------------------

    async def on_message_posted(self, uow: UnitOfWork, posted: MessagePosted) -> None:
        """React to a new message inside its unit of work.

        Agent messages naming a run are checked (an error vetoes the whole unit); only
        human messages are ever considered as triggers.

        Args:
            uow: the message's unit of work.
            posted: the event.

        Raises:
            ValidationFailed: run_mismatch for a run_id the agent may not name.
            Conflict: run_not_active for the agent's own ended run.
        """
        if posted.run_id is not None and posted.kind is MessageKind.TEXT:
            await self._check_answer(uow, posted)
        if posted.origin is not Origin.HUMAN:
            return
        known = posted.target
        target = (
            known
            if known is not None and known.thread is not None
            else await thread_target(uow, posted.thread_id)
        )
        thread = thread_of(target)
        operator_id = (
            effective_operator(target.channel, target.space)
            if thread.is_main
            else thread.operator_agent_id
        )
        principals = await uow.principals.get_many(list(posted.mentions)) if posted.mentions else {}
        agents = {p.id: _agent_facts(p) for p in principals.values() if p.is_agent}
        guests = frozenset(
            [
                agent_id
                for agent_id in posted.mentions
                if agent_id in agents
                and effective_level(
                    principals[agent_id], target, await uow.grants.for_principal(agent_id)
                )
                >= Level.WRITE
            ]
        )
        facts = TriggerFacts(
            origin=posted.origin,
            author_id=posted.author_id,
            mentions=posted.mentions,
            agents=agents,
            operator_id=operator_id,
            is_main_thread=thread.is_main,
            behavior=target.channel.behavior,
            guests_with_write=guests,
            audience=None if posted.restricted_to is None else frozenset(posted.restricted_to),
        )
        # Whether there is a candidate at all does not depend on the active run: most
        # messages stop here without touching the run row.
        if decide_trigger(facts).kind is OutcomeKind.NONE:
            return
        # The thread row is locked by the append; the run row lock keeps the active run
        # a fact until commit, also against its end.
        active = await uow.runs.lock_active_in_thread(thread.id)
        if operator_id is not None and operator_id not in agents:
            operator = await uow.principals.get(operator_id)
            if operator is not None and operator.is_agent:
                agents[operator_id] = _agent_facts(operator)
        outcome = decide_trigger(
            attrs.evolve(
                facts,
                agents=agents,
                active_run_id=active.id if active else None,
                active_run_agent_id=active.agent_id if active else None,
            )
        )
        if outcome.kind is OutcomeKind.NONE:
            return
        if outcome.kind is OutcomeKind.FAILED:
            await self._set_trigger_state(
                uow, target, posted.message_id, TriggerState.FAILED, str(outcome.reason)
            )
            return
        assert outcome.agent_id is not None
        author = await uow.principals.get(posted.author_id)
        assert author is not None
        reason = check_invoke(
            InvokeFacts(
                origin=posted.origin,
                author_id=author.id,
                author_level=effective_level(
                    author, target, await uow.grants.for_principal(author.id)
                ),
                channel_archived=target.channel.archived,
                agent=agents[outcome.agent_id],
            )
        )
        action = "run.followup.create" if outcome.kind is OutcomeKind.FOLLOWUP else "agent.invoke"
        if reason is not None:
            await self._audit(uow, author.id, action, str(reason))
            if outcome.mentioned:
                await self._set_trigger_state(
                    uow, target, posted.message_id, TriggerState.FAILED, str(reason)
                )
            return
        if outcome.kind is OutcomeKind.FOLLOWUP:
            assert active is not None
            await self._accept_followup(uow, target, active, posted.message_id, author)
            return
        await self.open_run(uow, target, posted.message_id, author.id, outcome.agent_id)

    async def _accept_followup(
        self,
        uow: UnitOfWork,
        target: AccessTarget,
        run: Run,
        message_id: uuid.UUID,
        author: Principal,
    ) -> None:
        """Make a message a queued follow-up of the thread's active run (locked)."""
        now = self._clock.now()
        await uow.followups.add(run.id, message_id, now)
        changed = attrs.evolve(run, version=run.version + 1, updated_at=now)
        await self._store(uow, run, changed, author, target=target)
        await self._set_trigger_state(uow, target, message_id, TriggerState.RECEIVED, None)
        agent = await uow.principals.get(run.agent_id)
        assert agent is not None
        if followup_event_needed(_mode(agent), run.state):
            await self._followup_event(uow, target, run.id, message_id, author.id)

    async def _followup_event(
        self,
        uow: UnitOfWork,
        target: AccessTarget,
        run_id: uuid.UUID,
        message_id: uuid.UUID,
        author_id: uuid.UUID,
    ) -> None:
        run = await uow.runs.get(run_id)
        assert run is not None
        await uow.events.append(
            self._event(
                EventType.AGENT_FOLLOWUP,
                target,
                actor_id=author_id,
                actor_kind=PrincipalKind.PERSON.value,
                resource_kind="run",
                resource_id=run_id,
                audience_id=run.agent_id,
                payload={
                    "run_id": str(run_id),
                    "thread_id": str(run.thread_id),
                    "message_id": str(message_id),
                },
            )
        )

    async def open_run(
        self,
        uow: UnitOfWork,
        target: AccessTarget,
        message_id: uuid.UUID,
        author_id: uuid.UUID,
        agent_id: uuid.UUID,
    ) -> Run:
        """Open a queued run: the run, its anchor, trigger_state received, agent.invocation.

        Args:
            uow: the unit of work (holding the thread row lock).
            target: the thread's target.
            message_id: the triggering message.
            author_id: its author.
            agent_id: the agent.

        Returns:
            The new run.
        """
        now = self._clock.now()
        thread = thread_of(target)
        run = Run(
            id=self._ids.new_id(),
            thread_id=thread.id,
            agent_id=agent_id,
            triggering_message_id=message_id,
            triggered_by=author_id,
            created_at=now,
            updated_at=now,
        )
        await uow.runs.add(run)
        agent = await uow.principals.get(agent_id)
        assert agent is not None
        anchor = Message(
            id=self._ids.new_id(),
            thread_id=thread.id,
            thread_seq=await uow.threads.allocate_seq(thread.id),
            author_id=agent_id,
            origin=Origin.SYSTEM,
            kind=MessageKind.RUN,
            content="",
            run_id=run.id,
            created_at=now,
        )
        await uow.messages.add(anchor)
        await uow.events.append(
            self._event(
                EventType.MESSAGE_CREATED,
                target,
                actor=agent,
                resource_kind="message",
                resource_id=anchor.id,
                resource_version=anchor.version,
                payload={"message": message_document(anchor, agent)},
            )
        )
        await self._bus.publish(
            uow,
            MessagePosted(
                message_id=anchor.id,
                thread_id=thread.id,
                channel_id=target.channel.id,
                space_id=target.space.id,
                author_id=agent.id,
                author_kind=agent.kind,
                origin=anchor.origin,
                kind=anchor.kind,
                run_id=run.id,
            ),
        )
        await self._set_trigger_state(uow, target, message_id, TriggerState.RECEIVED, None)
        await uow.events.append(
            self._event(
                EventType.AGENT_INVOCATION,
                target,
                actor_id=author_id,
                actor_kind=PrincipalKind.PERSON.value,
                resource_kind="run",
                resource_id=run.id,
                audience_id=agent_id,
                payload={
                    "run_id": str(run.id),
                    "thread_id": str(thread.id),
                    "message_id": str(message_id),
                },
            )
        )
        _log.info("run_opened", run_id=str(run.id), agent_id=str(agent_id))
        return run

    async def _check_answer(self, uow: UnitOfWork, posted: MessagePosted) -> None:
        if posted.origin is not Origin.AGENT:
            # Messaging never builds this; a run_id from a non-agent is refused earlier.
            raise RuntimeError("run_id on a message that is not an agent's")
        assert posted.run_id is not None
        run = await uow.runs.lock_for_answer(posted.run_id)
        verdict = answer_verdict(run, run is not None, posted.author_id, posted.thread_id)
        if verdict is AnswerVerdict.RUN_MISMATCH:
            raise ValidationFailed([FieldError(pointer="/run_id", code="run_mismatch")])
        if verdict is AnswerVerdict.RUN_NOT_ACTIVE:
            raise Conflict("run not active", reason="run_not_active")

    # -- the agent feed --------------------------------------------------------------------

    async def poll(
        self, agent: Principal, *, after: int | None = None, limit: int | None = None
    ) -> AgentEventPage:
        """Deliver an agent's personal events with fresh invocation tokens.

        Every delivery of agent.invocation re-checks agent.invoke for the run's author
        with the rights of this moment; a denial sends nothing, marks the message failed
        and ends the queued run. Invocations of runs that are no longer queued are not
        deliverable and are skipped.

        Args:
            agent: the polling agent.
            after: cursor; the acknowledged position when None.
            limit: page size (``page.default_limit`` when None, at most ``page.max_limit``).

        Returns:
            The deliveries and the next cursor.

        Raises:
            AccessDenied: when the caller is not an agent.
            ValidationFailed: for a bad cursor or limit.
        """
        _require_agent(agent, "agent.events.consume")
        size = self._settings.page_size(limit)
        if after is not None and after < 0:
            raise ValidationFailed([FieldError(pointer="/after", code="out_of_range")])

        async def work(uow: UnitOfWork) -> AgentEventPage:
            cursor = await uow.agent_feed.lock_cursor(agent.id)
            start = cursor.acked_seq if after is None else after
            events = await uow.agent_feed.read(agent.id, start, size)
            deliveries: list[Delivery] = []
            for event in events:
                token: str | None = None
                if event.type is EventType.AGENT_INVOCATION:
                    token = await self._deliver_invocation(uow, agent, event)
                    if token is None:
                        continue
                elif event.type is EventType.AGENT_FOLLOWUP:
                    token = await self._deliver_followup(uow, event)
                    if token is None:
                        continue
                deliveries.append(
                    Delivery(
                        event=event,
                        invocation_token=token,
                        redelivered=event.seq <= cursor.delivered_seq,
                    )
                )
            if events:
                await uow.agent_feed.save_cursor(
                    agent.id,
                    attrs.evolve(cursor, delivered_seq=max(cursor.delivered_seq, events[-1].seq)),
                )
            return AgentEventPage(
                deliveries=deliveries, next_after=events[-1].seq if events else start
            )

        return await self._tx.run(work)

    async def ack(self, agent: Principal, through_seq: int) -> None:
        """Acknowledge the feed through a seq (the cursor never moves back).

        The cursor never passes what was delivered: an acknowledgement beyond the last
        delivered event counts up to that event only, so an agent that acknowledges a
        seq the feed has not reached yet (a bug of its own, or a huge number) still
        gets every event that comes later.

        Raises:
            AccessDenied: when the caller is not an agent.
            ValidationFailed: for a negative seq.
        """
        _require_agent(agent, "agent.events.consume")
        if through_seq < 0:
            raise ValidationFailed([FieldError(pointer="/through_seq", code="out_of_range")])

        async def work(uow: UnitOfWork) -> None:
            cursor = await uow.agent_feed.lock_cursor(agent.id)
            through = min(through_seq, cursor.delivered_seq)
            if through > cursor.acked_seq:
                await uow.agent_feed.save_cursor(
                    agent.id,
                    AgentCursor(acked_seq=through, delivered_seq=cursor.delivered_seq),
                )

        await self._tx.run(work)

    async def heartbeat(self, agent: Principal, followups: str | None) -> None:
        """Store the capabilities an agent reports.

        Raises:
            AccessDenied: when the caller is not an agent.
            ValidationFailed: for an unknown capability value.
        """
        _require_agent(agent, "agent.heartbeat")
        if followups is not None and followups not in ("steer", "queue"):
            raise ValidationFailed(
                [FieldError(pointer="/capabilities/followups", code="invalid_enum")]
            )

        async def work(uow: UnitOfWork) -> None:
            await uow.agent_feed.set_capabilities(agent.id, followups)

        await self._tx.run(work)

    async def _deliver_invocation(
        self, uow: UnitOfWork, agent: Principal, event: Event
    ) -> str | None:
        run = await uow.runs.lock(event.resource_id)
        if run is None or run.state is not RunState.QUEUED:
            return None
        author = await uow.principals.get(run.triggered_by)
        message = await uow.messages.get(run.triggering_message_id)
        fresh_agent = await uow.principals.get(run.agent_id)
        if author is None or message is None or fresh_agent is None:
            return None
        target = await thread_target(uow, run.thread_id)
        reason = await self._invoke_reason(uow, target, message, author, fresh_agent)
        if reason is not None:
            await self._audit(uow, author.id, "agent.invoke", reason)
            await self.end_run(uow, run, RunState.FAILED, reason, actor=fresh_agent)
            return None
        token, _ = self._sign(run.id, message.id, TriggerKind.MESSAGE, author.id)
        if message.trigger_state is TriggerState.RECEIVED:
            await self._set_trigger_state(uow, target, message.id, TriggerState.QUEUED, None)
        return token

    async def _deliver_followup(self, uow: UnitOfWork, event: Event) -> str | None:
        """Deliver a follow-up with a fresh token, or None when nothing is to be sent.

        Not deliverable (the row is no longer queued or delivered, the message is
        deleted, the run ended): skipped without token or audit. The author is
        re-checked with today's rights; a denial discards the row, raises the run's
        version and fails the message, and never touches the run otherwise.
        """
        run = await uow.runs.lock(event.resource_id)
        message_id = uuid.UUID(str(event.payload["message_id"]))
        if run is None or not run.state.active:
            return None
        state = await uow.followups.lock(run.id, message_id)
        message = await uow.messages.get(message_id)
        if state not in OPEN_STATES or message is None or message.deleted_at is not None:
            return None
        author = await uow.principals.get(message.author_id)
        agent = await uow.principals.get(run.agent_id)
        assert author is not None
        assert agent is not None
        target = await thread_target(uow, run.thread_id)
        reason = await self._invoke_reason(uow, target, message, author, agent)
        now = self._clock.now()
        if reason is not None:
            await self._audit(uow, author.id, "agent.invoke", str(reason))
            await uow.followups.set_states(run.id, [message_id], FollowupState.DISCARDED, now)
            changed = attrs.evolve(run, version=run.version + 1, updated_at=now)
            await self._store(uow, run, changed, agent, target=target)
            await self._set_trigger_state(uow, target, message_id, TriggerState.FAILED, str(reason))
            return None
        token, jti = self._sign(run.id, message_id, TriggerKind.FOLLOWUP, author.id)
        if run.state is RunState.WAITING_INPUT:
            # The follow-up answers the open question: only its token resumes the run,
            # and every older token is superseded.
            await uow.runs.update(attrs.evolve(run, invocation_jti=jti))
        return token

    def _sign(
        self, run_id: uuid.UUID, message_id: uuid.UUID, kind: TriggerKind, sub: uuid.UUID
    ) -> tuple[str, str]:
        """A fresh invocation token and its jti (``agent.invocation_token_ttl``)."""
        jti = str(self._ids.new_id())
        token = self._signer.sign(
            InvocationClaims(
                run_id=run_id,
                message_id=message_id,
                trigger_kind=kind,
                sub=sub,
                jti=jti,
                exp=self._clock.now() + self._settings.invocation_token_ttl,
            )
        )
        return token, jti

    async def _invoke_reason(
        self,
        uow: UnitOfWork,
        target: AccessTarget,
        message: Message,
        author: Principal,
        agent: Principal,
    ) -> str | None:
        reason = check_invoke(
            InvokeFacts(
                origin=message.origin,
                author_id=author.id,
                author_level=effective_level(
                    author, target, await uow.grants.for_principal(author.id)
                ),
                channel_archived=target.channel.archived,
                agent=_agent_facts(agent),
            )
        )
        return None if reason is None else str(reason)

    # -- lifecycle -------------------------------------------------------------------------

    async def get(self, actor: Principal, run_id: uuid.UUID) -> RunView:
        """The run document for a reader of its thread.

        Raises:
            NotFound: for an unknown run or a caller without read on its thread.
        """

        async def work(uow: UnitOfWork) -> RunView:
            run = await uow.runs.get(run_id)
            if run is None:
                raise NotFound()
            await self._require_read(uow, actor, run)
            return await self._view(uow, run)

        return await self._tx.read(work)

    async def start(self, agent: Principal, run_id: uuid.UUID, token: str) -> RunView:
        """Queued -> running with the token of the invocation's delivery.

        Raises:
            InvalidToken: malformed, expired, or for another run.
            InvalidStateTransition: when the run is not queued.
        """

        async def work(uow: UnitOfWork) -> RunView:
            run = await self._own_run(uow, agent, run_id)
            claims = self._claims(token, run)
            if claims.trigger_kind is not TriggerKind.MESSAGE or claims.sub != run.triggered_by:
                raise InvalidToken("run_mismatch")
            if run.state is RunState.RUNNING and run.invocation_jti == claims.jti:
                return await self._view(uow, run)
            changed = attrs.evolve(move(run, "start", self._clock.now()), invocation_jti=claims.jti)
            await self._store(uow, run, changed, agent)
            return await self._view(uow, changed)

        return await self._tx.run(work)

    async def await_input(self, agent: Principal, run_id: uuid.UUID) -> RunView:
        """Running -> waiting_input.

        Raises:
            InvalidStateTransition: when the run is not running.
        """

        async def work(uow: UnitOfWork) -> RunView:
            run = await self._own_run(uow, agent, run_id)
            changed = move(run, "await_input", self._clock.now())
            await self._store(uow, run, changed, agent)
            return await self._view(uow, changed)

        return await self._tx.run(work)

    async def resume(self, agent: Principal, run_id: uuid.UUID, token: str) -> RunView:
        """waiting_input -> running, only with the token of the latest delivery.

        Raises:
            InvalidToken: superseded for an older token; run_mismatch for another run's.
            InvalidStateTransition: when the run is not waiting for input.
        """

        async def work(uow: UnitOfWork) -> RunView:
            run = await self._own_run(uow, agent, run_id)
            claims = self._claims(token, run)
            changed = move(run, "resume", self._clock.now())
            if claims.jti != run.invocation_jti:
                raise InvalidToken("superseded")
            await self._store(uow, run, changed, agent)
            return await self._view(uow, changed)

        return await self._tx.run(work)

    async def finish(
        self, agent: Principal, run_id: uuid.UUID, state: RunState, reason: str | None
    ) -> RunView:
        """The agent ends its run; repeating the same end is a no-op.

        Raises:
            InvalidStateTransition: from queued, or to another end than the stored one.
        """

        async def work(uow: UnitOfWork) -> RunView:
            run = await self._own_run(uow, agent, run_id)
            if finish(run, state, reason, self._clock.now()) is None:
                return await self._view(uow, run)
            ended = await self.end_run(uow, run, state, reason, actor=agent)
            return await self._view(uow, ended)

        return await self._tx.run(work)

    async def cancel(self, person: Principal, run_id: uuid.UUID) -> RunView:
        """A person with trigger stops a run.

        A queued run ends cancelled / user_cancelled at once; a running or waiting run
        gets cancel_requested (a stored change) and run.cancel_requested goes to the
        agent, which confirms with finish cancelled (or the cancel timeout job ends it).

        Raises:
            AccessDenied: without trigger on the thread (not_found without read).
            InvalidStateTransition: for a run that ended other than cancelled.
        """

        async def work(uow: UnitOfWork) -> RunView:
            run = await uow.runs.lock(run_id)
            if run is None:
                raise NotFound()
            target = await thread_target(uow, run.thread_id)
            await require(uow, person, Action.RUN_CANCEL, target)
            now = self._clock.now()
            if run.state is RunState.QUEUED:
                ended = await self.end_run(
                    uow, run, RunState.CANCELLED, EndReason.USER_CANCELLED.value, actor=person
                )
                return await self._view(uow, ended)
            if not run.state.active:
                if run.state is RunState.CANCELLED:
                    return await self._view(uow, run)
                raise InvalidStateTransition(f"cancel {run.state}")
            if run.cancel_requested:
                return await self._view(uow, run)
            changed = attrs.evolve(
                run,
                cancel_requested=True,
                cancel_requested_at=now,
                version=run.version + 1,
                updated_at=now,
            )
            await self._store(uow, run, changed, person, target=target)
            await uow.events.append(
                self._event(
                    EventType.RUN_CANCEL_REQUESTED,
                    target,
                    actor=person,
                    resource_kind="run",
                    resource_id=run.id,
                    audience_id=run.agent_id,
                    payload={"run_id": str(run.id)},
                )
            )
            return await self._view(uow, changed)

        return await self._tx.run(work)

    async def patch(
        self,
        agent: Principal,
        run_id: uuid.UUID,
        base_version: int,
        ops: Sequence[FollowupOp],
    ) -> RunView:
        """The adapter acknowledges follow-ups: all or nothing, forward only.

        Leaving queued sets the message's trigger_state followup_delivered (one
        message.updated); a change raises the run's version once.

        Args:
            agent: the run's agent.
            run_id: the run.
            base_version: the version the adapter saw.
            ops: the replacements, in order.

        Returns:
            The run after the patch.

        Raises:
            BaseVersionConflict: when the run moved on (carries the current document).
            Conflict: run_not_active for an ended run.
            ValidationFailed: patch_target_missing for a message that is no follow-up.
            FollowupTransitionError: for a change that is not forward (409).
        """

        async def work(uow: UnitOfWork) -> RunView:
            run = await self._own_run(uow, agent, run_id)
            if base_version != run.version:
                raise BaseVersionConflict(run_document(await self._view(uow, run)))
            if not run.state.active:
                raise Conflict("run not active", reason="run_not_active")
            now = self._clock.now()
            target = await thread_target(uow, run.thread_id)
            changed_any = False
            for index, op in enumerate(ops):
                state = (
                    None
                    if op.message_id is None
                    else await uow.followups.lock(run.id, op.message_id)
                )
                if state is None or op.message_id is None:
                    raise ValidationFailed(
                        [FieldError(pointer=f"/ops/{index}/path", code="patch_target_missing")]
                    )
                if not advance_followup(state, op.value):
                    continue
                changed_any = True
                await uow.followups.set_states(run.id, [op.message_id], op.value, now)
                if state is FollowupState.QUEUED:
                    await self._set_trigger_state(
                        uow, target, op.message_id, TriggerState.FOLLOWUP_DELIVERED, None
                    )
            if not changed_any:
                return await self._view(uow, run)
            changed = attrs.evolve(run, version=run.version + 1, updated_at=now)
            await self._store(uow, run, changed, agent, target=target)
            return await self._view(uow, changed)

        return await self._tx.run(work)

    async def end_run(
        self,
        uow: UnitOfWork,
        run: Run,
        state: RunState,
        reason: str | None,
        *,
        actor: Principal | None = None,
    ) -> Run:
        """The one end-of-run function: every path that ends a run goes through here.

        In the caller's unit: transition (version + 1), run.state_changed, the trigger
        message's trigger_state (done, failed or cancelled), then the end hooks (where
        the follow-ups capability settles its rows).

        Args:
            uow: the unit of work holding the run row lock.
            run: the run as locked.
            state: the end state.
            reason: the end reason.
            actor: who ends it (the agent when None).

        Returns:
            The ended run.

        Raises:
            InvalidStateTransition: when the run already ended.
        """
        ended = end(run, state, reason, self._clock.now())
        who = actor or await uow.principals.get(run.agent_id)
        assert who is not None
        target = await self._store(uow, run, ended, who)
        message = await uow.messages.get(run.triggering_message_id)
        if message is not None and message.deleted_at is None:
            await self._set_trigger_state(uow, target, message.id, TRIGGER_STATE_OF[state], reason)
        await self._settle_followups(uow, ended)
        for hook in self.end_hooks:
            await hook(uow, run, ended)
        _log.info("run_ended", run_id=str(run.id), state=state.value, reason=reason)
        return ended

    async def _settle_followups(self, uow: UnitOfWork, ended: Run) -> None:
        """Settle an ended run's open follow-ups and open the follow-on run.

        Deleted messages are discarded; after a stop by a person the others are
        discarded with cancelled / user_cancelled; after every other end they are
        deferred, the first whose author still passes agent.invoke triggers a new run
        (its row stays deferred here), denied ones before it are discarded with failed,
        and the rest move to the new run as queued follow-ups.
        """
        open_followups = await uow.followups.lock_open(ended.id)
        if not open_followups:
            return
        plan = plan_run_end(RunEnd(state=ended.state, reason=ended.state_reason), open_followups)
        now = self._clock.now()
        target = await thread_target(uow, ended.thread_id)
        discarded = [f.message_id for f in (*plan.deleted, *plan.stopped)]
        await uow.followups.set_states(ended.id, discarded, FollowupState.DISCARDED, now)
        await self._set_trigger_states(
            uow,
            target,
            [f.message_id for f in plan.stopped],
            TriggerState.CANCELLED,
            EndReason.USER_CANCELLED.value,
        )
        if not plan.candidates:
            return
        # Only the candidate that triggers the follow-on run stays here as deferred: the
        # ones before it are discarded, the ones after it move (one UPDATE each way, so a
        # hundred follow-ups are not first all written deferred and then moved).
        agent = await uow.principals.get(ended.agent_id)
        assert agent is not None
        for index, candidate in enumerate(plan.candidates):
            message = await uow.messages.get(candidate.message_id)
            author = await uow.principals.get(candidate.author_id)
            assert message is not None
            assert author is not None
            reason = await self._invoke_reason(uow, target, message, author, agent)
            if reason is not None:
                await self._audit(uow, author.id, "agent.invoke", reason)
                await uow.followups.set_states(
                    ended.id, [candidate.message_id], FollowupState.DISCARDED, now
                )
                await self._set_trigger_state(
                    uow, target, candidate.message_id, TriggerState.FAILED, reason
                )
                continue
            await uow.followups.set_states(
                ended.id, [candidate.message_id], FollowupState.DEFERRED, now
            )
            follow_on = await self.open_run(
                uow, target, candidate.message_id, author.id, ended.agent_id
            )
            rest = plan.candidates[index + 1 :]
            await uow.followups.move(ended.id, [r.message_id for r in rest], follow_on.id, now)
            await self._set_trigger_states(
                uow, target, [r.message_id for r in rest], TriggerState.RECEIVED, None
            )
            mode = _mode(agent)
            for moved in rest:
                if followup_event_needed(mode, follow_on.state):
                    await self._followup_event(
                        uow, target, follow_on.id, moved.message_id, moved.author_id
                    )
            return

    # -- jobs ------------------------------------------------------------------------------

    async def expire_queued(self) -> int:
        """End runs queued longer than ``run.queued_max_age`` (failed / queued_expired)."""
        return await self._job(
            ["queued"], "created_at", "queued_max_age", RunState.FAILED, EndReason.QUEUED_EXPIRED
        )

    async def cancel_timeouts(self) -> int:
        """End runs whose cancel was not confirmed within ``agent.cancel_grace``."""
        return await self._job(
            ["running", "waiting_input"],
            "cancel_requested_at",
            "cancel_grace",
            RunState.CANCELLED,
            EndReason.CANCEL_TIMEOUT,
        )

    async def stall_check(self) -> int:
        """End running runs without a change for ``run.stall_after`` (failed / stale)."""
        return await self._job(
            ["running"], "updated_at", "stall_after", RunState.FAILED, EndReason.STALE
        )

    async def end_runs_of_disabled_agents(self) -> int:
        """End every active run of a disabled agent (cancelled / agent_disabled)."""

        async def work(uow: UnitOfWork) -> int:
            runs = await uow.runs.lock_active_of_disabled_agents(self._settings.jobs_batch_size)
            for run in runs:
                await self.end_run(uow, run, RunState.CANCELLED, EndReason.AGENT_DISABLED.value)
            return len(runs)

        return await self._drain(work)

    async def run_jobs_once(self) -> dict[str, int]:
        """One pass of every job.

        Returns:
            Runs ended per job.
        """
        return {
            "queued_expiry": await self.expire_queued(),
            "cancel_timeout": await self.cancel_timeouts(),
            "stall_check": await self.stall_check(),
            "agent_disabled": await self.end_runs_of_disabled_agents(),
        }

    async def _job(
        self, states: list[str], field: str, setting: str, state: RunState, reason: EndReason
    ) -> int:
        async def work(uow: UnitOfWork) -> int:
            before = self._clock.now() - getattr(self._settings, setting)
            runs = await uow.runs.lock_due(
                states=states, before=before, field=field, limit=self._settings.jobs_batch_size
            )
            for run in runs:
                await self.end_run(uow, run, state, reason.value)
            return len(runs)

        return await self._drain(work)

    async def _drain(self, work: Callable[[UnitOfWork], Awaitable[int]]) -> int:
        total = 0
        while True:
            done = await self._tx.run(work)
            total += done
            if done < self._settings.jobs_batch_size:
                return total

    # -- helpers ---------------------------------------------------------------------------

    def _claims(self, token: str, run: Run) -> InvocationClaims:
        claims = self._signer.verify(token, self._clock.now())
        if claims.run_id != run.id:
            raise InvalidToken("run_mismatch")
        return claims

    async def _view(self, uow: UnitOfWork, run: Run) -> RunView:
        states = await uow.followups.states(run.id)
        return RunView(run=run, followups={k: v.value for k, v in states.items()})

    async def _own_run(self, uow: UnitOfWork, agent: Principal, run_id: uuid.UUID) -> Run:
        run = await uow.runs.lock(run_id)
        if run is None:
            raise NotFound()
        if run.agent_id != agent.id:
            await self._require_read(uow, agent, run)
            raise AccessDenied(
                code="forbidden", reason="not_run_agent", principal_id=agent.id, action="run.update"
            )
        return run

    async def _require_read(self, uow: UnitOfWork, actor: Principal, run: Run) -> None:
        target = await thread_target(uow, run.thread_id)
        await require(uow, actor, Action.THREAD_READ, target)

    async def _store(
        self,
        uow: UnitOfWork,
        before: Run,
        after: Run,
        actor: Principal,
        *,
        target: AccessTarget | None = None,
    ) -> AccessTarget:
        await uow.runs.update(after)
        target = target or await thread_target(uow, after.thread_id)
        payload: dict[str, object] = {
            "run_id": str(after.id),
            "state": after.state.value,
            "version": after.version,
        }
        if after.state_reason is not None:
            payload["state_reason"] = after.state_reason
        await uow.events.append(
            self._event(
                EventType.RUN_STATE_CHANGED,
                target,
                actor=actor,
                resource_kind="run",
                resource_id=after.id,
                resource_version=after.version,
                payload=payload,
            )
        )
        if (
            after.state is not before.state
            and after.state in TRIGGER_STATE_OF
            and after.state.active
        ):
            await self._set_trigger_state(
                uow, target, after.triggering_message_id, TRIGGER_STATE_OF[after.state], None
            )
        return target

    async def _set_trigger_state(
        self,
        uow: UnitOfWork,
        target: AccessTarget,
        message_id: uuid.UUID,
        state: TriggerState,
        reason: str | None,
    ) -> None:
        await self._set_trigger_states(uow, target, [message_id], state, reason)

    async def _set_trigger_states(
        self,
        uow: UnitOfWork,
        target: AccessTarget,
        message_ids: Sequence[uuid.UUID],
        state: TriggerState,
        reason: str | None,
    ) -> None:
        """Change the trigger_state of messages of one thread, one message.updated each.

        Two statements whatever the number of messages: the set-based update and one
        read of their authors.
        """
        if not message_ids:
            return
        changed = await uow.messages.set_trigger_states(message_ids, state, reason)
        if not changed:
            return
        authors = await uow.principals.get_many(list({m.author_id for m in changed}))
        for message in changed:
            author = authors[message.author_id]
            await uow.events.append(
                self._event(
                    EventType.MESSAGE_UPDATED,
                    target,
                    actor=author,
                    resource_kind="message",
                    resource_id=message.id,
                    resource_version=message.version,
                    restricted_to=message.restricted_to,
                    payload={"message": message_document(message, author)},
                )
            )

    async def _audit(
        self, uow: UnitOfWork, principal_id: uuid.UUID, action: str, reason: str
    ) -> None:
        start = window_start(self._clock.now(), self._settings.deny_aggregate_window)
        await uow.audit.record_denial(principal_id, action, reason, start)

    def _event(
        self,
        type_: EventType,
        target: AccessTarget,
        *,
        resource_kind: str,
        resource_id: uuid.UUID,
        payload: dict[str, object],
        actor: Principal | None = None,
        actor_id: uuid.UUID | None = None,
        actor_kind: str | None = None,
        resource_version: int | None = None,
        audience_id: uuid.UUID | None = None,
        restricted_to: tuple[uuid.UUID, ...] | None = None,
    ) -> NewEvent:
        return new_event(
            type_,
            target,
            actor_id=actor.id if actor else _required(actor_id),
            actor_kind=actor.kind.value if actor else _required(actor_kind),
            resource_kind=resource_kind,
            resource_id=resource_id,
            payload=payload,
            at=self._clock.now(),
            resource_version=resource_version,
            audience_id=audience_id,
            restricted_to=restricted_to,
        )


def _required(value: _T | None) -> _T:
    assert value is not None
    return value


def _mode(agent: Principal) -> FollowupMode:
    return effective_followup_mode(agent.supports_followups, agent.reported_followups)


@attrs.frozen(kw_only=True)
class FollowupOp:
    """One replacement of a run patch.

    Attributes:
        message_id: the follow-up message (None when the path names none).
        value: delivered or absorbed.
    """

    message_id: uuid.UUID | None
    value: FollowupState


def _agent_facts(agent: Principal) -> AgentFacts:
    return AgentFacts(
        id=agent.id,
        enabled=agent.enabled,
        billing_mode=agent.billing_mode or BillingMode.ORGANIZATION,
        holder_id=agent.holder_id,
    )


def _require_agent(principal: Principal, action: str) -> None:
    if not principal.is_agent:
        raise AccessDenied(
            code="forbidden", reason="agents_only", principal_id=principal.id, action=action
        )


__all__ = ["AgentEventPage", "Delivery", "FollowupOp", "RunView", "RunsService"]
