"""Migration 0006 on a database that holds follow-ups: accepted_run_id and mode filled.

Follow-ups are written by the services on the current schema; then the columns and the
index of 0006 are dropped and its ledger row deleted, as on a database migrated before
0006, and the migration runs again: every row gets its run and the agent's effective
mode now, and both columns are NOT NULL.
"""

from __future__ import annotations

import psycopg

from tests.support.fakes import FakeClock
from tests.support.scenario import main_thread, post, started_run
from tests.support.services import services_over
from turnkeeper.adapters.postgres.migrations import discover, migrate
from turnkeeper.application.demo import build_demo_world
from turnkeeper.application.ports import UnitOfWorkFactory
from turnkeeper.application.settings import Settings

VERSION = "0006"

UNDO_0006 = """
ALTER TABLE run_followups DROP COLUMN accepted_run_id, DROP COLUMN mode;
DROP INDEX runs_triggering_message_idx;
"""


async def test_rows_before_the_migration_get_their_run_and_the_mode_now(
    pg_conninfo: str, pg_uow_factory: UnitOfWorkFactory
) -> None:
    (version,) = [m.version for m in discover() if m.version.startswith(VERSION)]
    services = services_over(pg_uow_factory, Settings(), FakeClock())
    world = await build_demo_world(services)
    await services.runs.heartbeat(world.principal("lotse"), "queue")
    run, _ = await started_run(services, world)
    here = main_thread(world, "allgemein")
    one = await post(services, world, "alex", here, "f1")
    two = await post(services, world, "alex", here, "f2")

    async with await psycopg.AsyncConnection.connect(pg_conninfo, autocommit=True) as conn:
        await conn.execute(UNDO_0006)
        await conn.execute("DELETE FROM schema_migrations WHERE version = %s", (version,))
        # Lotse may no longer take follow-ups: its effective mode now is none.
        await conn.execute(
            "UPDATE principals SET supports_followups = false WHERE id = %s",
            (world.principal("lotse").id,),
        )

    assert await migrate(pg_conninfo) == [version]

    async with await psycopg.AsyncConnection.connect(pg_conninfo) as conn:
        cur = await conn.execute(
            "SELECT message_id, run_id, accepted_run_id, mode FROM run_followups ORDER BY 1"
        )
        rows = await cur.fetchall()
        cur = await conn.execute(
            "SELECT attname, attnotnull FROM pg_attribute"
            " WHERE attrelid = 'run_followups'::regclass AND attname IN ('accepted_run_id', 'mode')"
            " ORDER BY 1"
        )
        columns = await cur.fetchall()
        cur = await conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE indexname = 'runs_triggering_message_idx'"
        )
        (indexes,) = await cur.fetchone() or (0,)
    assert rows == [(one.id, run.id, run.id, "none"), (two.id, run.id, run.id, "none")]
    assert columns == [("accepted_run_id", True), ("mode", True)]
    assert indexes == 1
