"""The in-transaction event bus.

Subscribers run inside the publishing unit of work, on its transaction, before commit.
A subscriber that raises vetoes the unit: the error propagates and everything the unit
wrote rolls back. Messaging publishes `MessagePosted`; the runs capability subscribes
without messaging knowing it exists. Every subscriber is registered in one place,
`turnkeeper.application.bootstrap.build_services`, in the order it runs.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import attrs

from turnkeeper.application.ports import UnitOfWork
from turnkeeper.domain.authorization import AccessTarget
from turnkeeper.domain.messaging import Message
from turnkeeper.domain.world import Principal

E = TypeVar("E")


@attrs.frozen(kw_only=True)
class MessagePosted:
    """Published after every message insert, inside the message's unit of work.

    It carries what the subscribers need, as the publisher holds it in this unit, so
    that no subscriber reads it again.

    Attributes:
        message: the stored message.
        author: its author.
        target: its thread with channel and space.
        run_id: for kind run the anchored run; for an agent answer the run the request
            named (validated by the answer check, never stored on the message).
    """

    message: Message
    author: Principal
    target: AccessTarget
    run_id: uuid.UUID | None = None


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
