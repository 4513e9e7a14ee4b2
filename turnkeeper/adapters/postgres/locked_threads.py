"""The threads a PostgreSQL unit holds under their row lock, and the seqs it moved (ADR 0022).

While a unit holds a thread's row lock nobody else changes the row, so the unit knows
the next seq without asking: `turnkeeper.adapters.postgres.threads.PostgresThreadRepository`
and the freshness gate's compare-and-set allocate here. The allocated latest_seq is not
written at once: the message that takes the seq writes it in its own insert
(``InsertMessageWithEvent``, ADR 0024), and whatever is left is written before any other
statement of the unit reads the thread row, and before COMMIT.
"""

from __future__ import annotations

import uuid

from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.postgres.base import Conn
from turnkeeper.domain.world import ThreadState


class LockedThreads:
    """The latest_seq and state of each thread a unit read under its row lock.

    Args:
        conn: the unit's connection (where unwritten seqs are written).
    """

    def __init__(self, conn: Conn) -> None:
        self._conn = conn
        self._latest: dict[uuid.UUID, int] = {}
        self._state: dict[uuid.UUID, ThreadState] = {}
        self._restricted: dict[uuid.UUID, bool] = {}
        self._unwritten: dict[uuid.UUID, int] = {}

    def remember_state(self, thread_id: uuid.UUID, state: ThreadState) -> None:
        """Note the state of a thread whose row lock the unit holds, as the unit sets it.

        Args:
            thread_id: the thread.
            state: its state as read under the lock or as the unit changed it.
        """
        self._state[thread_id] = state

    def state(self, thread_id: uuid.UUID) -> ThreadState | None:
        """The state of a thread the unit holds locked, or None when it did not lock it.

        Args:
            thread_id: the thread.

        Returns:
            The state, or None.
        """
        return self._state.get(thread_id)

    def remember(self, thread_id: uuid.UUID, latest_seq: int, has_restricted: bool) -> None:
        """Note a thread read under its row lock.

        Args:
            thread_id: the thread.
            latest_seq: its latest_seq as read.
            has_restricted: its has_restricted as read.
        """
        self._latest[thread_id] = latest_seq
        self._restricted[thread_id] = has_restricted

    def mark_restricted(self, thread_id: uuid.UUID) -> None:
        """Note that the unit marked a thread it may hold locked as holding a restricted message.

        Args:
            thread_id: the thread.
        """
        self._restricted[thread_id] = True

    def has_restricted(self, thread_id: uuid.UUID) -> bool | None:
        """The has_restricted of a thread the unit read under its lock, or None.

        Args:
            thread_id: the thread.

        Returns:
            The flag as read or as the unit set it, or None when the unit did not read it.
        """
        return self._restricted.get(thread_id)

    def latest(self, thread_id: uuid.UUID) -> int | None:
        """The thread's latest_seq, or None when the unit did not lock it this way.

        Args:
            thread_id: the thread.

        Returns:
            The seq, or None.
        """
        return self._latest.get(thread_id)

    def take(self, thread_id: uuid.UUID) -> int:
        """Allocate the next seq of a locked thread (written later: see the module).

        Args:
            thread_id: a thread `latest` knows.

        Returns:
            The allocated seq.
        """
        seq = self._latest[thread_id] + 1
        self._latest[thread_id] = seq
        self._unwritten[thread_id] = seq
        return seq

    def claim(self, thread_id: uuid.UUID, seq: int) -> bool:
        """Whether the caller's statement stores the thread's latest_seq itself.

        Args:
            thread_id: the thread of a row being inserted.
            seq: the row's seq.

        Returns:
            True when `seq` is the thread's allocated, unwritten latest_seq (it is then
            no longer unwritten: the caller must write it); False otherwise.
        """
        if self._unwritten.get(thread_id) != seq:
            return False
        del self._unwritten[thread_id]
        return True

    async def write(self) -> None:
        """Queue the UPDATE of every allocated seq not written yet (a no-op when none is).

        Called before a statement that reads or changes thread rows, and before COMMIT.
        """
        while self._unwritten:
            thread_id, seq = self._unwritten.popitem()
            await q.set_thread_latest_seq(self._conn, id=thread_id, latest_seq=seq)


__all__ = ["LockedThreads"]
