"""A write unit's statements on libpq's pipeline (`PipelineLink`), on a real PostgreSQL.

What the link must keep of psycopg's behaviour: rows and row counts, psycopg's error
classes, statements prepared once per connection, a connection that heals after someone
else's DEALLOCATE ALL, a cancelled wait that leaves no connection in an unknown state,
and spans (observers) for every statement.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import cast

import psycopg
import pytest
from psycopg import errors as pg_errors
from psycopg.rows import args_row, scalar_row

from tests.support.locks import wait_until_blocked
from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.postgres.base import Conn
from turnkeeper.adapters.postgres.executor import PipelineLink, forget_prepared
from turnkeeper.adapters.postgres.observers import StatementDone, observe_statements
from turnkeeper.adapters.postgres.uow import (
    PostgresUnitOfWork,
    PostgresUnitOfWorkFactory,
    create_pool,
)
from turnkeeper.adapters.wiring import postgres_readiness
from turnkeeper.application.errors import RetriableConflict
from turnkeeper.application.settings import Settings

#: A statement outside the generated ones (a text no other test's statement shares).
ECHO = "SELECT %(p1)s::int AS value, %(p2)s::text AS label /* link test */"
#: Text of the generated statement `top` runs (ReadReadableTop).
TOP_TEXT = "%turnkeeper_event_horizon()%"
#: The advisory lock a blocked statement waits for.
LOCK_KEY = 4_2001
#: How often the DEALLOCATE ALL recovery is repeated on one connection.
HEAL_ROUNDS = 3


@pytest.fixture
async def conn(pg_conninfo: str) -> AsyncIterator[Conn]:
    """An autocommit connection, as a write unit's."""
    async with await psycopg.AsyncConnection.connect(pg_conninfo, autocommit=True) as conn:
        yield conn


async def echo(conn: Conn, value: int) -> list[tuple[int, str]]:
    """Run `ECHO` in its own link and pipeline; return its rows."""
    link = PipelineLink(conn)
    link.enter()
    try:
        cur = await link.execute(ECHO, {"p1": value, "p2": f"v{value}"})
        return [tuple(row) for row in await cur.fetchall()]
    finally:
        await link.leave()


async def top(conn: Conn) -> int | None:
    """Run a generated statement (ReadReadableTop) in its own link and pipeline."""
    link = PipelineLink(conn)
    link.enter()
    try:
        return await q.read_readable_top(cast(Conn, link))
    finally:
        await link.leave()


async def prepared_count(conn: Conn, pattern: str) -> int:
    cur = await conn.execute(
        "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s", (pattern,)
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_rows_counts_and_row_factories_are_psycopgs(conn: Conn) -> None:
    await conn.execute("CREATE TEMPORARY TABLE items (id int PRIMARY KEY, label text)")
    link = PipelineLink(conn)
    link.enter()
    insert = await link.execute(
        "INSERT INTO items SELECT g, 'n' || g FROM generate_series(1, %(p1)s) AS g",
        {"p1": 3},
    )
    read = link.cursor(row_factory=args_row(lambda id, label: f"{label}={id}"))
    await read.execute("SELECT id, label FROM items WHERE id >= %(p1)s ORDER BY id", {"p1": 2})
    count = link.cursor(row_factory=scalar_row)
    await count.execute("SELECT count(*) FROM items WHERE id > %(p1)s", {"p1": 9})
    rows = await read.fetchall()
    await insert.settle()
    assert await count.fetchone() == 0
    assert await count.fetchall() == [0], "a result can be read again"
    await link.leave()
    assert insert.rowcount == 3
    assert rows == ["n2=2", "n3=3"]


async def test_a_generated_statement_is_prepared_once_per_connection(conn: Conn) -> None:
    assert await top(conn) == 0
    assert await prepared_count(conn, TOP_TEXT) == 1
    assert await top(conn) == 0
    assert await prepared_count(conn, TOP_TEXT) == 1, "the second use ran the prepared one"


async def test_any_other_statement_runs_unnamed(conn: Conn) -> None:
    for value in range(HEAL_ROUNDS):
        assert await echo(conn, value) == [(value, f"v{value}")]
    assert await prepared_count(conn, "%link test%") == 0, "nothing kept on the server"


async def test_a_failed_batch_raises_psycopgs_class_and_the_rest_is_aborted(conn: Conn) -> None:
    await conn.execute("CREATE TEMPORARY TABLE items (id int PRIMARY KEY)")
    await conn.execute("INSERT INTO items VALUES (1)")
    link = PipelineLink(conn)
    link.enter()
    await link.execute("BEGIN", prepare=False)
    dup = await link.execute("INSERT INTO items VALUES (%(p1)s)", {"p1": 1})
    after = await link.execute("SELECT %(p1)s::int", {"p1": 7})
    with pytest.raises(pg_errors.UniqueViolation):
        await after.fetchone()
    with pytest.raises(pg_errors.UniqueViolation):
        await dup.settle()
    await link.abandon()
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert await echo(conn, 3) == [(3, "v3")], "the connection is usable after the failure"


async def test_a_connection_heals_after_someone_elses_deallocate_all(conn: Conn) -> None:
    for _ in range(HEAL_ROUNDS):
        assert await top(conn) == 0
        await conn.execute("DEALLOCATE ALL")
        with pytest.raises(pg_errors.InvalidSqlStatementName):
            await top(conn)
        # The failure made the link forget every name of the connection: prepared again.
        assert await top(conn) == 0
        assert await prepared_count(conn, TOP_TEXT) == 1


async def test_forgotten_names_are_prepared_again(conn: Conn) -> None:
    await top(conn)
    forget_prepared(conn)
    await conn.execute("DEALLOCATE ALL")
    assert await top(conn) == 0, "no statement ran by a name that is gone"


async def test_a_cancelled_wait_closes_the_connection(conn: Conn, pg_conninfo: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_conninfo, autocommit=True) as holder:
        await holder.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
        link = PipelineLink(conn)
        link.enter()
        cur = await link.execute("SELECT pg_advisory_lock(%(p1)s)", {"p1": LOCK_KEY})
        waiting = asyncio.create_task(cur.fetchone())
        await wait_until_blocked(pg_conninfo, holder.info.backend_pid)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert link.broken
        assert conn.closed, "a wait cut short leaves the protocol state unknown"
        await link.leave()  # nothing left to wait for, and no error


class CountingPg:
    """A link's libpq connection that counts its flushes (every other call passes on)."""

    def __init__(self, pg: object) -> None:
        self._pg = pg
        self.flushes = 0

    def flush(self) -> int:
        self.flushes += 1
        return cast(int, self._pg.flush())  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._pg, name)


async def test_a_queued_statement_runs_before_the_unit_waits_for_it(
    conn: Conn, pg_conninfo: str
) -> None:
    async with await psycopg.AsyncConnection.connect(pg_conninfo, autocommit=True) as holder:
        await holder.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
        link = PipelineLink(conn)
        link.enter()
        cur = await link.execute("SELECT pg_advisory_lock(%(p1)s)", {"p1": LOCK_KEY})
        # Nothing waits for the cursor: the statement must reach the server on its own
        # once the unit yields to the loop, and take its place in the lock's queue.
        await wait_until_blocked(pg_conninfo, holder.info.backend_pid)
        await holder.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))
        assert await cur.fetchone() is not None
        await link.execute("SELECT pg_advisory_unlock(%(p1)s)", {"p1": LOCK_KEY})
        await link.leave()


async def test_the_statements_of_one_stretch_leave_in_one_send(conn: Conn) -> None:
    link = PipelineLink(conn)
    counting = CountingPg(link._pg)
    link._pg = counting  # type: ignore[assignment]
    link.enter()
    cursors = [await link.execute(ECHO, {"p1": value, "p2": f"v{value}"}) for value in range(3)]
    assert counting.flushes == 0, "queued statements wait for the unit to yield"
    await asyncio.sleep(0)  # one turn of the loop, no time window
    assert counting.flushes == 1
    assert [tuple(row) for c in cursors for row in await c.fetchall()] == [
        (value, f"v{value}") for value in range(3)
    ]
    await link.leave()


async def test_observers_see_every_statement_and_its_end(conn: Conn) -> None:
    seen: list[tuple[str, str | None]] = []

    def observer(observed: Conn, query: str) -> StatementDone:
        assert observed is conn

        def done(error: BaseException | None) -> None:
            seen.append((query, None if error is None else type(error).__name__))

        return done

    stop = observe_statements(observer)
    try:
        link = PipelineLink(conn)
        link.enter()
        await link.execute("SELECT %(p1)s::int", {"p1": 1})
        await link.execute("SELECT 1 / %(p1)s", {"p1": 0})
        with pytest.raises(pg_errors.DivisionByZero):
            await link.sync()
        await link.leave()
    finally:
        stop()
    assert seen == [("SELECT %(p1)s::int", None), ("SELECT 1 / %(p1)s", "DivisionByZero")]
    await echo(conn, 1)
    assert len(seen) == 2, "an observer is told nothing once stopped"


async def test_a_connection_without_psycopgs_names_is_left_alone(conn: Conn) -> None:
    # The link's own statements never make psycopg deallocate: it prepared nothing.
    assert await top(conn) == 0
    await conn.execute("BEGIN")
    await conn.rollback()
    assert await prepared_count(conn, TOP_TEXT) == 1


async def test_a_unit_on_a_deallocated_connection_is_a_retriable_conflict(
    pg_conninfo: str,
) -> None:
    pool = await create_pool(pg_conninfo, min_size=1, max_size=1)
    try:
        factory = PostgresUnitOfWorkFactory(pool)
        space = uuid.uuid4()
        async with factory() as uow:
            await uow.spaces.get(space)
        async with pool.connection() as pooled:
            await pooled.execute("DEALLOCATE ALL")
            await pooled.commit()
        with pytest.raises(RetriableConflict):
            async with factory() as uow:
                await uow.spaces.get(space)
        async with factory() as uow:
            assert await uow.spaces.get(space) is None, "the rerun prepares again"
    finally:
        await pool.close()


async def test_a_connection_given_back_in_a_transaction_forgets_its_names(
    pg_conninfo: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = await create_pool(pg_conninfo, min_size=1, max_size=1)
    try:
        factory = PostgresUnitOfWorkFactory(pool)
        space = uuid.uuid4()
        async with pool.connection() as pooled:
            # psycopg prepares a statement of its own (the pool's connections never let
            # it; this one is told to): its rollbacks then deallocate all.
            pooled.prepare_threshold = 0
            await pooled.execute("SELECT 1", prepare=True)
            await pooled.commit()
        async with factory() as uow:
            await uow.spaces.get(space)

        async def no_rollback(self: PipelineLink) -> None:
            return None

        async def leave_only(self: PipelineLink) -> None:
            await self.leave()

        async def failing_unit() -> None:
            async with factory() as uow:
                await uow.spaces.get(space)
                raise LookupError("the unit fails")

        # A unit whose rollback does not happen: psycopg rolls back on the way out.
        with monkeypatch.context() as patch:
            patch.setattr(PipelineLink, "rollback", no_rollback)
            patch.setattr(PipelineLink, "abandon", leave_only)
            with pytest.raises(LookupError):
                await failing_unit()
        async with pool.connection() as pooled:
            cur = await pooled.execute(
                "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
                ("%FROM spaces%",),
            )
            assert await cur.fetchone() == (0,), "psycopg deallocated the link's statements"
            await pooled.commit()
        async with factory() as uow:
            assert await uow.spaces.get(space) is None, "prepared again, first time"
    finally:
        await pool.close()


async def test_psycopgs_own_statements_never_drop_the_links_names(pg_conninfo: str) -> None:
    # /readyz runs psycopg's cursors on pooled connections. Had psycopg prepared any of
    # their statements, its next rollback there would DEALLOCATE ALL, the link's too.
    pool = await create_pool(pg_conninfo, min_size=1, max_size=1)
    try:
        factory = PostgresUnitOfWorkFactory(pool)
        check = postgres_readiness(pool, Settings())
        space = uuid.uuid4()
        for _ in range(HEAL_ROUNDS):
            async with factory() as uow:
                assert await uow.spaces.get(space) is None
            assert await check() is None
            async with pool.connection() as conn:
                await conn.execute("SELECT %s::int", (1,))
                await conn.rollback()
        async with factory.read_only() as uow:
            assert isinstance(uow, PostgresUnitOfWork)
            cur = await uow.connection.execute(
                "SELECT name FROM pg_prepared_statements ORDER BY name /* link test */"
            )
            names = [row[0] for row in await cur.fetchall()]
        assert names, "the link's statements are still prepared"
        assert all(name.startswith("_tk_") for name in names), "psycopg prepared nothing"
    finally:
        await pool.close()
