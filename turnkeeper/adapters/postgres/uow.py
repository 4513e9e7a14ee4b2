"""The PostgreSQL unit of work: one pooled connection, one READ COMMITTED transaction.

A unit takes a connection from the pool, runs every repository on it, and rolls back
unless `commit()` was called. `commit()` first writes the unit's buffered events (the
event seq allocation is deliberately the last statement before COMMIT, see
`PostgresEventLog`) and then commits. Driver errors leave the unit as application
errors (`turnkeeper.adapters.postgres.errors`).

Example:
    >>> pool = await create_pool(conninfo, min_size=1, max_size=4)  # doctest: +SKIP
    >>> uow_factory = PostgresUnitOfWorkFactory(pool)
    >>> async with uow_factory() as uow:
    ...     await uow.spaces.add(space)
    ...     await uow.commit()
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TypeVar

import psycopg
from psycopg import IsolationLevel
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from turnkeeper.adapters.postgres.audit import PostgresAuditLog

# Conn is re-exported: the pools that create_pool opens hold such connections.
from turnkeeper.adapters.postgres.base import Conn as Conn
from turnkeeper.adapters.postgres.errors import wrap_errors
from turnkeeper.adapters.postgres.events import PostgresEventLog
from turnkeeper.adapters.postgres.freshness import PostgresFreshnessRepository
from turnkeeper.adapters.postgres.messages import PostgresMessageRepository
from turnkeeper.adapters.postgres.principals import (
    PostgresGrantRepository,
    PostgresPrincipalRepository,
)
from turnkeeper.adapters.postgres.ratelimit import PostgresRateLimitStore
from turnkeeper.adapters.postgres.runs import (
    PostgresAgentFeedRepository,
    PostgresFollowupRepository,
    PostgresRunRepository,
)
from turnkeeper.adapters.postgres.spaces import (
    PostgresChannelRepository,
    PostgresSpaceRepository,
    PostgresThreadRepository,
)
from turnkeeper.adapters.postgres.tokens import PostgresTokenRepository
from turnkeeper.application.ports import (
    AgentFeedRepository,
    AuditLog,
    ChannelRepository,
    EventLog,
    FollowupRepository,
    FreshnessRepository,
    GrantRepository,
    MessageRepository,
    PrincipalRepository,
    RateLimitStore,
    RunRepository,
    SpaceRepository,
    ThreadRepository,
    TokenRepository,
    UnitOfWork,
)

#: Seconds a unit waits for a free pooled connection before `StoreUnavailable`.
POOL_ACQUIRE_TIMEOUT_SECONDS = 30.0

R = TypeVar("R")

#: Builds a repository on a unit's connection (for repositories whose tables come with
#: later migrations: runs, agent feed).
RepositoryBuilder = Callable[[Conn], R]


class UnitClosed(RuntimeError):
    """A unit of work was used after it committed."""


class RepositoryNotWired(NotImplementedError):
    """The factory was built without a builder for this repository."""


class PostgresUnitOfWork:
    """One transaction over every repository; satisfies `turnkeeper.application.ports.UnitOfWork`.

    Args:
        conn: a pooled connection, idle, not in autocommit mode.
        runs: builds the runs repository on `conn` (None: the built-in one).
        agent_feed: builds the agent feed repository on `conn` (None: the built-in one).
    """

    def __init__(
        self,
        conn: Conn,
        *,
        runs: RepositoryBuilder[RunRepository] | None = None,
        agent_feed: RepositoryBuilder[AgentFeedRepository] | None = None,
    ) -> None:
        self._conn = conn
        self._runs = (runs or PostgresRunRepository)(conn)
        self._agent_feed = (agent_feed or PostgresAgentFeedRepository)(conn)
        self.followups: FollowupRepository = PostgresFollowupRepository(conn)
        self._events = PostgresEventLog(conn)
        principals = PostgresPrincipalRepository(conn)
        self.principals: PrincipalRepository = principals
        self.tokens: TokenRepository = PostgresTokenRepository(conn)
        if isinstance(self._agent_feed, PostgresAgentFeedRepository):
            self._agent_feed.principal_changed = principals.forget
        self.spaces: SpaceRepository = PostgresSpaceRepository(conn)
        self.channels: ChannelRepository = PostgresChannelRepository(conn)
        self.threads: ThreadRepository = PostgresThreadRepository(conn)
        self.grants: GrantRepository = PostgresGrantRepository(conn)
        self.messages: MessageRepository = PostgresMessageRepository(conn)
        self.events: EventLog = self._events
        self.audit: AuditLog = PostgresAuditLog(conn)
        self.buckets: RateLimitStore = PostgresRateLimitStore(conn)
        self.freshness: FreshnessRepository = PostgresFreshnessRepository(conn)
        self.committed = False

    @property
    def connection(self) -> Conn:
        """The unit's connection, for adapters that run further generated statements."""
        return self._conn

    @property
    def runs(self) -> RunRepository:
        """The runs repository of this unit.

        Raises:
            RepositoryNotWired: when the factory got no runs builder.
        """
        if self._runs is None:
            raise RepositoryNotWired("PostgresUnitOfWorkFactory was built without `runs`")
        return self._runs

    @property
    def agent_feed(self) -> AgentFeedRepository:
        """The agent feed repository of this unit.

        Raises:
            RepositoryNotWired: when the factory got no agent_feed builder.
        """
        if self._agent_feed is None:
            raise RepositoryNotWired("PostgresUnitOfWorkFactory was built without `agent_feed`")
        return self._agent_feed

    async def commit(self) -> None:
        """Write the buffered events, then COMMIT.

        Raises:
            UnitClosed: when the unit already committed.
            RetriableConflict: deadlock, serialization failure or unique-key race.
            StoreUnavailable: the connection was lost (the outcome is then unknown).
        """
        if self.committed:
            raise UnitClosed("this unit of work already committed")
        with wrap_errors():
            await self._events.flush()
            await self._conn.commit()
        self.committed = True

    async def rollback(self) -> None:
        """Roll back whatever the unit did (a no-op after commit).

        A connection that cannot even roll back is broken; the pool discards it when it
        comes back, so the failure is not raised over the error that caused the rollback.
        """
        self._events.discard()
        if self._conn.info.transaction_status == TransactionStatus.IDLE:
            return
        try:
            await self._conn.rollback()
        except psycopg.Error:
            # A broken connection: nothing is left to roll back, the pool replaces it.
            return


class PostgresUnitOfWorkFactory:
    """Opens PostgreSQL units of work; satisfies `turnkeeper.application.ports.UnitOfWorkFactory`.

    The conversation core's repositories are built in; the runs and agent-feed
    repositories (whose tables come with their own migrations) are plugged in as builders.

    Args:
        pool: an open pool (see `create_pool`).
        acquire_timeout: seconds to wait for a pooled connection.
        runs: builds the runs repository on a unit's connection.
        agent_feed: builds the agent feed repository on a unit's connection.
    """

    def __init__(
        self,
        pool: AsyncConnectionPool[Conn],
        *,
        acquire_timeout: float = POOL_ACQUIRE_TIMEOUT_SECONDS,
        runs: RepositoryBuilder[RunRepository] | None = None,
        agent_feed: RepositoryBuilder[AgentFeedRepository] | None = None,
    ) -> None:
        self._pool = pool
        self._acquire_timeout = acquire_timeout
        self._runs = runs
        self._agent_feed = agent_feed

    def __call__(self) -> AbstractAsyncContextManager[UnitOfWork]:
        """A new unit; leaving the context without `commit()` rolls back.

        Returns:
            An async context manager yielding the unit.
        """
        return self._unit()

    def read_only(self) -> AbstractAsyncContextManager[UnitOfWork]:
        """A unit for reads only, on a connection in autocommit mode.

        Every statement runs in its own implicit transaction and sees the latest
        committed state, which is what READ COMMITTED gives each statement of an
        explicit transaction too; reads save the BEGIN and COMMIT round trips.

        Returns:
            An async context manager yielding the unit (never to be committed).
        """
        return self._unit(read_only=True)

    @asynccontextmanager
    async def _unit(self, *, read_only: bool = False) -> AsyncIterator[UnitOfWork]:
        with wrap_errors():
            async with self._pool.connection(timeout=self._acquire_timeout) as conn:
                if conn.autocommit != read_only:
                    await conn.set_autocommit(read_only)
                if conn.isolation_level != IsolationLevel.READ_COMMITTED:
                    await conn.set_isolation_level(IsolationLevel.READ_COMMITTED)
                unit = PostgresUnitOfWork(conn, runs=self._runs, agent_feed=self._agent_feed)
                try:
                    yield unit
                finally:
                    # Also after commit: statements run after it opened a new transaction.
                    await unit.rollback()


#: Executions of a statement on one connection before psycopg prepares it: at once.
#: Every statement is one of the fixed queries of sql/queries (fewer than psycopg's
#: ``prepared_max`` of 100, so none is ever evicted), so preparing on first use costs one
#: round trip per query and connection and saves the parse and plan of every later one;
#: with psycopg's default of 5, each of a pool's connections runs a statement five times
#: unprepared before it is as fast as it will be.
PREPARE_THRESHOLD = 0


async def _configure(conn: Conn) -> None:
    """Settings of every pooled connection.

    Explicit transactions, READ COMMITTED, and statements prepared on first use
    (`PREPARE_THRESHOLD`).
    """
    await conn.set_autocommit(False)
    await conn.set_isolation_level(IsolationLevel.READ_COMMITTED)
    conn.prepare_threshold = PREPARE_THRESHOLD


async def create_pool(conninfo: str, min_size: int, max_size: int) -> AsyncConnectionPool[Conn]:
    """Open a connection pool for units of work.

    Connections are not pinged before they are handed out (that would cost every unit a
    round trip): a connection broken by a server restart fails its unit once
    (`StoreUnavailable`) and is replaced by the pool.

    Args:
        conninfo: libpq connection string or URI.
        min_size: connections kept open.
        max_size: connections at most.

    Returns:
        The open pool; close it with ``await pool.close()``.

    Raises:
        StoreUnavailable: when no connection can be opened.
    """
    pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
        conninfo,
        min_size=min_size,
        max_size=max_size,
        open=False,
        configure=_configure,
    )
    with wrap_errors():
        try:
            await pool.open(wait=True)
        except BaseException:
            await pool.close()
            raise
    return pool
