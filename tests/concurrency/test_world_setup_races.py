"""Servers that start together on one new database make one owner and one demo world.

Replicas of a deployment start at the same moment (ADR 0041): each finds no owner (or an
empty world) and makes one. The setup of the world is one process at a time, under a
session advisory lock of its own: the process that comes second waits, then finds the
owner (and the world) the first one made, and goes on to serve. Each scenario repeats on
a new database; that the second process waits is observed on the server
(`tests.support.locks.wait_until_blocked`), not slept for.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from tests.support.database import create_database, database_conninfo, drop_database
from tests.support.locks import wait_until_blocked
from turnkeeper.adapters.config import Config
from turnkeeper.adapters.postgres.world_lock import world_setup_lock
from turnkeeper.adapters.wiring import postgres_backend
from turnkeeper.adapters.world_setup import prepare_world
from turnkeeper.application.settings import Settings

#: Rounds of each race, each on a new database.
ROUNDS = 5
#: The invocation token key of both processes.
KEY = b"k" * 32
#: ``TURNKEEPER_OWNER_TOKEN`` of a deployment that sets it.
OWNER_TOKEN = "tk_owner-of-example.com-replicas-0123456789"


@pytest.fixture
async def new_database(pg_server: str, pg_template: str) -> AsyncIterator[list[str]]:
    """Makes migrated databases for the rounds of one test; drops them afterwards."""
    names: list[str] = []
    try:
        yield names
    finally:
        for name in names:
            await drop_database(pg_server, name)


async def _prepare(conninfo: str, config: Config, *, demo: bool) -> None:
    async with postgres_backend(conninfo, config.settings, KEY) as backend:
        await prepare_world(config, backend, demo=demo, conninfo=conninfo)


def _documents(out: str) -> list[dict[str, Any]]:
    """The JSON documents printed one after another (each may span lines)."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while out[at:].strip():
        at += len(out[at:]) - len(out[at:].lstrip())
        document, at = decoder.raw_decode(out, at)
        found.append(document)
    return found


async def _count(conninfo: str, sql: str) -> int:
    async with await psycopg.AsyncConnection.connect(conninfo) as conn:
        row = await (await conn.execute(sql.encode())).fetchone()
        assert row is not None
        return int(row[0])


@pytest.mark.parametrize("demo", [False, True], ids=["owner", "demo"])
@pytest.mark.parametrize("owner_token", [None, OWNER_TOKEN], ids=["generated", "env"])
async def test_servers_starting_together_make_one_owner_and_one_world(
    pg_server: str,
    pg_template: str,
    new_database: list[str],
    capsys: pytest.CaptureFixture[str],
    demo: bool,
    owner_token: str | None,
) -> None:
    config = Config(settings=Settings(metrics_enabled=False), owner_token=owner_token)
    for _ in range(ROUNDS):
        name = await create_database(pg_server, template=pg_template)
        new_database.append(name)
        conninfo = database_conninfo(pg_server, name)
        capsys.readouterr()
        await asyncio.gather(
            _prepare(conninfo, config, demo=demo), _prepare(conninfo, config, demo=demo)
        )
        printed = _documents(capsys.readouterr().out)
        assert await _count(conninfo, "SELECT count(*) FROM principals WHERE is_owner") == 1
        spaces = await _count(conninfo, "SELECT count(*) FROM spaces")
        people = await _count(conninfo, "SELECT count(*) FROM principals")
        if demo:
            # One world, printed once, with the owner's token.
            assert (spaces, len(printed)) == (3, 1)
            (world,) = printed
            ids = {world["owner"]["id"]} | {
                entry["id"] for kind in ("people", "agents") for entry in world[kind].values()
            }
            assert people == len(ids)
        else:
            assert (spaces, people) == (0, 1)
            # A generated token is printed once; the environment's is never printed.
            assert len(printed) == (1 if owner_token is None else 0)


async def test_a_second_setup_waits_for_the_first(
    pg_server: str, pg_template: str, new_database: list[str]
) -> None:
    config = Config(settings=Settings(metrics_enabled=False), owner_token=OWNER_TOKEN)
    for _ in range(ROUNDS):
        name = await create_database(pg_server, template=pg_template)
        new_database.append(name)
        conninfo = database_conninfo(pg_server, name)
        async with world_setup_lock(conninfo) as held:
            waiting = asyncio.create_task(_prepare(conninfo, config, demo=True))
            await wait_until_blocked(conninfo, held.info.backend_pid)
            assert not waiting.done(), "the second setup must wait for the first one's lock"
            assert await _count(conninfo, "SELECT count(*) FROM principals") == 0
        await waiting
        assert await _count(conninfo, "SELECT count(*) FROM spaces") == 3
