"""Opening a run: the one way a queued run comes to be (a trigger or a follow-on run).

In the caller's unit, which holds the thread row lock: the run (at most one active per
thread: a concurrent one is a retriable conflict), its anchor message (kind run) at the
next thread_seq, the trigger message's trigger_state received, and ``agent.invocation``
to the agent last.
"""

from __future__ import annotations

import uuid

from turnkeeper.application.event_factory import EventFactory
from turnkeeper.application.ports import Clock, IdGenerator, UnitOfWork
from turnkeeper.application.services.access import thread_of
from turnkeeper.application.services.messages_append import MessageAppender
from turnkeeper.application.services.runs.changes import RunChanges
from turnkeeper.domain.authorization import AccessTarget
from turnkeeper.domain.messaging import Message, MessageKind, Origin, TriggerState
from turnkeeper.domain.runs import Run
from turnkeeper.domain.world import Principal


class RunOpener:
    """Opens queued runs.

    Args:
        appender: stores the anchor message (and publishes it).
        changes: sets the trigger message's trigger_state.
        events: the event factory.
        clock: the time.
        ids: the UUIDv7 source.
    """

    def __init__(
        self,
        appender: MessageAppender,
        changes: RunChanges,
        events: EventFactory,
        clock: Clock,
        ids: IdGenerator,
    ) -> None:
        self._appender = appender
        self._changes = changes
        self._events = events
        self._clock = clock
        self._ids = ids

    async def open(
        self,
        uow: UnitOfWork,
        target: AccessTarget,
        message_id: uuid.UUID,
        author: Principal,
        agent: Principal,
    ) -> Run:
        """Open a queued run: the run, its anchor, trigger_state received, agent.invocation.

        Args:
            uow: the unit of work (holding the thread row lock).
            target: the thread with its channel and space.
            message_id: the triggering message.
            author: its author (a person).
            agent: the agent.

        Returns:
            The new run.

        Raises:
            RetriableConflict: a concurrent unit opened an active run in the thread.
        """
        now = self._clock.now()
        thread = thread_of(target)
        run = Run(
            id=self._ids.new_id(),
            thread_id=thread.id,
            agent_id=agent.id,
            triggering_message_id=message_id,
            triggered_by=author.id,
            created_at=now,
            updated_at=now,
        )
        await uow.runs.add(run)
        # A follow-on run opens when its run ends, and the thread may have been closed
        # since its follow-up was written: its anchor is a message like any other.
        await self._appender.reopen_if_done(uow, agent, target, at=now)
        anchor = Message(
            id=self._ids.new_id(),
            thread_id=thread.id,
            thread_seq=await uow.threads.allocate_seq(thread.id),
            author_id=agent.id,
            origin=Origin.SYSTEM,
            kind=MessageKind.RUN,
            content="",
            run_id=run.id,
            created_at=now,
        )
        await self._appender.store(uow, anchor, agent, target, run_id=run.id)
        await self._changes.set_trigger_states(
            uow, target, [message_id], TriggerState.RECEIVED, None, known=[author]
        )
        await uow.events.append(self._events.agent_invocation(run, target))
        return run


__all__ = ["RunOpener"]
