"""The trigger decision, an in-transaction subscriber of `MessagePosted` (DESIGN.md 5, 7).

Only human messages are considered. The pure `decide_trigger` picks a candidate agent
from the mentions and the channel's switches; with a candidate, the thread's active run
is locked (the thread row is locked by the append, the run row keeps the active run a
fact until commit, also against its end) and the decision is taken again with it. Then
agent.invoke is checked for the author, and the message either opens a run, becomes a
follow-up of the active run, or gets trigger_state failed (a denial is shown only when
the agent was mentioned). Everything happens in the message's unit: a trigger and its
message commit or roll back together.
"""

from __future__ import annotations

import attrs

from turnkeeper.application.audit import DenialAudit
from turnkeeper.application.bus import MessagePosted
from turnkeeper.application.event_factory import EventFactory
from turnkeeper.application.ports import Clock, UnitOfWork
from turnkeeper.application.ports.audit import AuditAction
from turnkeeper.application.services.access import thread_of
from turnkeeper.application.services.runs.changes import RunChanges
from turnkeeper.application.services.runs.invoke import (
    agent_facts,
    followup_mode,
    invoke_denial,
)
from turnkeeper.application.services.runs.opening import RunOpener
from turnkeeper.domain.authorization import AccessTarget, effective_level
from turnkeeper.domain.followups import followup_event_needed
from turnkeeper.domain.messaging import Message, Origin, TriggerState, audience_of
from turnkeeper.domain.runs import OutcomeKind, Run, TriggerFacts, bump_version, decide_trigger
from turnkeeper.domain.trigger_report import applied_followup_mode
from turnkeeper.domain.world import Level, Principal, thread_operator


class TriggerDecision:
    """Decides what a new human message sets in motion, inside its unit of work.

    Args:
        opener: opens the run of an invocation.
        changes: stores run changes and trigger states.
        events: the event factory.
        audit: counts a refused invocation or follow-up.
        clock: the time.
    """

    def __init__(
        self,
        opener: RunOpener,
        changes: RunChanges,
        events: EventFactory,
        audit: DenialAudit,
        clock: Clock,
    ) -> None:
        self._opener = opener
        self._changes = changes
        self._events = events
        self._audit = audit
        self._clock = clock

    async def on_message_posted(self, uow: UnitOfWork, posted: MessagePosted) -> None:
        """React to a new message: open a run, accept a follow-up, fail, or nothing.

        Args:
            uow: the message's unit of work.
            posted: the event (the message, its author and its thread).

        Raises:
            RetriableConflict: a concurrent unit opened an active run in the thread.
        """
        message, author, target = posted.message, posted.author, posted.target
        if message.origin is not Origin.HUMAN:
            return
        thread = thread_of(target)
        operator_id = thread_operator(thread, target.channel, target.space)
        mentioned = (
            await uow.principals.get_many(list(message.mentions)) if message.mentions else {}
        )
        agents = {p.id: p for p in mentioned.values() if p.is_agent}
        facts = TriggerFacts(
            origin=message.origin,
            author_id=author.id,
            mentions=message.mentions,
            agents={i: agent_facts(p) for i, p in agents.items()},
            operator_id=operator_id,
            is_main_thread=thread.is_main,
            behavior=target.channel.behavior,
            guests_with_write=frozenset(
                [
                    agent_id
                    for agent_id in message.mentions
                    if agent_id in agents
                    and effective_level(
                        agents[agent_id], target, await uow.grants.for_principal(agent_id)
                    )
                    >= Level.WRITE
                ]
            ),
            audience=None if message.restricted_to is None else frozenset(message.restricted_to),
        )
        # Whether there is a candidate at all does not depend on the active run: most
        # messages stop here without touching the run row. Nor does a mention the channel
        # refuses (the only failure without an active run): it changes no run either.
        first = decide_trigger(facts)
        if first.kind is OutcomeKind.NONE:
            return
        if first.kind is OutcomeKind.FAILED:
            await self._refuse(uow, target, message, author, str(first.reason))
            return
        if operator_id is not None and operator_id not in agents:
            # Read with the run row lock, in its round trip.
            await uow.principals.prefetch([operator_id])
        active = await uow.runs.lock_active_in_thread(thread.id)
        if operator_id is not None and operator_id not in agents:
            operator = await uow.principals.get(operator_id)
            if operator is not None and operator.is_agent:
                agents[operator_id] = operator
        outcome = decide_trigger(
            attrs.evolve(
                facts,
                agents={i: agent_facts(p) for i, p in agents.items()},
                active_run_id=active.id if active else None,
                active_run_agent_id=active.agent_id if active else None,
            )
        )
        if outcome.kind is OutcomeKind.NONE:
            return
        if outcome.kind is OutcomeKind.FAILED:
            await self._refuse(uow, target, message, author, str(outcome.reason))
            return
        assert outcome.agent_id is not None
        agent = agents[outcome.agent_id]
        reason = await invoke_denial(uow, target, author, agent, message.origin)
        if reason is not None:
            action = (
                AuditAction.FOLLOWUP_CREATE
                if outcome.kind is OutcomeKind.FOLLOWUP
                else AuditAction.AGENT_INVOKE
            )
            await self._audit.record(uow, author.id, action, str(reason))
            if outcome.mentioned:
                await self._refuse(uow, target, message, author, str(reason))
            return
        if outcome.kind is OutcomeKind.FOLLOWUP:
            assert active is not None
            await self._accept_followup(uow, target, active, message, author, agent)
            return
        await self._opener.open(uow, target, message.id, author, agent)

    async def _refuse(
        self,
        uow: UnitOfWork,
        target: AccessTarget,
        message: Message,
        author: Principal,
        reason: str,
    ) -> None:
        """Mark the poster's message failed with the reason (its author is the poster)."""
        await self._changes.set_trigger_states(
            uow, target, [message.id], TriggerState.FAILED, reason, known=[author]
        )

    async def _accept_followup(
        self,
        uow: UnitOfWork,
        target: AccessTarget,
        run: Run,
        message: Message,
        author: Principal,
        agent: Principal,
    ) -> None:
        """Make a message a queued follow-up of the thread's active run (locked)."""
        now = self._clock.now()
        mode = followup_mode(agent)
        # The mode that applies to this follow-up is stored with it: its create answer
        # and every replay report it, whatever the agent reports later.
        await uow.followups.add(run.id, message.id, now, applied_followup_mode(mode, run.state))
        await self._changes.store(
            uow, run, bump_version(run, now), author, target, audience=audience_of([message])
        )
        await self._changes.set_trigger_states(
            uow, target, [message.id], TriggerState.RECEIVED, None, known=[author]
        )
        if followup_event_needed(mode, run.state):
            await uow.events.append(self._events.agent_followup(run, target, message.id, author.id))


__all__ = ["TriggerDecision"]
