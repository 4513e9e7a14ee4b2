"""In-memory repositories of messages and the event log.

Events are numbered as in PostgreSQL (`turnkeeper.adapters.event_seqs`): the event log of
a unit takes a transaction id from the store when it first appends, numbers its events
into the log at commit, and serves only seqs below the store's horizon.
"""

from __future__ import annotations

import bisect
import uuid
from collections.abc import Sequence
from typing import Protocol

import attrs

from turnkeeper.adapters.event_seqs import check_count, first_seq
from turnkeeper.adapters.memory.tables import Tables, event_seq, events_after
from turnkeeper.adapters.memory.world import visible_page
from turnkeeper.application.errors import RetriableConflict
from turnkeeper.application.ports import ReaderScope
from turnkeeper.domain.events import Event, NewEvent
from turnkeeper.domain.messaging import Message, TriggerState

__all__ = ["MemoryEventLog", "MemoryMessageRepository", "TransactionIds"]


class TransactionIds(Protocol):
    """What the event log needs of its store (`turnkeeper.adapters.memory.MemoryStore`)."""

    tables: Tables

    def take_xid(self) -> int:
        """A new transaction id, held as running until `end` releases it."""
        ...

    def end(self, xid: int) -> None:
        """A unit holding `xid` committed or rolled back."""
        ...

    def horizon(self) -> int:
        """The seq below which every event is final."""
        ...


class MemoryMessageRepository:
    """Messages; satisfies `turnkeeper.application.ports.MessageRepository`.

    Args:
        tables: the tables of the unit of work.
        events: the unit's event log (for the created event of `add`).
    """

    def __init__(self, tables: Tables, events: MemoryEventLog) -> None:
        self._t = tables
        self._events = events

    async def add(self, message: Message, created: NewEvent | None = None) -> None:
        """Store a new message, and append `created` to the unit's event log."""
        if message.client_msg_id is not None:
            key = (message.author_id, message.client_msg_id)
            if key in self._t.client_ids:
                # Same contract as PostgreSQL: the rerun of the unit finds the winner.
                raise RetriableConflict("messages_author_client_msg_id_key", reason="unique_race")
            self._t.client_ids[key] = message.id
        self._t.messages[message.id] = message
        if created is not None:
            await self._events.append(created)

    async def get(self, message_id: uuid.UUID) -> Message | None:
        """The message, or None."""
        return self._t.messages.get(message_id)

    async def by_client_id(self, author_id: uuid.UUID, client_msg_id: str) -> Message | None:
        """The message an author stored under a client id, or None."""
        message_id = self._t.client_ids.get((author_id, client_msg_id))
        return None if message_id is None else self._t.messages[message_id]

    async def prefetch(self, message_id: uuid.UUID) -> None:
        """Nothing to start: every read is immediate."""

    async def list_visible(
        self, thread_id: uuid.UUID, reader_id: uuid.UUID, after_seq: int, limit: int
    ) -> list[Message]:
        """Messages after a seq that the reader may see, oldest first, at most `limit`."""
        return visible_page(self._t, thread_id, reader_id, after_seq, limit)

    async def set_trigger_states(
        self, message_ids: Sequence[uuid.UUID], state: TriggerState, reason: str | None
    ) -> list[Message]:
        """Set the trigger_state of several messages; the changed ones by thread_seq, id."""
        changed = []
        for message_id in dict.fromkeys(message_ids):
            message = self._t.messages.get(message_id)
            if message is None or (
                message.trigger_state is state and message.trigger_state_reason == reason
            ):
                continue
            changed.append(await self.set_trigger_state(message_id, state, reason))
        return sorted(changed, key=lambda m: (m.thread_seq, m.id))

    async def set_trigger_state(
        self, message_id: uuid.UUID, state: TriggerState, reason: str | None
    ) -> Message:
        """Change a message's trigger_state (version + 1) and return the new message."""
        message = self._t.messages[message_id]
        changed = attrs.evolve(
            message,
            trigger_state=state,
            trigger_state_reason=reason,
            version=message.version + 1,
        )
        self._t.messages[message_id] = changed
        return changed


class MemoryEventLog:
    """The unit's event log; satisfies `turnkeeper.application.ports.EventLog`.

    Args:
        store: the store, for its tables, transaction ids and horizon.
    """

    def __init__(self, store: TransactionIds) -> None:
        self._store = store
        self._t = store.tables
        self.pending: list[NewEvent] = []
        self.xid: int | None = None

    async def append(self, event: NewEvent) -> None:
        """Append an event; it gets its seq when the unit commits."""
        check_count(len(self.pending) + 1)
        if self.xid is None:
            self.xid = self._store.take_xid()
        self.pending.append(event)

    async def read(self, scope: ReaderScope, after: int, limit: int) -> list[Event]:
        """Shared events after a cursor that the scope may read, below the horizon."""
        found: list[Event] = []
        for event in events_after(self._t.events, after, self._store.horizon()):
            if event.audience_id is not None:
                continue
            if not scope.everything and not self._in_scope(scope, event):
                continue
            if event.restricted_to is not None and scope.reader_id not in event.restricted_to:
                continue
            found.append(event)
            if len(found) >= limit:
                break
        return found

    def _in_scope(self, scope: ReaderScope, event: Event) -> bool:
        # As ReadSharedEvents: the fixed operator is looked up on the thread at read time.
        if event.channel_id in scope.channel_ids or event.thread_id in scope.thread_ids:
            return True
        thread = None if event.thread_id is None else self._t.threads.get(event.thread_id)
        return (
            thread is not None
            and scope.fixed_operator_id is not None
            and thread.operator_agent_id == scope.fixed_operator_id
        )

    def flush(self) -> None:
        """Number the pending events after the unit's transaction id into the log."""
        if self.xid is None:
            return
        base = first_seq(self.xid)
        log = self._t.events
        for number, event in enumerate(self.pending, start=1):
            values = {f.name: getattr(event, f.name) for f in attrs.fields(NewEvent)}
            # Seqs of different units interleave: the log stays in seq order for readers,
            # by an insertion at its place rather than a sort of the whole log.
            bisect.insort(log, Event(seq=base + number, **values), key=event_seq)
        self.pending.clear()

    def end(self) -> None:
        """The unit ended: its transaction id no longer holds the horizon back."""
        if self.xid is not None:
            self._store.end(self.xid)
            self.xid = None
