"""Migrations: applied once, in order, under a lock, and refused when a file drifted."""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path

import psycopg
import pytest

from turnkeeper.adapters.postgres.invariants import check_database
from turnkeeper.adapters.postgres.migrations import (
    MigrationError,
    discover,
    is_current,
    migrate,
    pending,
    sql_dir,
)
from turnkeeper.adapters.wiring import postgres_backend
from turnkeeper.application.errors import StoreUnavailable
from turnkeeper.application.settings import Settings

ALL_VERSIONS = [m.version for m in discover()]

#: A migration that holds its transaction open long enough for a second migrator to
#: arrive, and that fails when run twice (CREATE TABLE without IF NOT EXISTS).
SLOW_MIGRATION = "SELECT pg_sleep(0.5);\nCREATE TABLE slow_marker (id integer);\n"


async def _ledger(conninfo: str) -> list[tuple[str, str]]:
    async with await psycopg.AsyncConnection.connect(conninfo) as conn:
        cur = await conn.execute("SELECT version, checksum FROM schema_migrations ORDER BY 1")
        return [(str(v), str(c)) for v, c in await cur.fetchall()]


async def _tables(conninfo: str) -> set[str]:
    async with await psycopg.AsyncConnection.connect(conninfo) as conn:
        cur = await conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        return {str(row[0]) for row in await cur.fetchall()}


def _copy_migrations(tmp_path: Path) -> Path:
    folder = tmp_path / "migrations"
    shutil.copytree(sql_dir() / "migrations", folder)
    return folder


async def test_migrate_applies_every_migration_on_an_empty_database(
    pg_empty_conninfo: str,
) -> None:
    applied = await migrate(pg_empty_conninfo)

    assert applied == ALL_VERSIONS
    assert {
        "principals",
        "api_tokens",
        "spaces",
        "channels",
        "threads",
        "grants",
        "messages",
        "events",
        "audit_denials",
        "rate_buckets",
        "schema_migrations",
    } <= await _tables(pg_empty_conninfo)
    # No shared counter row: event seqs derive from the writer's xid (ADR 0020).
    assert "event_counter" not in await _tables(pg_empty_conninfo)
    assert [v for v, _ in await _ledger(pg_empty_conninfo)] == ALL_VERSIONS
    async with await psycopg.AsyncConnection.connect(pg_empty_conninfo) as conn:
        assert await pending(conn) == []
        assert await is_current(conn)


#: The migration that replaces the event counter by seqs from the writer's xid.
XID_SEQS = "0009"


_EVENT_AT = (
    "INSERT INTO events (seq, type, actor_id, actor_kind, space_id, channel_id,"
    " resource_kind, resource_id, payload, created_at)"
    " VALUES (%s, 'thread.created', gen_random_uuid(), 'person', gen_random_uuid(),"
    " gen_random_uuid(), 'thread', gen_random_uuid(), '{}', now())"
)
_NEXT_EVENT = (
    "INSERT INTO events (seq, type, actor_id, actor_kind, space_id, channel_id,"
    " resource_kind, resource_id, payload, created_at)"
    " SELECT turnkeeper_event_seq_base() + 1, 'thread.created', gen_random_uuid(),"
    " 'person', gen_random_uuid(), gen_random_uuid(), 'thread', gen_random_uuid(), '{}',"
    " now() RETURNING seq"
)
_SERVED_AFTER = (
    "SELECT seq FROM events WHERE seq > %s AND seq < turnkeeper_event_horizon() ORDER BY seq"
)


async def test_events_of_the_counter_keep_their_seqs_and_new_ones_follow_them(
    pg_empty_conninfo: str, tmp_path: Path
) -> None:
    folder = _copy_migrations(tmp_path)
    for later in sorted(folder.glob("*.sql")):
        if later.name >= XID_SEQS:
            later.unlink()
    await migrate(pg_empty_conninfo, directory=folder)
    old_event = (
        "WITH c AS (UPDATE event_counter SET last_seq = last_seq + 1 RETURNING last_seq)"
        " INSERT INTO events (seq, type, actor_id, actor_kind, space_id, channel_id,"
        " resource_kind, resource_id, payload, created_at)"
        " SELECT last_seq, 'thread.created', gen_random_uuid(), 'person', gen_random_uuid(),"
        " gen_random_uuid(), 'thread', gen_random_uuid(), '{}', now() FROM c"
    )
    async with await psycopg.AsyncConnection.connect(pg_empty_conninfo, autocommit=True) as conn:
        for _ in range(3):
            await conn.execute(old_event)
    await migrate(pg_empty_conninfo)
    async with await psycopg.AsyncConnection.connect(pg_empty_conninfo, autocommit=True) as conn:
        await conn.execute(_NEXT_EVENT)
        cur = await conn.execute(_SERVED_AFTER, (1,))
        after_one = [row[0] for row in await cur.fetchall()]
    # A cursor a client held before the migration goes on where it was.
    assert after_one[:2] == [2, 3]
    assert len(after_one) == 3
    assert after_one[2] > 3


async def test_pending_lists_everything_before_the_first_migrate(pg_empty_conninfo: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_empty_conninfo) as conn:
        assert await pending(conn) == ALL_VERSIONS
        assert not await is_current(conn)


async def test_rerunning_migrate_applies_nothing(pg_empty_conninfo: str) -> None:
    await migrate(pg_empty_conninfo)
    ledger = await _ledger(pg_empty_conninfo)

    assert await migrate(pg_empty_conninfo) == []
    assert await _ledger(pg_empty_conninfo) == ledger


async def test_a_changed_migration_file_is_refused_naming_the_file(
    pg_empty_conninfo: str, tmp_path: Path
) -> None:
    folder = _copy_migrations(tmp_path)
    await migrate(pg_empty_conninfo, directory=folder)
    first = sorted(folder.glob("*.sql"))[0]
    first.write_text(first.read_text(encoding="utf-8") + "\n-- edited\n", encoding="utf-8")

    with pytest.raises(
        MigrationError, match=re.escape(f"{first.name} changed after it was applied")
    ):
        await migrate(pg_empty_conninfo, directory=folder)
    async with await psycopg.AsyncConnection.connect(pg_empty_conninfo) as conn:
        with pytest.raises(MigrationError, match=re.escape(first.name)):
            await pending(conn, directory=folder)
        assert not await is_current(conn, directory=folder)


async def test_an_applied_migration_without_its_file_is_refused(
    pg_empty_conninfo: str, tmp_path: Path
) -> None:
    folder = _copy_migrations(tmp_path)
    await migrate(pg_empty_conninfo, directory=folder)
    first = sorted(folder.glob("*.sql"))[0]
    first.unlink()

    with pytest.raises(
        MigrationError, match=re.escape(first.stem) + " is applied but .*" + re.escape(first.name)
    ):
        await migrate(pg_empty_conninfo, directory=folder)


async def test_a_failing_migration_names_its_file_and_leaves_no_trace(
    pg_empty_conninfo: str, tmp_path: Path
) -> None:
    folder = _copy_migrations(tmp_path)
    (folder / "0999_broken.sql").write_text(
        "CREATE TABLE half_done (id integer);\nSELECT no_such_function();\n", encoding="utf-8"
    )

    with pytest.raises(MigrationError, match=re.escape("0999_broken.sql failed")):
        await migrate(pg_empty_conninfo, directory=folder)
    assert "half_done" not in await _tables(pg_empty_conninfo)
    assert [v for v, _ in await _ledger(pg_empty_conninfo)] == ALL_VERSIONS


async def test_concurrent_migrators_apply_each_migration_once(
    pg_empty_conninfo: str, tmp_path: Path
) -> None:
    folder = _copy_migrations(tmp_path)
    (folder / "0998_slow.sql").write_text(SLOW_MIGRATION, encoding="utf-8")

    first, second = await asyncio.gather(
        migrate(pg_empty_conninfo, directory=folder),
        migrate(pg_empty_conninfo, directory=folder),
    )

    expected = [*ALL_VERSIONS, "0998_slow"]
    assert sorted(first + second) == sorted(expected)
    assert [v for v, _ in await _ledger(pg_empty_conninfo)] == sorted(expected)


async def test_a_database_never_migrated_is_unavailable_not_a_driver_error(
    pg_empty_conninfo: str,
) -> None:
    # docs/embedding.md: driver errors are translated at the adapter's edge; a missing
    # schema reads as the store being unusable until it is migrated.
    async with postgres_backend(pg_empty_conninfo, Settings(), b"k" * 32) as backend:
        with pytest.raises(StoreUnavailable, match="migrat"):
            await backend.services.admin.ensure_owner("robin", None)


async def test_check_of_a_database_never_migrated_is_unavailable_not_a_driver_error(
    pg_empty_conninfo: str,
) -> None:
    # Found by an audit: `turnkeeper check` printed psycopg's UndefinedTable.
    with pytest.raises(StoreUnavailable, match="migrat"):
        await check_database(pg_empty_conninfo)


@pytest.mark.parametrize("conninfo", ["not a url", "postgresql://robin:secret@[example.com"])
async def test_a_connection_string_that_does_not_parse_is_refused_by_name(conninfo: str) -> None:
    # docs/embedding.md: the caller sees turnkeeper's errors, not psycopg's; a string that
    # does not parse is the caller's mistake, refused before anything connects, and the
    # message holds no part of it (a password).
    attempts = (
        migrate(conninfo),
        check_database(conninfo),
    )
    for attempt in attempts:
        with pytest.raises(ValueError, match="connection string") as refused:
            await attempt
        assert "secret" not in str(refused.value)
        assert refused.value.__cause__ is None
    with pytest.raises(ValueError, match="connection string"):
        async with postgres_backend(conninfo, Settings(), b"k" * 32):
            pass


#: Transaction ids a restored database's counter is behind its last event in the tests
#: below (any positive number: pg_restore starts a new cluster's counter from scratch).
RESTORE_GAP = 5_000


async def _restored_event(conninfo: str) -> int:
    """Write the event a restore brings: its seq is above what the counter now derives."""
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        cur = await conn.execute("SELECT turnkeeper_event_seq_base()")
        row = await cur.fetchone()
        assert row is not None
        seq = int(row[0]) + (RESTORE_GAP << 16) + 1
        await conn.execute(_EVENT_AT, (seq,))
    return seq


async def test_a_database_behind_its_events_is_not_current_until_migrate_aligns_it(
    pg_empty_conninfo: str,
) -> None:
    # Found by an audit: after pg_dump and pg_restore into a new cluster the transaction id
    # counter started low again, new events got seqs below the cursors clients held, and
    # appends collided with restored seqs once the counter caught up.
    await migrate(pg_empty_conninfo)
    last = await _restored_event(pg_empty_conninfo)
    async with await psycopg.AsyncConnection.connect(pg_empty_conninfo) as conn:
        assert not await is_current(conn)

    assert await migrate(pg_empty_conninfo) == []

    async with await psycopg.AsyncConnection.connect(pg_empty_conninfo, autocommit=True) as conn:
        assert await is_current(conn)
        cur = await conn.execute(_NEXT_EVENT)
        row = await cur.fetchone()
        assert row is not None
        assert row[0] > last
        # A reader holding the restored event's seq as its cursor gets what follows it.
        cur = await conn.execute(_SERVED_AFTER, (last,))
        assert [r[0] for r in await cur.fetchall()] == [row[0]]
        # And the restored event itself is served (below the horizon).
        cur = await conn.execute(_SERVED_AFTER, (0,))
        assert [r[0] for r in await cur.fetchall()] == [last, row[0]]


async def test_migrating_an_aligned_database_leaves_the_offset_alone(
    pg_empty_conninfo: str,
) -> None:
    await migrate(pg_empty_conninfo)
    await _restored_event(pg_empty_conninfo)
    await migrate(pg_empty_conninfo)
    async with await psycopg.AsyncConnection.connect(pg_empty_conninfo, autocommit=True) as conn:
        cur = await conn.execute("SELECT turnkeeper_event_xid_offset()")
        first = await cur.fetchone()
        # Many transactions later nothing is behind: the offset stays.
        for _ in range(3):
            await conn.execute(_NEXT_EVENT)
        await migrate(pg_empty_conninfo)
        cur = await conn.execute("SELECT turnkeeper_event_xid_offset()")
        assert await cur.fetchone() == first
    assert first is not None
    assert first[0] > 0


async def test_a_fresh_database_keeps_an_offset_of_zero(pg_empty_conninfo: str) -> None:
    await migrate(pg_empty_conninfo)
    await migrate(pg_empty_conninfo)
    async with await psycopg.AsyncConnection.connect(pg_empty_conninfo, autocommit=True) as conn:
        cur = await conn.execute("SELECT turnkeeper_event_xid_offset()")
        assert await cur.fetchone() == (0,)
