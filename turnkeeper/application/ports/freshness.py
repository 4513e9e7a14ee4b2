"""The freshness gate's compare-and-set allocator and bounded visibility check."""

from __future__ import annotations

import uuid
from typing import Protocol

import attrs


@attrs.frozen(kw_only=True)
class ThreadFrontier:
    """The raw frontier of a thread as the freshness gate reads it after a missed CAS.

    Attributes:
        latest_seq: ``threads.latest_seq``, the thread_seq of the newest message.
        has_restricted: the thread holds (or held) a message with ``restricted_to``, so
            some of its seqs may be invisible to the sender.
    """

    latest_seq: int
    has_restricted: bool


@attrs.frozen(kw_only=True)
class VisibleWindow:
    """One newest-first batch of the freshness gate's visibility check.

    Attributes:
        examined: how many messages the batch looked at (fewer than asked: the range is
            exhausted).
        lowest_seq: the lowest thread_seq it looked at; None when it looked at none.
        newest_visible_seq: the highest thread_seq in the batch the viewer may see; None
            when it may see none of them.
    """

    examined: int
    lowest_seq: int | None = None
    newest_visible_seq: int | None = None


class FreshnessRepository(Protocol):
    """The freshness gate's compare-and-set allocator and its bounded visibility check."""

    async def compare_and_allocate(self, thread_id: uuid.UUID, seen_seq: int) -> int | None:
        """``CasThreadSeq``: allocate the next thread_seq only if the frontier is `seen_seq`.

        ``UPDATE threads SET latest_seq = latest_seq + 1 WHERE id = $1 AND latest_seq =
        $2 RETURNING latest_seq``. On success the thread row lock is held until the unit
        ends, exactly as `ThreadRepository.allocate_seq` holds it.

        Returns:
            The allocated seq (``seen_seq + 1``), or None when the frontier moved on.
        """
        ...

    async def frontier(self, thread_id: uuid.UUID) -> ThreadFrontier:
        """The thread's committed raw frontier (no lock), read after a missed CAS.

        Raises:
            NotFound: for an unknown thread.
        """
        ...

    async def newest_visible(
        self,
        thread_id: uuid.UUID,
        viewer_id: uuid.UUID,
        *,
        after_seq: int,
        through_seq: int,
        batch: int,
    ) -> VisibleWindow:
        """Look at the `batch` newest messages with a seq in (`after_seq`, `through_seq`].

        Returns:
            What the batch saw: how many rows, the lowest seq, and the newest seq among
            them that the viewer may see (not deleted; public, own, or in the audience).
        """
        ...
