"""PostgreSQL repository of messages."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.postgres.base import (
    Conn,
    MissingRow,
    PostgresRepository,
    members_by_value,
    uuid_array_text,
)
from turnkeeper.adapters.postgres.events import PostgresEventLog, payload_json
from turnkeeper.adapters.postgres.locked_threads import LockedThreads
from turnkeeper.adapters.postgres.pipelining import PendingOne
from turnkeeper.domain.events import NewEvent
from turnkeeper.domain.messaging import Message, MessageKind, Origin, TriggerState

_ORIGIN_OF = members_by_value(Origin)
_MESSAGE_KIND_OF = members_by_value(MessageKind)
_TRIGGER_STATE_OF = members_by_value(TriggerState)


def _value(state: TriggerState | None) -> str | None:
    return None if state is None else state.value


def message_of(row: q.MessageRow) -> Message:
    """A message row as the domain's `Message`."""
    return Message(
        id=row.id,
        thread_id=row.thread_id,
        thread_seq=row.thread_seq,
        author_id=row.author_id,
        origin=_ORIGIN_OF[row.origin],
        kind=_MESSAGE_KIND_OF[row.kind],
        content=row.content,
        mentions=tuple(row.mentions),
        reply_to_id=row.reply_to_id,
        restricted_to=None if row.restricted_to is None else tuple(row.restricted_to),
        client_msg_id=row.client_msg_id,
        digest=row.digest,
        trigger_state=None if row.trigger_state is None else _TRIGGER_STATE_OF[row.trigger_state],
        trigger_state_reason=row.trigger_state_reason,
        run_id=row.run_id,
        created_at=row.created_at,
        deleted_at=row.deleted_at,
        version=row.version,
    )


async def _insert_with_event(conn: Conn, message: Message, event: NewEvent, ord: int) -> None:
    await q.insert_message_with_event(
        conn,
        id=message.id,
        thread_id=message.thread_id,
        thread_seq=message.thread_seq,
        author_id=message.author_id,
        origin=message.origin.value,
        kind=message.kind.value,
        content=message.content,
        mentions=uuid_array_text(message.mentions) or "{}",
        reply_to_id=message.reply_to_id,
        restricted_to=uuid_array_text(message.restricted_to),
        client_msg_id=message.client_msg_id,
        digest=message.digest,
        trigger_state=_value(message.trigger_state),
        trigger_state_reason=message.trigger_state_reason,
        run_id=message.run_id,
        created_at=message.created_at,
        deleted_at=message.deleted_at,
        version=message.version,
        ord=ord,
        event_type=event.type.value,
        actor_id=event.actor_id,
        actor_kind=event.actor_kind,
        space_id=event.space_id,
        channel_id=event.channel_id,
        event_thread_id=event.thread_id,
        resource_kind=event.resource_kind,
        resource_id=event.resource_id,
        resource_version=event.resource_version,
        audience_id=event.audience_id,
        event_restricted_to=uuid_array_text(event.restricted_to),
        payload=payload_json(event.payload),
        event_created_at=event.created_at,
    )


class PostgresMessageRepository(PostgresRepository):
    """Messages; satisfies `MessageRepository`.

    Args:
        conn: the unit's connection.
        locked: the unit's locked threads: a message that takes a seq allocated there
            writes the thread's latest_seq in its own insert (``InsertMessageWithEvent``).
        events: the unit's event log, which numbers a message's event written with it.
    """

    def __init__(
        self,
        conn: Conn,
        locked: LockedThreads | None = None,
        events: PostgresEventLog | None = None,
    ) -> None:
        super().__init__(conn)
        self._locked = locked
        self._events = events
        # Reads `prefetch` queued; any message write of the unit drops them (they may
        # be older than what the unit wrote).
        self._queued: dict[uuid.UUID, PendingOne[q.MessageRow]] = {}

    async def prefetch(self, message_id: uuid.UUID) -> None:
        """Queue the read of a message (see the port).

        Args:
            message_id: the message.
        """
        if message_id not in self._queued:
            self._queued[message_id] = await q.start_get_message(self._conn, id=message_id)

    async def add(self, message: Message, created: NewEvent | None = None) -> None:
        """Store a new message (and its message.created event: see the port).

        One statement for the message, its thread's latest_seq and its event
        (``InsertMessageWithEvent``) when the seq is the unit's unwritten allocation and
        no other event waits to be numbered; else the message alone, the event buffered
        as `PostgresEventLog.append` buffers it, and the seq written by `LockedThreads`.

        Args:
            message: the message (its thread_seq allocated by `allocate_seq`).
            created: its message.created event, or None.

        Raises:
            RetriableConflict: when (author, client_msg_id) was taken by a concurrent unit
                (translated by the unit from ``messages_author_client_msg_id_key``).
            TypeError: with `created`, for a repository built without the unit's log.
        """
        self._queued.clear()
        events, locked = self._events, self._locked
        if (
            created is not None
            and events is not None
            and locked is not None
            and events.can_number_now()
            and locked.claim(message.thread_id, message.thread_seq)
        ):
            await _insert_with_event(self._conn, message, created, events.number_now())
            return
        await q.insert_message(
            self._conn,
            id=message.id,
            thread_id=message.thread_id,
            thread_seq=message.thread_seq,
            author_id=message.author_id,
            origin=message.origin.value,
            kind=message.kind.value,
            content=message.content,
            mentions=list(message.mentions),
            reply_to_id=message.reply_to_id,
            restricted_to=None if message.restricted_to is None else list(message.restricted_to),
            client_msg_id=message.client_msg_id,
            digest=message.digest,
            trigger_state=_value(message.trigger_state),
            trigger_state_reason=message.trigger_state_reason,
            run_id=message.run_id,
            created_at=message.created_at,
            deleted_at=message.deleted_at,
            version=message.version,
        )
        if created is not None:
            if events is None:
                raise TypeError("a message with its event needs the unit's event log")
            await events.append(created)

    async def get(self, message_id: uuid.UUID) -> Message | None:
        """The message, or None.

        Args:
            message_id: the id.

        Returns:
            The message, or None.
        """
        queued = self._queued.pop(message_id, None)
        row = (
            await queued.result()
            if queued is not None
            else await q.get_message(self._conn, id=message_id)
        )
        return None if row is None else message_of(row)

    async def by_client_id(self, author_id: uuid.UUID, client_msg_id: str) -> Message | None:
        """The message an author stored under a client id.

        Args:
            author_id: the author.
            client_msg_id: the author's idempotency key.

        Returns:
            The message, or None.
        """
        row = await q.get_message_by_client_id(
            self._conn, author_id=author_id, client_msg_id=client_msg_id
        )
        return None if row is None else message_of(row)

    async def list_visible(
        self, thread_id: uuid.UUID, reader_id: uuid.UUID, after_seq: int, limit: int
    ) -> list[Message]:
        """Messages after a seq that the reader may see, oldest first.

        Args:
            thread_id: the thread.
            reader_id: the reader (restricted messages: members and author only).
            after_seq: exclusive lower bound of thread_seq.
            limit: at most this many messages.

        Returns:
            The messages.
        """
        rows = await q.list_visible_messages(
            self._conn,
            thread_id=thread_id,
            after_seq=after_seq,
            reader_id=reader_id,
            max_rows=limit,
        )
        return [message_of(row) for row in rows]

    async def set_trigger_states(
        self, message_ids: Sequence[uuid.UUID], state: TriggerState, reason: str | None
    ) -> list[Message]:
        """Set the trigger_state of several messages in one statement.

        Args:
            message_ids: the messages.
            state: the new trigger state.
            reason: its reason.

        Returns:
            The changed messages, ordered by thread_seq then id.
        """
        if not message_ids:
            return []
        self._queued.clear()
        rows = await q.set_trigger_states(
            self._conn,
            trigger_state=state.value,
            trigger_state_reason=reason,
            ids=list(message_ids),
        )
        return sorted((message_of(row) for row in rows), key=lambda m: (m.thread_seq, m.id))

    async def set_trigger_state(
        self, message_id: uuid.UUID, state: TriggerState, reason: str | None
    ) -> Message:
        """Change a message's trigger_state (version + 1).

        Args:
            message_id: the message.
            state: the new trigger state.
            reason: the reason of a failed or cancelled trigger.

        Returns:
            The changed message.

        Raises:
            MissingRow: for an unknown message.
        """
        self._queued.clear()
        row = await q.set_message_trigger_state(
            self._conn, id=message_id, trigger_state=state.value, trigger_state_reason=reason
        )
        if row is None:
            raise MissingRow(f"message {message_id}")
        return message_of(row)
