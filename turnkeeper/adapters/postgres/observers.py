"""Observers of the statements write units send (`turnkeeper.adapters.postgres.executor`).

psycopg's instrumentation sees only statements run through psycopg's cursors, which
write units do not use: `observe_statements` is their hook. Tracing
(`turnkeeper.adapters.observability.tracing.StatementSpans`) and the benchmarks'
statement census use it. An observer is told a statement's text (never its values) and
the connection it runs on when the statement is sent, and may ask to be told its end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from turnkeeper.adapters.postgres.base import Conn

#: Called when a statement ends: with its error, or None when it succeeded.
StatementDone = Callable[[BaseException | None], None]


class StatementObserver(Protocol):
    """Told of every statement a `PipelineLink` sends (tracing, the benchmarks' census)."""

    def __call__(self, conn: Conn, query: str, /) -> StatementDone | None:
        """A statement is sent.

        Args:
            conn: the connection it runs on (for its `info`; nothing may be sent on it).
            query: the statement's text, with placeholders: never its values.

        Returns:
            What to call when the statement ends, or None.
        """
        ...


#: The observers in the order they came (read by the link at every statement).
OBSERVERS: list[StatementObserver] = []


def observe_statements(observer: StatementObserver) -> Callable[[], None]:
    """Tell `observer` of every statement write units send from now on.

    psycopg's instrumentation sees only statements run through psycopg's cursors, which
    write units do not use (`PipelineLink`); this is their hook.

    Args:
        observer: called in the task that sends each statement, at the send.

    Returns:
        A function that stops the observation.
    """
    OBSERVERS.append(observer)

    def undo() -> None:
        if observer in OBSERVERS:
            OBSERVERS.remove(observer)

    return undo


__all__ = ["OBSERVERS", "StatementDone", "StatementObserver", "observe_statements"]
