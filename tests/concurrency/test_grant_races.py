"""Grants of one pair changed by concurrent transactions on PostgreSQL.

A raw transaction holds the pair (its grant row locked, or a first grant inserted and
not committed yet); the service's grant request is seen waiting for it on the server
(`tests.support.locks.wait_until_blocked`), and once the holder commits, the request
ends on the holder's grant: same id, the level asked for, and an audit record whose
"before" is the holder's level (read under the lock, after the holder's commit).
"""

from __future__ import annotations

import asyncio
import uuid

import psycopg
from psycopg_pool import AsyncConnectionPool

from tests.support.locks import wait_until_blocked
from tests.support.services import services_over
from turnkeeper.adapters.postgres.uow import Conn, PostgresUnitOfWorkFactory
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.services.grants import GrantChange
from turnkeeper.domain.world import Level, ResourceKind

#: The id of the grant the holder inserts.
HOLDER_GRANT_ID = uuid.UUID("01900000-0000-7000-8000-00000000f001")


async def _setup(pool: AsyncConnectionPool[Conn]) -> tuple[Services, DemoWorld]:
    services = services_over(PostgresUnitOfWorkFactory(pool))
    return services, await build_demo_world(services)


async def _changes(
    services: Services, grant_id: uuid.UUID
) -> list[tuple[str, str | None, str | None]]:
    async with services.uow.read_only() as uow:
        return [(c.action, c.before, c.after) for c in await uow.audit.changes(grant_id)]


async def test_a_level_change_waits_for_the_pairs_grant_and_reads_it_after(
    pg_conninfo: str, pg_pool: AsyncConnectionPool[Conn]
) -> None:
    services, world = await _setup(pg_pool)
    sam, allgemein = world.principal("sam"), world.channels["allgemein"]
    (grant,) = await services.grants.list_grants(
        world.owner.principal, principal_id=sam.id, resource_id=allgemein.id
    )
    async with await psycopg.AsyncConnection.connect(pg_conninfo) as holder:
        await holder.execute("SELECT 1 FROM grants WHERE id = %s FOR UPDATE", (grant.id,))
        request = asyncio.create_task(
            services.grants.set_grant(
                world.owner.principal,
                principal_id=sam.id,
                resource_kind=ResourceKind.CHANNEL,
                resource_id=allgemein.id,
                level=Level.TRIGGER,
            )
        )
        await wait_until_blocked(pg_conninfo, holder.info.backend_pid)
        assert not request.done()
        await holder.execute("UPDATE grants SET level = 'write' WHERE id = %s", (grant.id,))
        await holder.commit()
    change: GrantChange = await request
    assert (change.grant.id, change.grant.level, change.before) == (
        grant.id,
        Level.TRIGGER,
        Level.WRITE,
    )
    assert (await _changes(services, grant.id))[-1] == ("grant.level_changed", "write", "trigger")


async def test_two_first_grants_of_a_pair_end_as_one(
    pg_conninfo: str, pg_pool: AsyncConnectionPool[Conn]
) -> None:
    services, world = await _setup(pg_pool)
    alex, kampagnen = world.principal("alex"), world.channels["kampagnen"]
    async with await psycopg.AsyncConnection.connect(pg_conninfo) as holder:
        await holder.execute(
            "INSERT INTO grants (id, principal_id, resource_kind, resource_id, level, created_at) "
            "VALUES (%s, %s, 'channel', %s, 'read', now())",
            (HOLDER_GRANT_ID, alex.id, kampagnen.id),
        )
        request = asyncio.create_task(
            services.grants.set_grant(
                world.owner.principal,
                principal_id=alex.id,
                resource_kind=ResourceKind.CHANNEL,
                resource_id=kampagnen.id,
                level=Level.WRITE,
            )
        )
        # The request does not see the uncommitted row: its insert waits on the key.
        await wait_until_blocked(pg_conninfo, holder.info.backend_pid)
        await holder.commit()
    change = await request
    assert (change.created, change.grant.id, change.grant.level, change.before) == (
        False,
        HOLDER_GRANT_ID,
        Level.WRITE,
        Level.READ,
    )
    grants = await services.grants.list_grants(
        world.owner.principal, principal_id=alex.id, resource_id=kampagnen.id
    )
    assert [(g.id, g.level) for g in grants] == [(HOLDER_GRANT_ID, Level.WRITE)]
    assert await _changes(services, HOLDER_GRANT_ID) == [("grant.level_changed", "read", "write")]
