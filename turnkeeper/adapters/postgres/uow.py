"""The PostgreSQL unit of work: one pooled connection, one READ COMMITTED transaction.

A unit takes a connection from the pool, runs every repository on it, and rolls back
unless `commit()` was called. `commit()` first writes the unit's buffered events
(numbered by the unit's transaction id, see `PostgresEventLog`) and then commits.
Driver errors leave the unit as application errors (`turnkeeper.adapters.postgres.errors`).
A unit ends within ``database.request_timeout``, waiting for its connection included
(`turnkeeper.adapters.postgres.pool`).

A write unit runs in libpq's pipeline mode on an autocommit connection, through its
`turnkeeper.adapters.postgres.executor.PipelineLink` (ADR 0030), and sends its own
``BEGIN`` (ADR 0022): the BEGIN travels with the unit's first statement instead of
costing a round trip of its own, the statements named in
`turnkeeper.adapters.postgres.pipelining` wait for the next round trip, and COMMIT goes
with the last writes and the events. Every other statement waits for its own result, as
it would outside a pipeline. A read-only unit runs on a link too, without BEGIN or
COMMIT: each Sync ends an implicit transaction, and each statement sees the latest
committed state, as in autocommit outside a pipeline.

Example:
    >>> pool = await create_pool(conninfo, min_size=1, max_size=4)  # doctest: +SKIP
    >>> uow_factory = PostgresUnitOfWorkFactory(pool)
    >>> async with uow_factory() as uow:
    ...     await uow.spaces.add(space)
    ...     await uow.commit()
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import cast

import psycopg
from psycopg import IsolationLevel
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from turnkeeper.adapters.postgres.audit import PostgresAuditLog

# Conn is re-exported: the pools that create_pool opens hold such connections.
from turnkeeper.adapters.postgres.base import Conn as Conn
from turnkeeper.adapters.postgres.errors import wrap_errors
from turnkeeper.adapters.postgres.events import PostgresEventLog
from turnkeeper.adapters.postgres.executor import PipelineLink, forget_prepared
from turnkeeper.adapters.postgres.freshness import PostgresFreshnessRepository
from turnkeeper.adapters.postgres.locked_threads import LockedThreads
from turnkeeper.adapters.postgres.messages import PostgresMessageRepository
from turnkeeper.adapters.postgres.pool import PoolPolicy, connection_within, open_pool
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
from turnkeeper.adapters.postgres.spaces import PostgresChannelRepository, PostgresSpaceRepository
from turnkeeper.adapters.postgres.stream_places import PostgresStreamPlaces
from turnkeeper.adapters.postgres.threads import PostgresThreadRepository
from turnkeeper.adapters.postgres.tokens import PostgresTokenRepository
from turnkeeper.adapters.postgres.wakeup import PostgresEventWaker
from turnkeeper.application.errors import StoreUnavailable
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
from turnkeeper.application.settings import Settings


class UnitClosed(RuntimeError):
    """A unit of work was used after it committed."""


class PostgresUnitOfWork:
    """One transaction over every repository; satisfies `turnkeeper.application.ports.UnitOfWork`.

    Args:
        conn: a pooled connection, idle, in autocommit mode.
        link: the connection's `PipelineLink`, in pipeline mode, in which a write unit
            sent its BEGIN.
        read_only: a read-only unit: no BEGIN was sent, each statement runs in its own
            implicit transaction, and the unit is never committed.
    """

    def __init__(self, conn: Conn, link: PipelineLink, *, read_only: bool = False) -> None:
        self._driver = conn
        self._link = link
        # None once the unit left pipeline mode (a read-only unit's factory leaves it).
        self._pipeline: PipelineLink | None = None if read_only else link
        # The repositories run the generated statements, which only open cursors and
        # execute: the link gives them its own (duck-typed as the connection).
        conn = cast(Conn, link)
        self._conn = conn
        self._events = PostgresEventLog(conn)
        principals = PostgresPrincipalRepository(conn)
        agent_feed = PostgresAgentFeedRepository(conn)
        agent_feed.principal_changed = principals.forget
        self.principals: PrincipalRepository = principals
        self.runs: RunRepository = PostgresRunRepository(conn)
        self.agent_feed: AgentFeedRepository = agent_feed
        self.followups: FollowupRepository = PostgresFollowupRepository(conn)
        self.tokens: TokenRepository = PostgresTokenRepository(conn)
        self.spaces: SpaceRepository = PostgresSpaceRepository(conn)
        self.channels: ChannelRepository = PostgresChannelRepository(conn)
        locked = self._locked = LockedThreads(conn)
        grants = PostgresGrantRepository(conn)
        self.threads: ThreadRepository = PostgresThreadRepository(conn, locked, grants)
        self.grants: GrantRepository = grants
        self.messages: MessageRepository = PostgresMessageRepository(conn, locked, self._events)
        self.events: EventLog = self._events
        self.audit: AuditLog = PostgresAuditLog(conn)
        self.buckets: RateLimitStore = PostgresRateLimitStore(conn)
        self.freshness: FreshnessRepository = PostgresFreshnessRepository(conn, locked)
        self.committed = False

    @property
    def connection(self) -> Conn:
        """The unit's connection, for adapters that run further generated statements."""
        return self._conn

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
            await self._locked.write()
            if self._pipeline is None:
                # A read-only unit, which the port says is never committed: as before
                # it ran on a link, what it buffered is written in autocommit.
                await self._events.flush()
                await self._driver.commit()
            else:
                seqs = await self._events.start_flush()
                await self._conn.execute(COMMIT, prepare=False)
                # Leaving the pipeline sends its Sync: the one wait for the queued writes,
                # the events and COMMIT.
                await self.leave_pipeline(raise_errors=True)
                await seqs()
        self.committed = True

    async def leave_pipeline(self, *, raise_errors: bool = False) -> None:
        """Leave pipeline mode, waiting for whatever is queued (a no-op once left).

        Args:
            raise_errors: raise a queued statement's error (commit); otherwise the unit
                is rolling back and the error that made it do so is the one that counts.

        Raises:
            psycopg.Error: with `raise_errors`, the first error of a queued statement.
        """
        link, self._pipeline = self._pipeline, None
        if link is None:
            return
        if raise_errors:
            await link.leave()
        else:
            await link.abandon()

    async def rollback(self) -> None:
        """Roll back whatever the unit did (a no-op after commit).

        A connection that cannot even roll back is broken; the pool discards it when it
        comes back, so the failure is not raised over the error that caused the rollback.
        """
        self._events.discard()
        if self._driver.info.transaction_status == TransactionStatus.IDLE:
            return
        # Not through psycopg, whose ROLLBACK drops every prepared statement.
        await self._link.rollback()


class PostgresUnitOfWorkFactory:
    """Opens PostgreSQL units of work; satisfies `turnkeeper.application.ports.UnitOfWorkFactory`.

    Args:
        pool: an open pool (see `create_pool`).
        policy: the time bound of a unit and the ``Retry-After`` of `StoreUnavailable`
            (None: those of the default settings).
        waker: wakes this process's readers on commits of any process; one on the
            pool's database, listening while readers wait, when None.
        places: the places of event streams, shared by every process; one on the
            pool's database, connected at the first stream, when None.
    """

    def __init__(
        self,
        pool: AsyncConnectionPool[Conn],
        *,
        policy: PoolPolicy | None = None,
        waker: PostgresEventWaker | None = None,
        places: PostgresStreamPlaces | None = None,
    ) -> None:
        self._pool = pool
        self._policy = policy or PoolPolicy.from_settings(Settings())
        self._waker = waker
        self._places = places

    @property
    def waker(self) -> PostgresEventWaker:
        """The waker of this database (`turnkeeper.application.wakeup.ProvidesWaker`)."""
        if self._waker is None:
            self._waker = PostgresEventWaker(self._pool.conninfo)
        return self._waker

    @property
    def stream_places(self) -> PostgresStreamPlaces:
        """The stream places of this database, shared by every process.

        See `turnkeeper.application.stream_places.ProvidesStreamPlaces`.
        """
        if self._places is None:
            self._places = PostgresStreamPlaces(self._pool.conninfo, self._policy)
        return self._places

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
        try:
            with wrap_errors():
                async with connection_within(self._pool, self._policy.request_timeout) as conn:
                    if not conn.autocommit:
                        await conn.set_autocommit(True)
                    # A unit cancelled mid-statement (its client left, the server
                    # stops) collects the answers and keeps the connection; the
                    # deadline of `connection_within` bounds that wait.
                    link = PipelineLink(conn, settle_on_cancel=True)
                    link.enter()
                    if read_only:
                        async with _reading(link):
                            yield PostgresUnitOfWork(conn, link, read_only=True)
                        return
                    unit = PostgresUnitOfWork(conn, link)
                    try:
                        # Queued: it leaves with the unit's first statement.
                        await link.execute(BEGIN, prepare=False)
                        yield unit
                    except BaseException:
                        # The error in flight is the one that counts.
                        await unit.leave_pipeline()
                        await unit.rollback()
                        await _explicit_again(conn)
                        raise
                    try:
                        # A unit left without commit still waits for what it queued, and
                        # fails with the first error of it.
                        await unit.leave_pipeline(raise_errors=True)
                    finally:
                        # Also after commit: statements run after it ran in autocommit.
                        await unit.rollback()
                        await _explicit_again(conn)
        except StoreUnavailable as exc:
            # Raised anywhere in the unit (repositories translate driver errors where
            # they run): only the factory knows when a retry may succeed.
            if exc.retry_after is None:
                exc.retry_after = self._policy.retry_after
            raise


@asynccontextmanager
async def _reading(link: PipelineLink) -> AsyncIterator[None]:
    """Leave a read-only unit's pipeline at its end, after whatever it queued ran."""
    try:
        yield
    except BaseException:
        # The error in flight is the one that counts.
        with contextlib.suppress(psycopg.Error):
            await link.leave()
        raise
    await link.leave()


async def _explicit_again(conn: Conn) -> None:
    """Give the connection back in the pool's mode (explicit transactions), if it can be."""
    if conn.closed:
        return  # broken: the pool discards it
    if conn.info.transaction_status != TransactionStatus.IDLE:
        # Failing to roll back: psycopg's rollback (ours on the way out, or the pool's)
        # answers with DEALLOCATE ALL, so the link's names are gone with it.
        forget_prepared(conn)
        return
    try:
        await conn.set_autocommit(False)
    except psycopg.Error:
        return


#: The statement that opens a write unit's transaction, sent in its pipeline (psycopg's own
#: BEGIN in pipeline mode waits for its result: one more round trip).
BEGIN = "BEGIN ISOLATION LEVEL READ COMMITTED"

#: The statement that ends a write unit, sent with the unit's last writes.
COMMIT = "COMMIT"

#: psycopg's ``prepare_threshold`` on pooled connections: never prepare. Units run on a
#: `PipelineLink`, which prepares the generated statements itself; what still runs on
#: psycopg's cursors (the readiness check, migrations) is rare, and had psycopg prepared
#: any of it, its next rollback on that connection would DEALLOCATE ALL, the link's
#: statements with it.
PREPARE_THRESHOLD: int | None = None


async def _configure(conn: Conn) -> None:
    """Settings of every pooled connection.

    Explicit transactions, READ COMMITTED, and nothing prepared by psycopg
    (`PREPARE_THRESHOLD`). Units switch to autocommit for their time (a write unit sends
    its own BEGIN, see the module docstring).
    """
    await conn.set_autocommit(False)
    await conn.set_isolation_level(IsolationLevel.READ_COMMITTED)
    conn.prepare_threshold = PREPARE_THRESHOLD


async def create_pool(
    conninfo: str, min_size: int, max_size: int, *, policy: PoolPolicy | None = None
) -> AsyncConnectionPool[Conn]:
    """Open a connection pool for units of work.

    Connections are not pinged before they are handed out (that would cost every unit a
    round trip): a connection broken by a server restart fails its unit once
    (`StoreUnavailable`) and is replaced by the pool.

    Args:
        conninfo: libpq connection string or URI.
        min_size: connections kept open.
        max_size: connections at most.
        policy: ``statement_timeout``, ``connect_timeout`` and the reconnection bound
            (None: those of the default settings).

    Returns:
        The open pool; close it with ``await pool.close()``.

    Raises:
        StoreUnavailable: when no connection can be opened.
    """
    with wrap_errors():
        return await open_pool(
            conninfo,
            min_size=min_size,
            max_size=max_size,
            policy=policy or PoolPolicy.from_settings(Settings()),
            configure=_configure,
        )
