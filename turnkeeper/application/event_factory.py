"""The one factory of the log's events: every event type, its place, actor and payload.

Each event is placed where its target is (space, channel, thread), stamped with the
clock port's time, and carries the payload of API.md: documents for thread and message
events, ids and states for run events. Personal events (agent.invocation,
agent.followup, run.cancel_requested) have the agent as audience and carry no content.
``message.held`` (an agent send the freshness gate held) is a shared event that only the
owner may read (its ``restricted_to``), and carries no content either.
"""

from __future__ import annotations

import uuid

from turnkeeper.application.documents import (
    author_document,
    message_document,
    thread_document,
)
from turnkeeper.application.ports import Clock
from turnkeeper.domain.authorization import AccessTarget
from turnkeeper.domain.events import EventType, NewEvent
from turnkeeper.domain.messaging import Message
from turnkeeper.domain.runs import Run
from turnkeeper.domain.world import Principal, PrincipalKind, Thread

#: Who causes a trigger or a follow-up: always a person (only human messages trigger).
_PERSON = PrincipalKind.PERSON.value


class EventFactory:
    """Builds the new events of the log, stamped now.

    Args:
        clock: the time of every event.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def thread_created(self, thread: Thread, actor: Principal, target: AccessTarget) -> NewEvent:
        """``thread.created`` with the thread document.

        Args:
            thread: the new thread (as the document should show it).
            actor: who created it.
            target: its channel and space.

        Returns:
            The event.
        """
        return self._new(
            EventType.THREAD_CREATED,
            AccessTarget(space=target.space, channel=target.channel, thread=thread),
            actor_id=actor.id,
            actor_kind=actor.kind.value,
            resource_kind="thread",
            resource_id=thread.id,
            payload={"thread": thread_document(thread)},
        )

    def thread_reopened(self, thread: Thread, actor: Principal, target: AccessTarget) -> NewEvent:
        """``thread.reopened``: a post into a done thread opened it again.

        Args:
            thread: the thread.
            actor: the author of the post.
            target: the thread with its channel and space.

        Returns:
            The event.
        """
        return self._new(
            EventType.THREAD_REOPENED,
            target,
            actor_id=actor.id,
            actor_kind=actor.kind.value,
            resource_kind="thread",
            resource_id=thread.id,
            payload={"thread_id": str(thread.id)},
        )

    def message_created(
        self, message: Message, author: Principal, target: AccessTarget
    ) -> NewEvent:
        """``message.created`` with the message document (restricted like the message).

        Args:
            message: the stored message.
            author: its author.
            target: its thread, channel and space.

        Returns:
            The event.
        """
        return self._message(EventType.MESSAGE_CREATED, message, author, target)

    def message_updated(
        self, message: Message, author: Principal, target: AccessTarget
    ) -> NewEvent:
        """``message.updated`` with the changed message's document.

        Args:
            message: the message after the change.
            author: its author (the actor of the event, as for message.created).
            target: its thread, channel and space.

        Returns:
            The event.
        """
        return self._message(EventType.MESSAGE_UPDATED, message, author, target)

    def message_held(
        self,
        agent: Principal,
        target: AccessTarget,
        *,
        owner_id: uuid.UUID,
        seen_up_to_seq: int,
        latest_seq: int,
        client_message_id: str,
        run_id: uuid.UUID | None = None,
    ) -> NewEvent:
        """``message.held``: the freshness gate held an agent's send; for the owner only.

        Nothing was stored, so the event names the thread, the agent and the frontiers
        of the held answer (``latest_seq`` is the answer's, never a seq the agent may
        not see), never the content.

        Args:
            agent: the sending agent (the actor and ``author``).
            target: the thread with its channel and space.
            owner_id: the owner, the event's only reader.
            seen_up_to_seq: the frontier the send carried.
            latest_seq: the held answer's ``latest_seq``.
            client_message_id: the send's idempotency key (omitted when empty).
            run_id: the run the send named, if any.

        Returns:
            The event, with the thread as its resource.
        """
        thread = target.thread
        assert thread is not None  # a send always targets a thread
        payload: dict[str, object] = {
            "thread_id": str(thread.id),
            "author": author_document(agent),
            "seen_up_to_seq": seen_up_to_seq,
            "latest_seq": latest_seq,
        }
        if client_message_id:
            payload["client_message_id"] = client_message_id
        if run_id is not None:
            payload["run_id"] = str(run_id)
        return self._new(
            EventType.MESSAGE_HELD,
            target,
            actor_id=agent.id,
            actor_kind=agent.kind.value,
            resource_kind="thread",
            resource_id=thread.id,
            restricted_to=(owner_id,),
            payload=payload,
        )

    def run_state_changed(
        self,
        run: Run,
        actor: Principal,
        target: AccessTarget,
        *,
        restricted_to: tuple[uuid.UUID, ...] | None = None,
    ) -> NewEvent:
        """``run.state_changed`` after every stored change of a run.

        Args:
            run: the run after the change.
            actor: who changed it.
            target: its thread, channel and space.
            restricted_to: its only readers (a change made for restricted messages
                alone); None: every reader of the thread.

        Returns:
            The event (state, version and the reason when there is one).
        """
        payload: dict[str, object] = {
            "run_id": str(run.id),
            "state": run.state.value,
            "version": run.version,
        }
        if run.state_reason is not None:
            payload["state_reason"] = run.state_reason
        return self._new(
            EventType.RUN_STATE_CHANGED,
            target,
            actor_id=actor.id,
            actor_kind=actor.kind.value,
            resource_kind="run",
            resource_id=run.id,
            resource_version=run.version,
            restricted_to=restricted_to,
            payload=payload,
        )

    def agent_invocation(self, run: Run, target: AccessTarget) -> NewEvent:
        """``agent.invocation`` to the run's agent, caused by the run's author.

        Args:
            run: the new run.
            target: its thread, channel and space.

        Returns:
            The personal event.
        """
        return self._to_agent(
            EventType.AGENT_INVOCATION, run, target, run.triggering_message_id, run.triggered_by
        )

    def agent_followup(
        self, run: Run, target: AccessTarget, message_id: uuid.UUID, author_id: uuid.UUID
    ) -> NewEvent:
        """``agent.followup`` to the run's agent for one follow-up.

        Args:
            run: the run the follow-up belongs to.
            target: its thread, channel and space.
            message_id: the follow-up message.
            author_id: its author (a person).

        Returns:
            The personal event.
        """
        return self._to_agent(EventType.AGENT_FOLLOWUP, run, target, message_id, author_id)

    def run_cancel_requested(self, run: Run, person: Principal, target: AccessTarget) -> NewEvent:
        """``run.cancel_requested`` to the run's agent.

        Args:
            run: the run.
            person: who asked it to stop.
            target: its thread, channel and space.

        Returns:
            The personal event.
        """
        return self._new(
            EventType.RUN_CANCEL_REQUESTED,
            target,
            actor_id=person.id,
            actor_kind=person.kind.value,
            resource_kind="run",
            resource_id=run.id,
            audience_id=run.agent_id,
            payload={"run_id": str(run.id)},
        )

    def _message(
        self, type_: EventType, message: Message, author: Principal, target: AccessTarget
    ) -> NewEvent:
        return self._new(
            type_,
            target,
            actor_id=author.id,
            actor_kind=author.kind.value,
            resource_kind="message",
            resource_id=message.id,
            resource_version=message.version,
            restricted_to=message.restricted_to,
            payload={"message": message_document(message, author)},
        )

    def _to_agent(
        self,
        type_: EventType,
        run: Run,
        target: AccessTarget,
        message_id: uuid.UUID,
        author_id: uuid.UUID,
    ) -> NewEvent:
        return self._new(
            type_,
            target,
            actor_id=author_id,
            actor_kind=_PERSON,
            resource_kind="run",
            resource_id=run.id,
            audience_id=run.agent_id,
            payload={
                "run_id": str(run.id),
                "thread_id": str(run.thread_id),
                "message_id": str(message_id),
            },
        )

    def _new(
        self,
        type_: EventType,
        target: AccessTarget,
        *,
        actor_id: uuid.UUID,
        actor_kind: str,
        resource_kind: str,
        resource_id: uuid.UUID,
        payload: dict[str, object],
        resource_version: int | None = None,
        audience_id: uuid.UUID | None = None,
        restricted_to: tuple[uuid.UUID, ...] | None = None,
    ) -> NewEvent:
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
            created_at=self._clock.now(),
        )


__all__ = ["EventFactory"]
