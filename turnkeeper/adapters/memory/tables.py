"""The tables of the in-memory store: one dict (or list) of frozen values per table."""

from __future__ import annotations

import bisect
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import attrs

from turnkeeper.application.ports import AdminChange, AgentCursor
from turnkeeper.domain.credentials import ApiToken
from turnkeeper.domain.events import Event
from turnkeeper.domain.followups import FollowupMode, FollowupState
from turnkeeper.domain.messaging import Message
from turnkeeper.domain.ratelimit import Bucket
from turnkeeper.domain.runs import Run
from turnkeeper.domain.world import Channel, Grant, Principal, Space, Thread


@attrs.frozen(kw_only=True)
class FollowupRow:
    """One row of the follow-up table (keyed by message id)."""

    run_id: uuid.UUID
    state: FollowupState
    created_at: datetime
    updated_at: datetime
    #: The run of its acceptance and the mode recorded then (kept when it moves).
    accepted_run_id: uuid.UUID
    mode: FollowupMode


@attrs.define
class Tables:
    """Every table of one in-memory database; the repositories of a unit share them."""

    principals: dict[uuid.UUID, Principal] = attrs.Factory(dict)
    tokens: dict[uuid.UUID, ApiToken] = attrs.Factory(dict)
    token_hashes: dict[bytes, uuid.UUID] = attrs.Factory(dict)
    spaces: dict[uuid.UUID, Space] = attrs.Factory(dict)
    channels: dict[uuid.UUID, Channel] = attrs.Factory(dict)
    threads: dict[uuid.UUID, Thread] = attrs.Factory(dict)
    grants: dict[uuid.UUID, Grant] = attrs.Factory(dict)
    messages: dict[uuid.UUID, Message] = attrs.Factory(dict)
    client_ids: dict[tuple[uuid.UUID, str], uuid.UUID] = attrs.Factory(dict)
    events: list[Event] = attrs.Factory(list)
    denials: dict[tuple[uuid.UUID, str, str, datetime], int] = attrs.Factory(dict)
    changes: list[AdminChange] = attrs.Factory(list)
    buckets: dict[tuple[uuid.UUID, str], Bucket] = attrs.Factory(dict)
    runs: dict[uuid.UUID, Run] = attrs.Factory(dict)
    cursors: dict[uuid.UUID, AgentCursor] = attrs.Factory(dict)
    followups: dict[uuid.UUID, FollowupRow] = attrs.Factory(dict)
    #: runs.triggering_message_id indexed: triggering message id -> run id.
    run_triggers: dict[uuid.UUID, uuid.UUID] = attrs.Factory(dict)

    def snapshot(self) -> Tables:
        """A copy to restore on rollback (values are frozen: shallow copies suffice).

        Returns:
            New tables holding the same values.
        """
        return Tables(**{f.name: _copy(getattr(self, f.name)) for f in attrs.fields(Tables)})


def _copy(value: Any) -> Any:
    return list(value) if isinstance(value, list) else dict(value)


def events_after(events: list[Event], after: int, below: int | None) -> Iterator[Event]:
    """The events of the log after a seq and below a bound, in seq order.

    Args:
        events: `Tables.events` (kept in seq order).
        after: the cursor: only later seqs.
        below: the store's horizon (None: no bound).

    Yields:
        Each such event, starting right after the cursor (found by bisection).
    """
    for at in range(bisect.bisect_right(events, after, key=event_seq), len(events)):
        event = events[at]
        if below is not None and event.seq >= below:
            return
        yield event


def event_seq(event: Event) -> int:
    """The seq of an event: the key that keeps `Tables.events` in order (for `bisect`).

    Args:
        event: an event of the log.

    Returns:
        Its seq.
    """
    return event.seq
