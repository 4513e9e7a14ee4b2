"""The one end-of-run function: every path that ends a run goes through `RunEnder.end`.

In the caller's unit, which holds the run row lock: the transition (version + 1),
``run.state_changed``, the trigger message's trigger_state (done, failed or cancelled),
then the settlement of the open follow-ups (DESIGN.md section 7): locked in message_id
order, planned (`plan_run_end`), deleted and stopped ones discarded, and among the
candidates the follow-on run chosen (`choose_follow_on`) and opened, the rest moved to
it. The caller passes down the run and its target (and the agent when it holds it), so
nothing it already read is read again.
"""

from __future__ import annotations

from turnkeeper.application.audit import DenialAudit
from turnkeeper.application.event_factory import EventFactory
from turnkeeper.application.ports import Clock, UnitOfWork
from turnkeeper.application.ports.audit import AuditAction
from turnkeeper.application.services.access import thread_of
from turnkeeper.application.services.runs.changes import RunChanges
from turnkeeper.application.services.runs.invoke import followup_mode, invoke_facts
from turnkeeper.application.services.runs.opening import RunOpener
from turnkeeper.domain.authorization import AccessTarget, effective_level
from turnkeeper.domain.delivery import delivery_reason
from turnkeeper.domain.followups import (
    FollowupState,
    RunEnd,
    choose_follow_on,
    followup_event_needed,
    plan_run_end,
)
from turnkeeper.domain.messaging import TriggerState
from turnkeeper.domain.runs import (
    TRIGGER_STATE_OF,
    EndReason,
    FailReason,
    Run,
    RunState,
    answers_in_thread,
    end,
)
from turnkeeper.domain.world import Principal, thread_operator


class RunEnder:
    """Ends runs and settles their follow-ups.

    Args:
        opener: opens the follow-on run.
        changes: stores the run change and the trigger states.
        events: the event factory.
        audit: counts the candidates whose author no longer passes agent.invoke.
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

    async def end(
        self,
        uow: UnitOfWork,
        run: Run,
        target: AccessTarget,
        state: RunState,
        reason: str | None,
        *,
        actor: Principal | None = None,
        agent: Principal | None = None,
    ) -> Run:
        """End a run, in the caller's unit.

        Args:
            uow: the unit of work holding the run row lock.
            run: the run as locked.
            target: its thread, channel and space.
            state: the end state.
            reason: the end reason.
            actor: who ends it (the agent when None).
            agent: the run's agent as the caller read it in this unit (read here when
                needed else; never a principal from authentication, which may be older).

        Returns:
            The ended run.

        Raises:
            InvalidStateTransition: when the run already ended.
        """
        ended = end(run, state, reason, self._clock.now())
        if agent is None and actor is None:
            agent = await uow.principals.get(run.agent_id)
        who = actor or agent
        assert who is not None
        await self._changes.store(uow, run, ended, who, target)
        message = await uow.messages.get(run.triggering_message_id)
        if message is not None and message.deleted_at is None:
            await self._changes.set_trigger_states(
                uow, target, [message.id], TRIGGER_STATE_OF[state], reason
            )
        await self._settle_followups(uow, ended, target, agent)
        return ended

    async def _settle_followups(
        self, uow: UnitOfWork, ended: Run, target: AccessTarget, agent: Principal | None
    ) -> None:
        """Settle an ended run's open follow-ups and open the follow-on run.

        Deleted messages are discarded; after a stop by a person the others are
        discarded with cancelled / user_cancelled; after every other end the first
        candidate whose author still passes agent.invoke triggers a new run (its row
        stays deferred here), denied ones before it are discarded with failed and the
        delivery reason (`delivery_reason`: they were accepted once), and the rest move
        to the new run as queued follow-ups.
        """
        open_followups = await uow.followups.lock_open(ended.id)
        if not open_followups:
            return
        plan = plan_run_end(RunEnd(state=ended.state, reason=ended.state_reason), open_followups)
        now = self._clock.now()
        discarded = [f.message_id for f in (*plan.deleted, *plan.stopped)]
        await uow.followups.set_states(ended.id, discarded, FollowupState.DISCARDED, now)
        await self._changes.set_trigger_states(
            uow,
            target,
            [f.message_id for f in plan.stopped],
            TriggerState.CANCELLED,
            EndReason.USER_CANCELLED.value,
        )
        if not plan.candidates:
            return
        author_ids = list(dict.fromkeys(c.author_id for c in plan.candidates))
        # The authors' and the agent's grants arrive with the agent and the authors: one
        # round trip however many people wrote the follow-ups.
        await uow.grants.prefetch([*author_ids, ended.agent_id])
        if agent is None:
            await uow.principals.prefetch([ended.agent_id])
        authors = await uow.principals.get_many(author_ids)
        agent = agent or await uow.principals.get(ended.agent_id)
        assert agent is not None
        choice = choose_follow_on(
            plan.candidates,
            {
                author_id: await invoke_facts(uow, target, author, agent)
                for author_id, author in authors.items()
            },
            agent_answers=answers_in_thread(
                agent.id,
                operator_id=thread_operator(thread_of(target), target.channel, target.space),
                behavior=target.channel.behavior,
                agent_level=effective_level(
                    agent, target, await uow.grants.for_principal(agent.id)
                ),
            ),
        )
        for denied in choice.denied:
            message_id = denied.followup.message_id
            # The audit records the authorization decision; the message shows what was
            # lost since its acceptance as a follow-up (the delivery mapping). An agent
            # that lost its standing in the thread is no denial of the author's.
            if denied.reason is not FailReason.AGENT_NOT_ALLOWED_HERE:
                await self._audit.record(
                    uow, denied.followup.author_id, AuditAction.AGENT_INVOKE, denied.reason.value
                )
            await uow.followups.set_states(ended.id, [message_id], FollowupState.DISCARDED, now)
            await self._changes.set_trigger_states(
                uow,
                target,
                [message_id],
                TriggerState.FAILED,
                delivery_reason(denied.reason).value,
            )
        trigger = choice.trigger
        if trigger is None:
            return
        # Only the candidate that triggers the follow-on run stays here as deferred: the
        # ones before it are discarded, the ones after it move (one UPDATE each way, so a
        # hundred follow-ups are not first all written deferred and then moved).
        await uow.followups.set_states(ended.id, [trigger.message_id], FollowupState.DEFERRED, now)
        follow_on = await self._opener.open(
            uow, target, trigger.message_id, authors[trigger.author_id], agent
        )
        moved = [m.message_id for m in choice.moved]
        await uow.followups.move(ended.id, moved, follow_on.id, now)
        await self._changes.set_trigger_states(uow, target, moved, TriggerState.RECEIVED, None)
        if followup_event_needed(followup_mode(agent), follow_on.state):
            for followup in choice.moved:
                await uow.events.append(
                    self._events.agent_followup(
                        follow_on, target, followup.message_id, followup.author_id
                    )
                )


__all__ = ["RunEnder"]
