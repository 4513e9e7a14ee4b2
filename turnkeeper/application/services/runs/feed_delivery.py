"""The delivery of an agent's feed events: fresh invocation tokens, re-checked rights.

Every delivery of agent.invocation or agent.followup re-checks agent.invoke for the
message's author with the rights of this moment (DESIGN.md section 6) and carries a
fresh token (``agent.invocation_token_ttl``); a denied delivery sends nothing and marks
the message failed (and ends a queued run) with the delivery reason (`delivery_reason`),
while its audit keeps agent.invoke's own reason. `AgentFeedService.poll` calls it in the
unit that locks the agent's cursor.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import attrs

from turnkeeper.application.audit import DenialAudit
from turnkeeper.application.ports import (
    AgentCursor,
    Clock,
    IdGenerator,
    InvocationClaims,
    TokenSigner,
    UnitOfWork,
)
from turnkeeper.application.ports.audit import AuditAction
from turnkeeper.application.services.access import thread_target
from turnkeeper.application.services.runs.changes import RunChanges
from turnkeeper.application.services.runs.invoke import invoke_denial
from turnkeeper.application.services.runs.run_end import RunEnder
from turnkeeper.domain.delivery import delivery_reason, refused_invocation_end
from turnkeeper.domain.events import Event, EventType
from turnkeeper.domain.followups import OPEN_STATES, FollowupState
from turnkeeper.domain.messaging import TriggerState, audience_of
from turnkeeper.domain.runs import RunState, TriggerKind, bump_version
from turnkeeper.domain.world import Principal


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


class FeedDelivery:
    """Turns an agent's feed events into deliveries, in the unit of the poll.

    Args:
        ender: ends a queued run whose delivery is denied.
        changes: stores run changes and trigger states.
        audit: counts denied deliveries.
        clock: the time.
        ids: the jti source.
        signer: signs invocation tokens.
        token_ttl: ``agent.invocation_token_ttl``, the lifetime of a fresh token.
    """

    def __init__(
        self,
        ender: RunEnder,
        changes: RunChanges,
        audit: DenialAudit,
        clock: Clock,
        ids: IdGenerator,
        signer: TokenSigner,
        token_ttl: timedelta,
    ) -> None:
        self._ender = ender
        self._changes = changes
        self._audit = audit
        self._clock = clock
        self._ids = ids
        self._signer = signer
        self._token_ttl = token_ttl

    async def deliver(
        self,
        uow: UnitOfWork,
        agent: Principal,
        cursor: AgentCursor,
        events: list[Event],
        after: int | None,
        size: int,
        refused: list[uuid.UUID],
    ) -> tuple[list[Delivery], int]:
        """Deliver a poll's page from its first events, the cursor moved past what it read.

        Args:
            uow: the poll's unit, holding the agent's cursor lock.
            agent: the polling agent.
            cursor: the agent's locked cursor.
            events: the first events read after the poll's position.
            after: the poll's cursor; the acknowledged position when None.
            size: the page size.
            refused: receives the runs whose invocation it refuses (ended in this unit).

        Returns:
            The deliveries and the position past the last event read (the next cursor).
        """
        position = cursor.acked_seq if after is None else after
        # The delivered position moves only over events actually read: a cursor past the
        # feed's end delivered nothing, and taking it as delivered would flag the next
        # invocation redelivered and let an ack up to it swallow every later event.
        read_through = cursor.delivered_seq
        deliveries: list[Delivery] = []
        # Undeliverable events leave no trace in the page: read on past them, so that a
        # page is empty only when nothing deliverable is left after the cursor (API.md),
        # however many ended runs fill the feed before it.
        while True:
            for event in events:
                delivery = await self._delivery(uow, event, cursor.delivered_seq, refused)
                if delivery is not None:
                    deliveries.append(delivery)
            if events:
                position = events[-1].seq
                read_through = max(read_through, position)
            if deliveries or len(events) < size:
                break
            events = await uow.agent_feed.read(agent.id, position, size)
        if read_through > cursor.delivered_seq:
            await uow.agent_feed.save_cursor(
                agent.id, attrs.evolve(cursor, delivered_seq=read_through)
            )
        return deliveries, position

    async def _delivery(
        self, uow: UnitOfWork, event: Event, delivered_seq: int, refused: list[uuid.UUID]
    ) -> Delivery | None:
        """One event as delivered now, or None when it is not deliverable any more."""
        token: str | None = None
        if event.type is EventType.AGENT_INVOCATION:
            token = await self._deliver_invocation(uow, event, refused)
            if token is None:
                return None
        elif event.type is EventType.AGENT_FOLLOWUP:
            token = await self._deliver_followup(uow, event)
            if token is None:
                return None
        return Delivery(event=event, invocation_token=token, redelivered=event.seq <= delivered_seq)

    async def _deliver_invocation(
        self, uow: UnitOfWork, event: Event, refused: list[uuid.UUID]
    ) -> str | None:
        """Deliver an invocation with a fresh token, or None when nothing is to be sent.

        A refused one ends its run, whose id is added to `refused`.
        """
        # An ended run's invocation is skipped without a lock (`lock_active`).
        run = await uow.runs.lock_active(event.resource_id)
        if run is None or run.state is not RunState.QUEUED:
            return None
        # The message, the author, the agent and the author's grants arrive with the
        # thread.
        await uow.principals.prefetch([run.triggered_by, run.agent_id])
        await uow.grants.prefetch([run.triggered_by])
        await uow.messages.prefetch(run.triggering_message_id)
        target = await thread_target(uow, run.thread_id)
        message = await uow.messages.get(run.triggering_message_id)
        author = await uow.principals.get(run.triggered_by)
        agent = await uow.principals.get(run.agent_id)
        if author is None or message is None or agent is None:
            return None
        reason = await invoke_denial(uow, target, author, agent, message.origin)
        if reason is not None:
            # The audit records the authorization decision; the run and its message show
            # what was lost since the acceptance (the delivery mapping), a disabled
            # agent's run ending as the agent-disabled job ends it.
            await self._audit.record(uow, author.id, AuditAction.AGENT_INVOKE, reason.value)
            state, end_reason = refused_invocation_end(reason)
            await self._ender.end(uow, run, target, state, end_reason, actor=agent, agent=agent)
            refused.append(run.id)
            return None
        token, _ = self._sign(run.id, message.id, TriggerKind.MESSAGE, author.id)
        if message.trigger_state is TriggerState.RECEIVED:
            await self._changes.set_trigger_states(
                uow, target, [message.id], TriggerState.QUEUED, None
            )
        return token

    async def _deliver_followup(self, uow: UnitOfWork, event: Event) -> str | None:
        """Deliver a follow-up with a fresh token, or None when nothing is to be sent.

        Not deliverable (the row is no longer queued or delivered, the message is
        deleted, the run ended): skipped without token or audit. The author is
        re-checked with today's rights; a denial discards the row, raises the run's
        version and fails the message with the delivery reason (`delivery_reason`), and
        never touches the run otherwise.
        """
        run = await uow.runs.lock_active(event.resource_id)
        message_id = uuid.UUID(str(event.payload["message_id"]))
        if run is None or not run.state.active:
            return None
        state = await uow.followups.lock(run.id, message_id)
        message = await uow.messages.get(message_id)
        if state not in OPEN_STATES or message is None or message.deleted_at is not None:
            return None
        # The author, the agent and the author's grants arrive with the thread.
        await uow.principals.prefetch([message.author_id, run.agent_id])
        await uow.grants.prefetch([message.author_id])
        target = await thread_target(uow, run.thread_id)
        author = await uow.principals.get(message.author_id)
        agent = await uow.principals.get(run.agent_id)
        assert author is not None
        assert agent is not None
        reason = await invoke_denial(uow, target, author, agent, message.origin)
        if reason is not None:
            now = self._clock.now()
            # The audit records the authorization decision; the message shows what was
            # lost since the acceptance (the delivery mapping).
            await self._audit.record(uow, author.id, AuditAction.AGENT_INVOKE, reason.value)
            await uow.followups.set_states(run.id, [message_id], FollowupState.DISCARDED, now)
            await self._changes.store(
                uow, run, bump_version(run, now), agent, target, audience=audience_of([message])
            )
            await self._changes.set_trigger_states(
                uow, target, [message_id], TriggerState.FAILED, delivery_reason(reason).value
            )
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
                exp=self._clock.now() + self._token_ttl,
            )
        )
        return token, jti


__all__ = ["Delivery", "FeedDelivery"]
