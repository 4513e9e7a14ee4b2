"""PostgreSQL side of the freshness gate: the compare-and-set allocator and its miss reads.

`PostgresFreshnessRepository` runs ``CasThreadSeq`` (threads.sql) and the two statements
of sql/queries/freshness.sql on the connection of its unit of work. Driver errors are
translated by the unit (`turnkeeper.adapters.postgres.errors.wrap_errors`).
"""

from __future__ import annotations

import uuid

from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.postgres.base import Conn, PostgresRepository
from turnkeeper.adapters.postgres.locked_threads import LockedThreads
from turnkeeper.application.ports import ThreadFrontier, VisibleWindow
from turnkeeper.domain.errors import NotFound

#: What NewestVisibleInWindow returns for "no such seq" (thread_seq starts at 1).
_NO_SEQ = 0


class PostgresFreshnessRepository(PostgresRepository):
    """The freshness gate's statements (a `turnkeeper.application.ports.FreshnessRepository`).

    Args:
        conn: the unit's connection.
        locked: the unit's threads read under their row lock (shared with the threads
            repository); a fresh one when None.
    """

    def __init__(self, conn: Conn, locked: LockedThreads | None = None) -> None:
        super().__init__(conn)
        self._locked = locked if locked is not None else LockedThreads(conn)

    async def compare_and_allocate(self, thread_id: uuid.UUID, seen_seq: int) -> int | None:
        """Allocate the next seq only when the thread's frontier is `seen_seq`.

        Under READ COMMITTED an UPDATE that meets a row locked by a concurrent append
        waits for it, then re-checks ``latest_seq = seen_seq`` on the committed version:
        of several sends from one frontier exactly one gets a row.

        Args:
            thread_id: the thread.
            seen_seq: the frontier the sender saw.

        A thread the unit already holds under its row lock (``post_facts``) is decided
        on the latest_seq read then: nobody else can have moved it since.

        Returns:
            ``seen_seq + 1`` with the thread row locked, or None (zero rows).
        """
        latest = self._locked.latest(thread_id)
        if latest is not None:
            return self._locked.take(thread_id) if latest == seen_seq else None
        await self._locked.write()
        return await q.cas_thread_seq(self._conn, id=thread_id, seen_seq=seen_seq)

    async def frontier(self, thread_id: uuid.UUID) -> ThreadFrontier:
        """The committed raw frontier of a thread (no lock).

        Under the unit's lock of the thread row nobody else moves it: the frontier is
        the one the unit read with the lock (with its own allocations), without a
        round trip.

        Args:
            thread_id: the thread.

        Returns:
            ``latest_seq`` and ``has_restricted``.

        Raises:
            NotFound: for an unknown thread.
        """
        latest = self._locked.latest(thread_id)
        restricted = self._locked.has_restricted(thread_id)
        if latest is not None and restricted is not None:
            return ThreadFrontier(latest_seq=latest, has_restricted=restricted)
        await self._locked.write()
        row = await q.read_thread_frontier(self._conn, id=thread_id)
        if row is None:
            raise NotFound()
        return ThreadFrontier(latest_seq=row.latest_seq, has_restricted=row.has_restricted)

    async def newest_visible(
        self,
        thread_id: uuid.UUID,
        viewer_id: uuid.UUID,
        *,
        after_seq: int,
        through_seq: int,
        batch: int,
    ) -> VisibleWindow:
        """One newest-first batch of the visibility check.

        Args:
            thread_id: the thread.
            viewer_id: the sender.
            after_seq: the lower bound (exclusive): the sender's seen frontier.
            through_seq: the upper bound (inclusive).
            batch: the most messages to look at (``freshness.visible_miss_batch``).

        Returns:
            What the batch saw.
        """
        await self._locked.write()
        row = await q.newest_visible_in_window(
            self._conn,
            viewer_id=viewer_id,
            thread_id=thread_id,
            after_seq=after_seq,
            through_seq=through_seq,
            max_rows=batch,
        )
        if row is None or row.examined == 0:
            return VisibleWindow(examined=0)
        newest = row.newest_visible_seq
        return VisibleWindow(
            examined=row.examined,
            lowest_seq=row.lowest_seq,
            newest_visible_seq=None if newest == _NO_SEQ else newest,
        )


__all__ = ["PostgresFreshnessRepository"]
