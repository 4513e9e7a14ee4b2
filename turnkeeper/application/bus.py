"""The in-transaction event bus.

Subscribers run inside the publishing unit of work, on its transaction, before commit.
A subscriber that raises vetoes the unit: the error propagates and everything the unit
wrote rolls back. Messaging publishes `MessagePosted`; the runs capability subscribes
without messaging knowing it exists.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import attrs

from turnkeeper.application.ports import UnitOfWork
from turnkeeper.domain.authorization import AccessTarget
from turnkeeper.domain.messaging import MessageKind, Origin
from turnkeeper.domain.world import PrincipalKind

E = TypeVar("E")


@attrs.frozen(kw_only=True)
class MessagePosted:
    """Published after every message insert, inside the message's unit of work.

    Attributes:
        message_id: the new message.
        thread_id: its thread.
        channel_id: its channel.
        space_id: its space.
        author_id: the author.
        author_kind: person, agent or app.
        origin: human, agent, app or system.
        kind: text, system or run.
        mentions: mentioned principal ids.
        run_id: for kind run the anchored run; for an agent answer the run the request
            named (validated by the runs subscriber, never stored on the message).
        restricted_to: the audience of a restricted message (None: public).
        target: the thread, channel and space as the publisher read them in this unit
            (subscribers use it instead of reading them again; None: not known).
    """

    message_id: uuid.UUID
    thread_id: uuid.UUID
    channel_id: uuid.UUID
    space_id: uuid.UUID
    author_id: uuid.UUID
    author_kind: PrincipalKind
    origin: Origin
    kind: MessageKind
    mentions: tuple[uuid.UUID, ...] = ()
    run_id: uuid.UUID | None = None
    restricted_to: tuple[uuid.UUID, ...] | None = None
    target: AccessTarget | None = attrs.field(default=None, eq=False, repr=False)


Handler = Callable[[UnitOfWork, Any], Awaitable[None]]


class EventBus:
    """Registry of in-transaction subscribers, called in registration order."""

    def __init__(self) -> None:
        self._handlers: defaultdict[type[Any], list[Handler]] = defaultdict(list)

    def subscribe(
        self, event_type: type[E], handler: Callable[[UnitOfWork, E], Awaitable[None]]
    ) -> None:
        """Register a handler for an event type.

        Args:
            event_type: the event class.
            handler: coroutine taking the unit of work and the event.
        """
        self._handlers[event_type].append(handler)

    async def publish(self, uow: UnitOfWork, event: object) -> None:
        """Run every handler of the event's type inside the unit.

        Args:
            uow: the publishing unit of work.
            event: the event.

        Raises:
            Exception: whatever a handler raises (a veto); later handlers do not run.
        """
        for handler in self._handlers.get(type(event), ()):
            await handler(uow, event)
