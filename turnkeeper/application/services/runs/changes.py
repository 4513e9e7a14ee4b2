"""Stored changes of runs and of their messages' trigger_state, each with its event.

Every stored change of a run raises its version (the domain's transitions and
`turnkeeper.domain.runs.bump_version`) and appends ``run.state_changed``; a move into
an active state sets the trigger message's trigger_state (working). Every trigger_state
change appends ``message.updated``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from turnkeeper.application.event_factory import EventFactory
from turnkeeper.application.ports import UnitOfWork
from turnkeeper.domain.authorization import AccessTarget
from turnkeeper.domain.messaging import TriggerState, trigger_reason
from turnkeeper.domain.runs import TRIGGER_STATE_OF, Run
from turnkeeper.domain.world import Principal


class RunChanges:
    """Writes run changes and trigger states with their events, in the caller's unit.

    Args:
        events: the event factory.
    """

    def __init__(self, events: EventFactory) -> None:
        self._events = events

    async def store(
        self,
        uow: UnitOfWork,
        before: Run,
        after: Run,
        actor: Principal,
        target: AccessTarget,
        *,
        audience: tuple[uuid.UUID, ...] | None = None,
    ) -> None:
        """Store a changed run (locked by the caller) and append ``run.state_changed``.

        A move into running or waiting_input also sets the trigger message working.

        Args:
            uow: the unit of work holding the run row lock.
            before: the run as locked.
            after: the changed run (its version raised).
            actor: who changed it.
            target: its thread, channel and space.
            audience: for a change made for restricted messages alone, who may see them
                (`turnkeeper.domain.messaging.audience_of`): the event is theirs and the
                run's agent's. None: every reader of the thread.
        """
        await uow.runs.update(after)
        readers = None if audience is None else tuple(dict.fromkeys((*audience, after.agent_id)))
        await uow.events.append(
            self._events.run_state_changed(after, actor, target, restricted_to=readers)
        )
        if (
            after.state is not before.state
            and after.state.active
            and after.state in TRIGGER_STATE_OF
        ):
            await self.set_trigger_states(
                uow, target, [after.triggering_message_id], TRIGGER_STATE_OF[after.state], None
            )

    async def set_trigger_states(
        self,
        uow: UnitOfWork,
        target: AccessTarget,
        message_ids: Sequence[uuid.UUID],
        state: TriggerState,
        reason: str | None,
        *,
        known: Sequence[Principal] = (),
    ) -> None:
        """Change the trigger_state of messages of one thread, one message.updated each.

        Two statements whatever the number of messages: the set-based update and one
        read of their authors (none when `known` has them all). Messages already in
        that state with that reason change nothing.

        Args:
            uow: the unit of work.
            target: the thread, channel and space of the messages.
            message_ids: the messages.
            state: the new trigger_state.
            reason: the reason at hand, kept only with failed and cancelled
                (`trigger_reason`).
            known: authors the caller has at hand (the author of the message it
                posted), not read again.
        """
        if not message_ids:
            return
        changed = await uow.messages.set_trigger_states(
            message_ids, state, trigger_reason(state, reason)
        )
        if not changed:
            return
        authors = {p.id: p for p in known}
        missing = list({m.author_id for m in changed} - authors.keys())
        if missing:
            authors |= await uow.principals.get_many(missing)
        for message in changed:
            await uow.events.append(
                self._events.message_updated(message, authors[message.author_id], target)
            )


__all__ = ["RunChanges"]
