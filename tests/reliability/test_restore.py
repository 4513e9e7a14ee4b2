"""A database moved to another PostgreSQL cluster with pg_dump and pg_restore goes on.

Found by an audit: event seqs derive from the writer's transaction id (ADR 0020), and a
restore carries the events but not the transaction id counter. On the new cluster the
counter started low again: new events got seqs below the cursors clients held (a
resuming reader never saw them), restored events above the new horizon were served to
no reader, and appends collided with restored seqs once the counter caught up. Every
migrate now raises the seq offset above the restored events (ADR 0038).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
from pgserver._commands import POSTGRES_BIN_PATH

from tests.reliability.support_server import (
    CLI_TIMEOUT_SECONDS,
    REQUEST_TIMEOUT_SECONDS,
    Server,
    demo_world,
    server_env,
)
from turnkeeper.adapters.postgres.embedded import EmbeddedPostgres

#: The database both clusters hold.
DATABASE = "turnkeeper"
#: Transactions burnt on the first cluster, so that its counter is well ahead of what a
#: fresh cluster reaches after initdb and the restore (a few hundred).
BURNT_TRANSACTIONS = 3_000
#: The prefix of the short directory of both clusters (a socket path below pytest's
#: tmp_path grows past the kernel's limit).
SHORT_TMP_PREFIX = "tkr-"


@contextmanager
def _cluster(folder: Path) -> Iterator[str]:
    """A cluster of its own in `folder`, with an empty `DATABASE`; yields its URI."""
    server = EmbeddedPostgres.start(folder, cleanup_mode="stop")
    try:
        with psycopg.connect(server.conninfo, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        yield server.uri(DATABASE)
    finally:
        server.stop()


def _bearer(world: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {world['people']['alex']['token']}"}


async def _post(http: httpx.AsyncClient, server: Server, world: dict[str, Any], cid: str) -> str:
    thread = world["channels"]["allgemein"]["main_thread_id"]
    answer = await http.post(
        f"{server.url}/v1/threads/{thread}/messages",
        json={"client_msg_id": cid, "content": f"Before and after the move {cid}"},
        headers=_bearer(world),
    )
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


async def _read_all(
    http: httpx.AsyncClient, server: Server, world: dict[str, Any], after: int
) -> tuple[list[dict[str, Any]], int]:
    """Every event Alex may read after `after`, and the cursor at the end."""
    events: list[dict[str, Any]] = []
    while True:
        answer = await http.get(
            f"{server.url}/v1/events", params={"after": after}, headers=_bearer(world)
        )
        assert answer.status_code == 200, answer.text
        page = answer.json()
        after = int(page["next_after"])
        if not page["events"]:
            return events, after
        events.extend(page["events"])


async def _run(args: list[str]) -> None:
    """Run a PostgreSQL client program to its successful end."""
    await asyncio.to_thread(subprocess.run, args, check=True, timeout=CLI_TIMEOUT_SECONDS)


def _shortfall(uri: str) -> int:
    with psycopg.connect(uri) as conn:
        row = conn.execute("SELECT turnkeeper_event_xid_shortfall()").fetchone()
    assert row is not None
    return int(row[0])


async def test_a_database_restored_into_a_new_cluster_serves_old_cursors_and_new_events(
    tmp_path: Path,
) -> None:
    short = Path(tempfile.mkdtemp(prefix=SHORT_TMP_PREFIX))
    try:
        with _cluster(short / "a") as source:
            with psycopg.connect(source, autocommit=True) as conn:
                for _ in range(BURNT_TRANSACTIONS):
                    conn.execute("SELECT pg_current_xact_id()")
            env = server_env(source, tmp_path / "a")
            world = demo_world(env)
            server = Server(env=env, log_dir=tmp_path)
            server.start()
            try:
                await server.wait_ready()
                async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_SECONDS) as http:
                    before = await _post(http, server, world, "move-1")
                    old_events, cursor = await _read_all(http, server, world, 0)
            finally:
                server.stop()
            dump = tmp_path / "turnkeeper.dump"
            await _run([str(POSTGRES_BIN_PATH / "pg_dump"), "-Fc", "-f", str(dump), "-d", source])
        assert any(e["resource"]["id"] == before for e in old_events)

        with _cluster(short / "b") as target:
            await _run([str(POSTGRES_BIN_PATH / "pg_restore"), "-d", target, str(dump)])
            # The case itself: the new cluster's counter is behind the restored events.
            assert _shortfall(target) > 0
            server = Server(env=server_env(target, tmp_path / "b"), log_dir=tmp_path)
            server.start()
            try:
                await server.wait_ready()
                async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_SECONDS) as http:
                    # Every event of the old cluster is still served, in the same order.
                    restored, _ = await _read_all(http, server, world, 0)
                    assert [e["seq"] for e in restored] == [e["seq"] for e in old_events]
                    after = await _post(http, server, world, "move-2")
                    # A reader resuming from the cursor it held before the move gets it.
                    new_events, _ = await _read_all(http, server, world, cursor)
            finally:
                server.stop()
            assert _shortfall(target) <= 0
        assert after in {e["resource"]["id"] for e in new_events}
        assert all(e["seq"] > cursor for e in new_events)
    finally:
        shutil.rmtree(short, ignore_errors=True)
