"""What the generated statements need to run in a unit's pipeline (ADR 0022).

Every unit, write or read-only, runs its connection in libpq's pipeline mode through a
`PipelineLink` (`turnkeeper.adapters.postgres.uow`, ADR 0030). In that mode a statement
is only queued by ``execute``; the link waits for results when a row is fetched (one
round trip for everything queued before). So that every repository keeps the behaviour it had
outside a pipeline, a generated statement waits for its own result unless it was named
as one that may wait (`scripts/gen_queries.py`, ``PIPELINED``):

- `settled`: a statement without rows (``:exec``, ``:execrows``) waits for its result,
  so that its error is raised and its row count is known where it runs;
- `PendingOne` and `PendingMany`: the ``start_`` variant of a pipelined query only
  queues it; its rows are read later, so that several queries share one round trip.

Outside a link (psycopg's own cursors: the benchmarks' loops, scripts) each ``execute``
already waits, and these helpers cost nothing.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar, cast

import psycopg

from turnkeeper.adapters.postgres.executor import PipelineCursor

T = TypeVar("T")


async def settled(cur: psycopg.AsyncCursor[Any] | PipelineCursor) -> None:
    """Wait for the result of the statement just executed on `cur`, on a link.

    Args:
        cur: the cursor that executed the statement (a psycopg cursor has waited).

    Raises:
        psycopg.Error: the statement's error (or an earlier queued statement's).
    """
    if isinstance(cur, PipelineCursor):
        await cur.settle()


class PendingOne(Generic[T]):
    """The queued result of a ``:one`` statement (a ``start_`` function).

    Args:
        cur: the cursor that executed it; closed once the row is read.
    """

    def __init__(self, cur: psycopg.AsyncCursor[Any]) -> None:
        self._cur = cur

    async def result(self) -> T | None:
        """The row (waiting for it when it has not arrived yet), or None.

        Returns:
            The row, or None when no row matched.
        """
        try:
            return cast("T | None", await self._cur.fetchone())
        finally:
            await self._cur.close()


class PendingMany(Generic[T]):
    """The queued result of a ``:many`` statement (a ``start_`` function).

    Args:
        cur: the cursor that executed it; closed once the rows are read.
    """

    def __init__(self, cur: psycopg.AsyncCursor[Any]) -> None:
        self._cur = cur

    async def result(self) -> list[T]:
        """The rows (waiting for them when they have not arrived yet).

        Returns:
            The rows, in the order of the query.
        """
        try:
            return cast("list[T]", await self._cur.fetchall())
        finally:
            await self._cur.close()


__all__ = ["PendingMany", "PendingOne", "settled"]
