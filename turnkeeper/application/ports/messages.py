"""Messages and the append-only event log."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Protocol

import attrs

from turnkeeper.domain.events import Event, NewEvent
from turnkeeper.domain.messaging import Message, TriggerState


class MessageRepository(Protocol):
    """Messages."""

    async def add(self, message: Message, created: NewEvent | None = None) -> None:
        """Store a new message.

        With `created` (the message's message.created event) the event is appended to
        the unit's event log as well, exactly as `EventLog.append` would append it (in
        the unit's order); an adapter may write both in one statement (ADR 0024).

        Raises:
            RetriableConflict: when (author, client_msg_id) was taken by a concurrent unit.
        """
        ...

    async def get(self, message_id: uuid.UUID) -> Message | None:
        """The message, or None."""
        ...

    async def prefetch(self, message_id: uuid.UUID) -> None:
        """Start reading a message the unit is about to need, without waiting.

        A later `get` of it then costs no round trip of its own when the read arrived
        with another statement's (ADR 0022); a message written by the unit in between
        drops the read. Without a later read it is wasted work, never a wrong answer.

        Args:
            message_id: the message.
        """
        ...

    async def by_client_id(self, author_id: uuid.UUID, client_msg_id: str) -> Message | None:
        """The message an author stored under a client id, or None."""
        ...

    async def list_visible(
        self, thread_id: uuid.UUID, reader_id: uuid.UUID, after_seq: int, limit: int
    ) -> list[Message]:
        """Messages after a seq that the reader may see, oldest first, at most `limit`."""
        ...

    async def set_trigger_state(
        self, message_id: uuid.UUID, state: TriggerState, reason: str | None
    ) -> Message:
        """Change a message's trigger_state (version + 1) and return the new message."""
        ...

    async def set_trigger_states(
        self, message_ids: Sequence[uuid.UUID], state: TriggerState, reason: str | None
    ) -> list[Message]:
        """Set the trigger_state of several messages in one statement.

        Messages already in that state with that reason are not changed.

        Returns:
            The changed messages (version + 1), ordered by thread_seq then id.
        """
        ...


@attrs.frozen(kw_only=True)
class ReaderScope:
    """What a reader of the shared event feed may see: the threads it may open.

    The same per-thread rule as GET /v1/threads/{id}
    (`turnkeeper.domain.authorization.effective_level`), split by where each part comes
    from: grants give every thread of a channel, the channel's operator role gives its
    main thread, and a thread's fixed operator (never changed after creation) is matched
    by the log against the thread itself, in the same read as the events.

    Attributes:
        reader_id: the reading principal (for restricted messages).
        everything: the owner reads every channel.
        channel_ids: channels whose every thread the reader may open (its grants give read).
        thread_ids: single threads outside those channels the reader may open (the main
            threads of the channels an agent operates now).
        fixed_operator_id: the reading agent: threads whose fixed operator it is are
            readable too; None for people.
    """

    reader_id: uuid.UUID
    everything: bool = False
    channel_ids: frozenset[uuid.UUID] = frozenset()
    thread_ids: frozenset[uuid.UUID] = frozenset()
    fixed_operator_id: uuid.UUID | None = None


class EventLog(Protocol):
    """The append-only event log with a global seq in commit order."""

    async def append(self, event: NewEvent) -> None:
        """Append an event; it becomes visible, with its seq, when the unit commits."""
        ...

    async def read(self, scope: ReaderScope, after: int, limit: int) -> list[Event]:
        """Shared (non-personal) events after a cursor that the scope may read.

        Only events that no running transaction can precede are returned, so a cursor
        never skips an event that commits later.
        """
        ...
