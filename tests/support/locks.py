"""Proof that a statement waits for a lock, read from the server instead of a timer.

A test that claims "the second unit blocks" holds a lock in one session, starts the
second, and calls `wait_until_blocked`: it polls ``pg_stat_activity`` until sessions
wait (``wait_event_type = 'Lock'``) for the holder, directly or queued behind another
waiter (``pg_blocking_pids``), and fails the test when that never happens within a
bounded number of looks. Nothing sleeps for a window that is hoped to be long enough.
"""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from turnkeeper.adapters.postgres.uow import PostgresUnitOfWork
from turnkeeper.application.ports import UnitOfWork

#: How many times `wait_until_blocked` looks before it fails the test.
LOCK_WAIT_TRIES = 1_000
#: Seconds between two looks: the bound of the whole wait is the product (10 s), far
#: above what a statement needs to reach its lock even on a loaded machine.
LOCK_WAIT_POLL_SECONDS = 0.01

# Sessions of this database that wait for a lock the blocker holds, or wait behind a
# session that does (a row lock queues later waiters on the first waiter's tuple lock).
_WAITERS = """
WITH RECURSIVE behind(pid) AS (
    SELECT pid FROM pg_stat_activity
    WHERE datname = current_database() AND %(blocker)s = ANY(pg_blocking_pids(pid))
  UNION
    SELECT a.pid FROM pg_stat_activity AS a
    JOIN behind AS b ON b.pid = ANY(pg_blocking_pids(a.pid))
    WHERE a.datname = current_database()
)
SELECT a.pid FROM behind JOIN pg_stat_activity AS a USING (pid)
WHERE a.wait_event_type = 'Lock' AND a.pid <> %(blocker)s
ORDER BY a.pid
"""


def backend_pid(uow: UnitOfWork) -> int:
    """The server process id of a PostgreSQL unit of work's connection."""
    assert isinstance(uow, PostgresUnitOfWork)
    return int(uow.connection.info.backend_pid)


async def wait_until_blocked(
    conninfo: str, blocker: int, waiters: int = 1, *, tries: int = LOCK_WAIT_TRIES
) -> list[int]:
    """Wait until `waiters` sessions wait for a lock that session `blocker` holds.

    Args:
        conninfo: the test database (the blocker and the waiters are connected to it).
        blocker: the backend pid of the session that holds the lock.
        waiters: how many sessions must wait (directly or queued behind each other).
        tries: how many looks at most.

    Returns:
        The backend pids of the waiting sessions.

    Raises:
        pytest.fail.Exception: when fewer sessions wait after every try.
    """
    seen: list[int] = []
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        for _ in range(tries):
            # Autocommit: each look is its own transaction, so a fresh activity snapshot.
            cursor = await conn.execute(_WAITERS.encode(), {"blocker": blocker})
            seen = [int(row[0]) for row in await cursor.fetchall()]
            if len(seen) >= waiters:
                return seen
            await asyncio.sleep(LOCK_WAIT_POLL_SECONDS)
    pytest.fail(
        f"{waiters} session(s) should wait for a lock of pid {blocker};"
        f" after {tries} looks {len(seen)} did"
    )
