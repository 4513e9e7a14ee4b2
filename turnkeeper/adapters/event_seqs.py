"""The numbering of the event log, shared by the PostgreSQL and the memory adapter.

An event's seq derives from its writer's transaction id: ``(xid << SEQ_SHIFT) + n``, n
the event's number in its transaction (1 to `MAX_EVENTS_PER_UNIT`). No writer waits for
another to number its events. A reader serves only seqs below `horizon_bound` of the
oldest transaction still running: every transaction below it has ended, so no event can
still appear below that bound, and a cursor over it never skips (ADR 0020). PostgreSQL
computes the same in SQL (migration 0009, ``turnkeeper_event_seq_base`` and
``turnkeeper_event_horizon``).
"""

from __future__ import annotations

#: Bits of a seq that number the events of one transaction.
SEQ_SHIFT = 16
#: Events one unit of work may append (the numbers 1 to this fit below `SEQ_SHIFT`).
MAX_EVENTS_PER_UNIT = (1 << SEQ_SHIFT) - 1


class TooManyEvents(ValueError):
    """A unit appended more events than one transaction can number."""


def first_seq(xid: int) -> int:
    """The seq below the first event of a transaction.

    Args:
        xid: the transaction id (PostgreSQL's ``xid8``).

    Returns:
        ``xid << SEQ_SHIFT``; the transaction's events follow it.
    """
    return xid << SEQ_SHIFT


def horizon_bound(oldest_running_xid: int) -> int:
    """The seq below which every event is final.

    Args:
        oldest_running_xid: the oldest transaction id still running (or the next one to
            be assigned when none runs).

    Returns:
        Every seq below the result belongs to a transaction that has ended.
    """
    return oldest_running_xid << SEQ_SHIFT


def check_count(count: int) -> None:
    """Refuse a unit's events when they would not fit its numbers.

    Args:
        count: events appended by one unit.

    Raises:
        TooManyEvents: above `MAX_EVENTS_PER_UNIT`.
    """
    if count > MAX_EVENTS_PER_UNIT:
        raise TooManyEvents(
            f"a unit of work may append at most {MAX_EVENTS_PER_UNIT} events, not {count}"
        )
