"""PostgreSQL event log: events numbered by their writer's transaction, served below the horizon."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any

from turnkeeper.adapters.event_seqs import check_count
from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.postgres.base import (
    Conn,
    MissingRow,
    PostgresRepository,
    members_by_value,
    uuid_array_text,
)
from turnkeeper.application.ports import ReaderScope
from turnkeeper.domain.events import Event, EventType, NewEvent

_EVENT_TYPE_OF = members_by_value(EventType)


def _event(row: q.EventRow) -> Event:
    return Event(
        seq=row.seq,
        type=_EVENT_TYPE_OF[row.type],
        actor_id=row.actor_id,
        actor_kind=row.actor_kind,
        space_id=row.space_id,
        channel_id=row.channel_id,
        thread_id=row.thread_id,
        resource_kind=row.resource_kind,
        resource_id=row.resource_id,
        resource_version=row.resource_version,
        audience_id=row.audience_id,
        restricted_to=None if row.restricted_to is None else tuple(row.restricted_to),
        payload=row.payload,
        created_at=row.created_at,
    )


async def _no_seqs() -> list[int]:
    return []


def _json_default(value: object) -> str:
    """JSON for the non-JSON values services may put in payloads (ids and times)."""
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def payload_json(payload: Mapping[str, Any]) -> str:
    """The JSON text of an event payload as stored (ids and times become strings).

    Args:
        payload: the event payload.

    Returns:
        Compact JSON with sorted keys.
    """
    return json.dumps(
        payload, default=_json_default, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )


async def _start_one(conn: Conn, event: NewEvent, ord: int) -> Callable[[], Awaitable[list[int]]]:
    """Queue the append of a unit's only event (``AppendEvent``: no one-element arrays)."""
    pending = await q.start_append_event(
        conn,
        ord=ord,
        type=event.type.value,
        actor_id=event.actor_id,
        actor_kind=event.actor_kind,
        space_id=event.space_id,
        channel_id=event.channel_id,
        thread_id=event.thread_id,
        resource_kind=event.resource_kind,
        resource_id=event.resource_id,
        resource_version=event.resource_version,
        audience_id=event.audience_id,
        restricted_to=uuid_array_text(event.restricted_to),
        payload=payload_json(event.payload),
        created_at=event.created_at,
    )

    async def seqs() -> list[int]:
        seq = await pending.result()
        if seq is None:
            raise MissingRow("the appended event")
        return [seq]

    return seqs


class PostgresEventLog(PostgresRepository):
    """The event log; satisfies `EventLog`.

    Appended events are buffered and written by `flush`, which the unit calls right
    before COMMIT, in one statement (`AppendEvents`). Their seqs derive from the unit's
    transaction id (`turnkeeper.adapters.event_seqs`), so writers share no row, lock or
    sequence and never wait for each other's commits. Reads serve only events below the
    horizon of the oldest transaction still running (migration 0009): no event can
    still appear there, so a reader paging by seq never passes one that commits later.

    Args:
        conn: the unit's connection.
    """

    def __init__(self, conn: Conn) -> None:
        super().__init__(conn)
        self._pending: list[NewEvent] = []
        # Events this transaction has inserted already: the next one's number follows.
        self._numbered = 0

    async def append(self, event: NewEvent) -> None:
        """Buffer an event; it gets its seq at flush and is readable once below the horizon.

        Args:
            event: the event.

        Raises:
            TooManyEvents: beyond the events one transaction can number.
        """
        check_count(self._numbered + len(self._pending) + 1)
        self._pending.append(event)

    def can_number_now(self) -> bool:
        """Whether an event may be numbered now (no buffered event comes before it).

        Returns:
            True when no event is buffered.
        """
        return not self._pending

    def number_now(self) -> int:
        """Number an event that another statement of the unit writes at once.

        Only when `can_number_now`, so that the unit's events keep their append order.

        Returns:
            The event's number in the transaction.

        Raises:
            TooManyEvents: beyond the events one transaction can number.
            ValueError: when events are buffered.
        """
        if self._pending:
            raise ValueError("buffered events come first")
        check_count(self._numbered + 1)
        self._numbered += 1
        return self._numbered

    async def flush(self) -> list[int]:
        """Insert the buffered events, numbered in this transaction (called before COMMIT).

        Returns:
            The seqs given, in append order.
        """
        return await (await self.start_flush())()

    async def start_flush(self) -> Callable[[], Awaitable[list[int]]]:
        """Queue the append of the buffered events in the unit's pipeline (ADR 0022).

        The unit queues COMMIT right after it, so that both share one round trip.

        Returns:
            What gives the seqs, in append order, once the results arrived.
        """
        if not self._pending:
            return _no_seqs
        events, self._pending = self._pending, []
        first = self._numbered + 1
        self._numbered += len(events)
        if len(events) == 1:
            return await _start_one(self._conn, events[0], first)
        pending = await q.start_append_events(
            self._conn,
            offsets=list(range(first, first + len(events))),
            types=[e.type.value for e in events],
            actor_ids=[e.actor_id for e in events],
            actor_kinds=[e.actor_kind for e in events],
            space_ids=[e.space_id for e in events],
            channel_ids=[e.channel_id for e in events],
            thread_ids=[e.thread_id for e in events],
            resource_kinds=[e.resource_kind for e in events],
            resource_ids=[e.resource_id for e in events],
            resource_versions=[e.resource_version for e in events],
            audience_ids=[e.audience_id for e in events],
            restricted_tos=[uuid_array_text(e.restricted_to) for e in events],
            payloads=[payload_json(e.payload) for e in events],
            created_ats=[e.created_at for e in events],
        )

        async def seqs() -> list[int]:
            return list(await pending.result())

        return seqs

    def discard(self) -> None:
        """Forget the buffered events (the unit rolls back)."""
        self._pending.clear()
        self._numbered = 0

    async def read(self, scope: ReaderScope, after: int, limit: int) -> list[Event]:
        """Shared events after a cursor that the scope may read, in seq order.

        Only events below the horizon are served: their writers have all ended, and an
        event that becomes visible later always has a seq above every event served now.

        Args:
            scope: what the reader may see.
            after: the cursor (exclusive).
            limit: at most this many events.

        Returns:
            The events.
        """
        rows = await q.read_shared_events(
            self._conn,
            after_seq=after,
            everything=scope.everything,
            channel_ids=sorted(scope.channel_ids),
            thread_ids=sorted(scope.thread_ids),
            fixed_operator_id=scope.fixed_operator_id,
            reader_id=scope.reader_id,
            max_events=limit,
        )
        return [_event(row) for row in rows]

    async def read_personal(self, audience_id: uuid.UUID, after: int, limit: int) -> list[Event]:
        """One principal's personal events after a cursor, in seq order (below the horizon).

        Args:
            audience_id: the receiving principal.
            after: the cursor (exclusive).
            limit: at most this many events.

        Returns:
            The events.
        """
        rows = await q.read_audience_events(
            self._conn, audience_id=audience_id, token_hash=None, after_seq=after, max_events=limit
        )
        return [_event(row) for row in rows]

    async def start_personal_from_cursor(
        self,
        agent_id: uuid.UUID | None,
        after: int | None,
        limit: int,
        *,
        token_hash: bytes | None = None,
    ) -> Callable[[], Awaitable[list[Event]]]:
        """Queue an agent's first page after its cursor (`read_personal` in the pipeline).

        Queue it right after the statement that locks the agent's cursor: the page starts
        after `after`, or after the cursor's acknowledged seq when `after` is None, as that
        statement left it.

        Args:
            agent_id: the agent, or None to name it by `token_hash`.
            after: the cursor (exclusive), or None for the acknowledged seq.
            limit: at most this many events.
            token_hash: the stored form of the agent's live token (with no `agent_id`).

        Returns:
            Awaits the events (waiting for them when they have not arrived yet).
        """
        pending = await q.start_read_audience_events(
            self._conn,
            audience_id=agent_id,
            token_hash=token_hash,
            after_seq=after,
            max_events=limit,
        )

        async def events() -> list[Event]:
            return [_event(row) for row in await pending.result()]

        return events
