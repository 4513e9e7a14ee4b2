"""In-memory side of the freshness gate, over the tables of `turnkeeper.adapters.memory.tables`.

Units of the memory store run one at a time, so the compare-and-set is a plain compare
and the reads see every committed change.
"""

from __future__ import annotations

import uuid

import attrs

from turnkeeper.adapters.memory.tables import Tables
from turnkeeper.application.ports import ThreadFrontier, VisibleWindow
from turnkeeper.domain.errors import NotFound
from turnkeeper.domain.messaging import visible_to


class MemoryFreshnessRepository:
    """The freshness gate's allocator and reads; satisfies `FreshnessRepository`.

    Args:
        tables: the tables of the unit of work.
    """

    def __init__(self, tables: Tables) -> None:
        self._t = tables

    async def compare_and_allocate(self, thread_id: uuid.UUID, seen_seq: int) -> int | None:
        """The next seq when the thread's frontier is `seen_seq`, else None."""
        thread = self._t.threads.get(thread_id)
        if thread is None or thread.latest_seq != seen_seq:
            return None
        self._t.threads[thread_id] = attrs.evolve(thread, latest_seq=seen_seq + 1)
        return seen_seq + 1

    async def frontier(self, thread_id: uuid.UUID) -> ThreadFrontier:
        """The raw frontier of a thread (`NotFound` for an unknown one)."""
        thread = self._t.threads.get(thread_id)
        if thread is None:
            raise NotFound()
        return ThreadFrontier(latest_seq=thread.latest_seq, has_restricted=thread.has_restricted)

    async def newest_visible(
        self,
        thread_id: uuid.UUID,
        viewer_id: uuid.UUID,
        *,
        after_seq: int,
        through_seq: int,
        batch: int,
    ) -> VisibleWindow:
        """One newest-first batch of the visibility check."""
        window = sorted(
            (
                m
                for m in self._t.messages.values()
                if m.thread_id == thread_id and after_seq < m.thread_seq <= through_seq
            ),
            key=lambda m: m.thread_seq,
            reverse=True,
        )[:batch]
        if not window:
            return VisibleWindow(examined=0)
        visible = [
            m.thread_seq for m in window if m.deleted_at is None and visible_to(m, viewer_id)
        ]
        return VisibleWindow(
            examined=len(window),
            lowest_seq=window[-1].thread_seq,
            newest_visible_seq=max(visible) if visible else None,
        )


__all__ = ["MemoryFreshnessRepository"]
