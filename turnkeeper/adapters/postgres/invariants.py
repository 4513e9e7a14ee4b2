"""Invariants of a turnkeeper database, checked by SQL over the committed rows.

Each check is one named query of ``sql/queries/invariants.sql`` that returns the rows
breaking its rule. `check_invariants` runs them all and returns every violation; an empty
list means the database holds every invariant. The tests run them after every scenario,
and ``turnkeeper check`` runs them against any database.

Example:
    >>> async with await psycopg.AsyncConnection.connect(conninfo) as conn:  # doctest: +SKIP
    ...     for violation in await check_invariants(conn):
    ...         print(violation.line())
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import attrs
import psycopg

from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.postgres.errors import bounded_conninfo, require_conninfo, wrap_errors


class Invariant(enum.StrEnum):
    """The invariants the check knows, each named for the rule it protects."""

    THREAD_SEQ = "thread_seq_contiguous"
    ONE_ACTIVE_RUN = "one_active_run_per_thread"
    NO_OPEN_FOLLOWUP_ON_ENDED_RUN = "no_open_followup_on_ended_run"
    RUN_VERSION = "run_version_counts_changes"
    TRIGGER_STATE = "trigger_state_follows_run"
    TRIGGER_REASON = "trigger_reason_only_when_failed_or_cancelled"
    NON_HUMAN_TRIGGER_STATE = "no_trigger_state_on_non_human_message"
    NULL_PAYLOAD = "no_null_in_event_payload"
    PERSONAL_CONTENT = "no_content_in_personal_event"
    MESSAGE_AFTER_DONE = "no_message_after_done_without_reopen"


@attrs.frozen(kw_only=True)
class Violation:
    """One row breaking one invariant.

    Attributes:
        invariant: the rule broken.
        subject_id: the thread, run, message or event resource concerned.
        detail: what the check saw.
    """

    invariant: Invariant
    subject_id: uuid.UUID
    detail: str

    def line(self) -> str:
        """The violation as one line of text (what ``turnkeeper check`` prints)."""
        return f"{self.invariant.value} {self.subject_id} {self.detail}"


class _Row(Protocol):
    @property
    def subject_id(self) -> uuid.UUID: ...

    @property
    def detail(self) -> str: ...


_Query = Callable[[psycopg.AsyncConnection[Any]], Awaitable[Sequence[_Row]]]

#: Every invariant with the query that finds its violations, in report order.
CHECKS: tuple[tuple[Invariant, _Query], ...] = (
    (Invariant.THREAD_SEQ, q.thread_seq_violations),
    (Invariant.ONE_ACTIVE_RUN, q.active_run_violations),
    (Invariant.NO_OPEN_FOLLOWUP_ON_ENDED_RUN, q.open_followup_on_ended_run_violations),
    (Invariant.RUN_VERSION, q.run_version_violations),
    (Invariant.TRIGGER_STATE, q.trigger_state_violations),
    (Invariant.TRIGGER_REASON, q.trigger_reason_violations),
    (Invariant.NON_HUMAN_TRIGGER_STATE, q.non_human_trigger_state_violations),
    (Invariant.NULL_PAYLOAD, q.null_payload_violations),
    (Invariant.PERSONAL_CONTENT, q.personal_content_violations),
    (Invariant.MESSAGE_AFTER_DONE, q.message_after_done_violations),
)


async def check_invariants(conn: psycopg.AsyncConnection[Any]) -> list[Violation]:
    """Run every invariant check on a connection.

    The checks read in one REPEATABLE READ snapshot when the connection is idle, so
    they see one consistent state even beside live traffic.

    Args:
        conn: a connection to a migrated turnkeeper database.

    Returns:
        Every violation found, grouped by invariant in the order of `CHECKS`.
    """
    violations: list[Violation] = []
    async with conn.transaction():
        # A snapshot for the whole check: a run ending between two statements must not
        # look like a broken invariant.
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        for invariant, query in CHECKS:
            violations.extend(
                Violation(invariant=invariant, subject_id=row.subject_id, detail=row.detail)
                for row in await query(conn)
            )
    return violations


async def check_database(conninfo: str, *, connect_within: float | None = None) -> list[Violation]:
    """Connect to a database and run every invariant check.

    Args:
        conninfo: libpq connection string or URI.
        connect_within: seconds the connection attempt may take (``database.request_timeout``;
            None: libpq's own bound, none by default).

    Returns:
        Every violation found.

    Raises:
        ValueError: for a connection string that does not parse.
        StoreUnavailable: the database cannot be reached, or was never migrated.
    """
    require_conninfo(conninfo)
    with wrap_errors():
        target = bounded_conninfo(conninfo, connect_within)
        async with await psycopg.AsyncConnection.connect(target) as conn:
            return await check_invariants(conn)


__all__ = ["CHECKS", "Invariant", "Violation", "check_database", "check_invariants"]
