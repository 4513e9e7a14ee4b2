"""The append-only event log: event types and the stored event value.

Payloads are JSON objects without null; message content never goes into a personal
event (the audience of agent.invocation and friends is an agent).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs


class EventType(enum.StrEnum):
    """Every event type the log holds."""

    THREAD_CREATED = "thread.created"
    THREAD_REOPENED = "thread.reopened"
    MESSAGE_CREATED = "message.created"
    MESSAGE_UPDATED = "message.updated"
    #: An agent send the freshness gate held: no message, no content; the owner's only.
    MESSAGE_HELD = "message.held"
    RUN_STATE_CHANGED = "run.state_changed"
    AGENT_INVOCATION = "agent.invocation"
    AGENT_FOLLOWUP = "agent.followup"
    RUN_CANCEL_REQUESTED = "run.cancel_requested"


#: The largest seq, cursor or version any store keeps: they are signed 64-bit integers
#: (PostgreSQL ``bigint``), so a larger one names nothing that exists. A use case refuses
#: one beyond it with ``out_of_range``, as the HTTP adapter does, on both stores.
MAX_SEQ = 2**63 - 1
#: Event types addressed to one principal; never served by the shared feed.
PERSONAL_TYPES = frozenset(
    {EventType.AGENT_INVOCATION, EventType.AGENT_FOLLOWUP, EventType.RUN_CANCEL_REQUESTED}
)


@attrs.frozen(kw_only=True)
class NewEvent:
    """An event to append; the log assigns its seq at commit.

    Attributes:
        type: the event type.
        actor_id: who caused it.
        actor_kind: person, agent, app (as text).
        space_id: scope.
        channel_id: scope.
        thread_id: scope.
        resource_kind: ``thread``, ``message`` or ``run``.
        resource_id: the resource.
        resource_version: the resource's version after the change, if it has one.
        audience_id: for personal events, the one principal that receives it.
        restricted_to: who alone may read the event in the shared feed: the audience of a
            restricted message, or the owner for ``message.held``.
        payload: JSON object without null values.
        created_at: time of the change.
    """

    type: EventType
    actor_id: uuid.UUID
    actor_kind: str
    space_id: uuid.UUID
    channel_id: uuid.UUID
    thread_id: uuid.UUID | None
    resource_kind: str
    resource_id: uuid.UUID
    resource_version: int | None = None
    audience_id: uuid.UUID | None = None
    restricted_to: tuple[uuid.UUID, ...] | None = None
    payload: Mapping[str, Any]
    created_at: datetime

    def __attrs_post_init__(self) -> None:
        """Refuse payloads with null anywhere and personal events without audience."""
        if _contains_null(self.payload):
            raise ValueError("event payloads never carry null")
        if (self.type in PERSONAL_TYPES) != (self.audience_id is not None):
            raise ValueError("personal events, and only they, have an audience")


@attrs.frozen(kw_only=True)
class Event(NewEvent):
    """An event stored in the log.

    Attributes:
        seq: global position in the log, allocated in commit order.
    """

    seq: int


def _contains_null(value: object) -> bool:
    # A walk with a stack, dicts tested before the Mapping ABC: every append builds a
    # payload and runs this, so it is on the hot path of every message.
    stack = [value]
    while stack:
        item = stack.pop()
        if item is None:
            return True
        if isinstance(item, dict | Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False
