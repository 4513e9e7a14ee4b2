"""Time bounds of the PostgreSQL pool: no unit of work outlives ``database.request_timeout``.

A database fails in three ways, and each needs its own bound:

- it refuses or drops connections (killed, restarting): the wait for a pooled connection
  ends after ``database.request_timeout`` (`psycopg_pool.PoolTimeout`), and a connection
  lost in use fails its unit at once;
- it is slow (a lock held for long, a heavy statement): every pooled connection runs with
  ``statement_timeout`` set to ``database.request_timeout``, so the server cancels the
  statement (SQLSTATE 57014);
- it is frozen (SIGSTOP, a hung host or network): a frozen server enforces nothing, so a
  timer of this process shuts the unit's socket down at the deadline. The driver call
  that waits on it sees the end of the stream and fails at once as a lost connection;
  the pool discards the connection and opens another one.

All three leave the unit as `StoreUnavailable` (503 ``unavailable``). Cancelling the
task at the deadline would not do: psycopg answers a cancellation during a statement by
sending the server a cancel request and waiting for the statement to end, up to five
seconds each, which a frozen server never answers.

Reconnection: psycopg_pool retries a lost connection with a doubling pause until its
``reconnect_timeout``, so after a long outage it could wait a minute between two attempts
and serve again long after the database came back. The pool's ``reconnect_timeout`` is
``database.reconnect_max_wait`` instead: an attempt series gives up after that long and
the next request that finds no connection starts a new series at once, so while requests
come, no pause between two attempts exceeds ``database.reconnect_max_wait``.

Example:
    >>> policy = PoolPolicy.from_settings(settings)  # doctest: +SKIP
    >>> async with connection_within(pool, policy.request_timeout) as conn:
    ...     await conn.execute("SELECT 1")
"""

from __future__ import annotations

import asyncio
import math
import os
import select
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import attrs
import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import ConnStatus, TransactionStatus
from psycopg_pool import AsyncConnectionPool
from psycopg_pool.pool_async import AddConnection

from turnkeeper.adapters.postgres.errors import connect_timeout
from turnkeeper.application.logs import get_logger
from turnkeeper.application.settings import Settings

Conn = psycopg.AsyncConnection[Any]

#: Milliseconds in a second (``statement_timeout`` is given in milliseconds).
_MS_PER_SECOND = 1000
#: Environment variable libpq reads server options from when the conninfo names none.
_PGOPTIONS = "PGOPTIONS"
_OPEN_TRANSACTION = frozenset({TransactionStatus.INTRANS, TransactionStatus.INERROR})
#: Poll events watched on an idle connection's socket: data, and over TCP the peer's
#: close (Linux reports it as POLLRDHUP; POLLHUP is for both directions closed).
_WATCHED = select.POLLIN | getattr(select, "POLLRDHUP", 0)

_log = get_logger("turnkeeper.postgres")

_Pool = TypeVar("_Pool", bound=AsyncConnectionPool[Any])


@attrs.frozen(kw_only=True)
class PoolPolicy:
    """The time bounds of a pool and its units of work.

    Attributes:
        request_timeout: ``database.request_timeout`` in seconds: the longest a unit may
            take, waiting for its connection included; also each statement's
            ``statement_timeout``.
        reconnect_max_wait: ``database.reconnect_max_wait`` in seconds: the pool's
            ``reconnect_timeout`` (see the module docstring).
        retry_after: the ``Retry-After`` of a 503 ``unavailable``, whole seconds: by
            then the pool has tried to reconnect again.
    """

    request_timeout: float
    reconnect_max_wait: float
    retry_after: int

    @classmethod
    def from_settings(cls, settings: Settings) -> PoolPolicy:
        """The policy of a configuration.

        Args:
            settings: for ``database.request_timeout`` and ``database.reconnect_max_wait``.

        Returns:
            The policy.
        """
        reconnect = settings.reconnect_max_wait.total_seconds()
        return cls(
            request_timeout=settings.request_timeout.total_seconds(),
            reconnect_max_wait=reconnect,
            retry_after=math.ceil(reconnect),
        )

    def connection_kwargs(self, conninfo: str) -> dict[str, str]:
        """Connection parameters that bound every statement and connection attempt.

        Server options the conninfo (or ``PGOPTIONS``) gives are kept; a smaller positive
        ``connect_timeout`` of the conninfo is kept too.

        Args:
            conninfo: the libpq connection string or URI of the pool.

        Returns:
            ``options`` with ``-c statement_timeout=<ms>`` and
            ``-c idle_in_transaction_session_timeout=<ms>`` added, and ``connect_timeout``.
            The second bounds a transaction whose process froze between two statements
            (its own deadline timer cannot run then): an open transaction holds back
            every reader of the event log (ADR 0020), so the server ends it instead.
        """
        given = conninfo_to_dict(conninfo)
        options = str(given.get("options") or os.environ.get(_PGOPTIONS, ""))
        statement_ms = math.ceil(self.request_timeout * _MS_PER_SECOND)
        return {
            "options": (
                f"{options} -c statement_timeout={statement_ms}"
                f" -c idle_in_transaction_session_timeout={statement_ms}"
            ).strip(),
            "connect_timeout": connect_timeout(conninfo, self.request_timeout),
        }


def sever(conn: Conn) -> None:
    """Shut a connection's socket down so that every wait on it ends at once.

    The descriptor stays open (psycopg and the pool close it as for any lost
    connection), so no other socket can reuse its number while the event loop still
    watches it.

    Args:
        conn: a connection whose unit passed its deadline.
    """
    if conn.closed:
        return
    _log.warning("database_deadline_passed")
    try:
        descriptor = conn.pgconn.socket
    except psycopg.OperationalError:
        return
    # A duplicate descriptor: closing it leaves the connection's own one open, while
    # shutdown acts on the socket that both name.
    with socket.socket(fileno=os.dup(descriptor)) as duplicate:
        try:
            duplicate.shutdown(socket.SHUT_RDWR)
        except OSError:
            return  # already disconnected: every wait on it ends anyway


class WaitCountingPool(AsyncConnectionPool[Conn]):
    """A psycopg_pool pool whose ``requests_waiting`` counts the units waiting now.

    psycopg_pool (3.3) reports ``requests_waiting`` as the length of its queue of waiting
    clients (``len(self._waiting)`` in ``_get_measures``), and a client whose wait ended
    without a connection (timed out, cancelled) stays in that queue: only a connection
    coming back to the pool takes it out (``_add_to_pool`` skips the clients that gave
    up). While the database is down no connection comes back, so the count grows with
    every unit that answered 503 and falls only when the database returns; the gauge
    ``turnkeeper_db_pool_connections{state="waiting"}`` read it. This pool counts the
    `getconn` calls in progress instead: one is counted from before it waits until its
    wait ends, however it ends. A call that finds an idle connection ends without
    yielding to the event loop, so a scrape never sees it.

    It relies on ``_get_measures``, where psycopg_pool computes the measure for
    ``get_stats`` and ``pop_stats``; a test fails if psycopg_pool's own count changes
    (tests/integration/test_pool_waiting.py).
    """

    #: Calls of `getconn` in progress (an instance's own count from its first call).
    _units_waiting = 0

    async def getconn(self, timeout: float | None = None) -> Conn:  # noqa: ASYNC109 - psycopg_pool's signature
        """psycopg_pool's `getconn`, counted in ``requests_waiting`` while it waits."""
        self._units_waiting += 1
        try:
            return await super().getconn(timeout)
        finally:
            self._units_waiting -= 1

    def _get_measures(self) -> dict[str, int]:
        measures = super()._get_measures()
        measures[self._REQUESTS_WAITING] = self._units_waiting
        return measures


class RecentFirstPool(WaitCountingPool):
    """A psycopg_pool pool that hands out the idle connection returned last first.

    psycopg_pool keeps its idle connections in a queue and takes the one that has rested
    longest, so a pool larger than the work in flight sends its units round every
    PostgreSQL backend in turn, each with cold caches: on the message route at
    concurrency 8 a pool of 34 cost 13 % more PostgreSQL CPU per message than one of 10
    (docs/performance.md, ADR 0035). This pool takes the connection returned last, so the
    units keep to as few backends as their concurrency needs; the ones left resting are
    the first the pool closes when it shrinks (after ``max_idle``), as before.

    Everything else is `WaitCountingPool`'s: only the choice among idle connections
    changes, made under the pool's lock where psycopg_pool makes it. It relies on the pool's
    idle queue (a deque filled at its right and taken from its left); a test fails if
    that changes (tests/integration/test_pool_order.py).
    """

    async def _get_ready_connection(self, timeout: float | None) -> Conn | None:  # noqa: ASYNC109 - psycopg_pool's signature
        idle = self._pool
        if len(idle) > 1:
            # The connection returned last is at the right: move it to where the pool takes.
            idle.rotate(1)
        return await super()._get_ready_connection(timeout)


class LiveIdlePool(RecentFirstPool):
    """A pool that never hands out a connection the server closed while it rested.

    After PostgreSQL restarts, or terminates backends, every idle connection is dead and
    psycopg_pool learns it only when a unit uses one: each failed a request with the
    database back and serving, one request per idle connection. Before the pool hands
    out an idle connection, under its lock where it takes one, it looks at the
    connection's socket (`closed_by_server`: a poll that does not wait, no round trip). A
    connection the server closed is closed, counted and replaced as psycopg_pool treats
    one found broken, and the next idle one is taken at once, in the same order and
    within the same wait (psycopg_pool's own ``check`` callback costs a round trip per
    checkout and waits a backoff of a second or more before each next try). Everything
    else is `RecentFirstPool`'s.
    """

    async def _get_ready_connection(self, timeout: float | None) -> Conn | None:  # noqa: ASYNC109 - psycopg_pool's signature
        while True:
            conn = await super()._get_ready_connection(timeout)
            if conn is None or not closed_by_server(conn):
                return conn
            # As psycopg_pool's return of a connection found broken: lost, and replaced.
            self._stats[self._CONNECTIONS_LOST] += 1
            conn._pool = None
            await conn.close()
            self.run_task(AddConnection(self))


def closed_by_server(conn: Conn) -> bool:
    """Whether an idle connection may have been closed by the server (restart, termination).

    An idle connection is sent nothing unprompted but, rarely, a notice or a parameter
    change; a server that closes it sends its termination notice, then ends the stream,
    and a checkout may fall between the two. So an idle connection with anything to
    read, or hung up, is retired: a needless retirement costs one new connection, a dead
    one handed out cost a request.

    Args:
        conn: an idle connection of the pool.

    Returns:
        True when the connection is to be replaced.
    """
    pgconn = conn.pgconn
    if pgconn.status != ConnStatus.OK:
        return True
    try:
        poller = select.poll()
        poller.register(pgconn.socket, _WATCHED)
        # A poll that does not wait; hang-ups and errors are reported whatever is asked.
        return bool(poller.poll(0))
    except (OSError, psycopg.OperationalError):
        return True


@asynccontextmanager
async def connection_within(pool: AsyncConnectionPool[Conn], seconds: float) -> AsyncIterator[Conn]:
    """A pooled connection whose use ends at the latest `seconds` after this call.

    Waiting for the connection counts. At the deadline the connection is severed
    (`sever`): the statement in progress and every later one fail with
    `psycopg.OperationalError`. The connection goes back to the pool idle (an open
    transaction is rolled back within the deadline), so that returning it never waits
    on the database.

    Args:
        pool: the pool.
        seconds: the bound.

    Yields:
        The connection.

    Raises:
        psycopg_pool.PoolTimeout: when no connection was free in time.
        psycopg.OperationalError: when the deadline passed during the block.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    # getconn and putconn rather than `pool.connection()`, whose connection context would
    # commit (a no-op: the connection is idle by then) and keep usage statistics that
    # nothing reads, at every unit.
    conn = await pool.getconn(timeout=seconds)
    timer = loop.call_at(deadline, sever, conn)
    try:
        yield conn
    finally:
        try:
            if conn.info.transaction_status in _OPEN_TRANSACTION:
                await conn.rollback()
        except psycopg.Error:
            pass  # a broken connection: the pool discards it on return
        finally:
            timer.cancel()
            await pool.putconn(conn)


async def open_pool(
    conninfo: str,
    *,
    min_size: int,
    max_size: int,
    policy: PoolPolicy,
    configure: Callable[[Conn], Awaitable[None]] | None = None,
) -> AsyncConnectionPool[Conn]:
    """Create and open a pool whose connections follow a policy.

    Args:
        conninfo: libpq connection string or URI.
        min_size: connections kept open.
        max_size: connections at most.
        policy: the time bounds (``statement_timeout``, ``connect_timeout`` and the
            reconnection bound).
        configure: the pool's ``configure`` callback for new connections.

    Returns:
        The open pool.

    Raises:
        psycopg.OperationalError: when the pool cannot open its first connections.
    """
    pool: AsyncConnectionPool[Conn] = LiveIdlePool(
        conninfo,
        min_size=min_size,
        max_size=max_size,
        open=False,
        configure=configure,
        kwargs=policy.connection_kwargs(conninfo),
        reconnect_timeout=policy.reconnect_max_wait,
    )
    return await opened(pool)


async def opened(pool: _Pool) -> _Pool:
    """Open a pool and wait for its first connections; closed again if that fails.

    A pool stopped (cancelled) or failing while it opens is open but not yet handed to
    anyone who would close it: its workers would go on reconnecting for ever.

    Args:
        pool: a pool built with ``open=False``.

    Returns:
        The same pool, open.

    Raises:
        psycopg.OperationalError: when the pool cannot open its first connections.
    """
    try:
        await pool.open(wait=True)
    except BaseException:
        await pool.close()
        raise
    return pool
