"""Administrative changes of one row wait for each other and lose nothing.

Found by a black-box audit: the channel changes (behavior, operator, archive) and an
agent's configuration read their row unlocked and wrote every column back, so a change
committed in between was lost (an archived channel writable again, a heartbeat's
capability reverted), and two deletes of one grant both answered 204 with two audit
records. Each test holds an uncommitted change of the row in another session, starts the
use case, observes on the server that it waits for the row (`wait_until_blocked`), then
commits the holder: the use case must build on what the holder committed. Repeated, as
the other concurrency tests are.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any, TypeVar

import psycopg
import pytest

from tests.support.locks import wait_until_blocked
from tests.support.services import services_over
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.ports import UnitOfWorkFactory
from turnkeeper.domain.errors import NotFound
from turnkeeper.domain.world import ChannelType, Level, ResourceKind

T = TypeVar("T")

#: Rounds of each scenario.
ROUNDS = 5


async def _behind_held_change(
    conninfo: str,
    held_sql: str,
    params: dict[str, Any],
    use_case: Callable[[], Coroutine[Any, Any, T]],
) -> T:
    """Run `use_case` while another session holds the uncommitted change `held_sql`."""
    async with await psycopg.AsyncConnection.connect(conninfo) as holder:
        await holder.execute(held_sql.encode(), params)
        waiting = asyncio.create_task(use_case())
        await wait_until_blocked(conninfo, holder.info.backend_pid)
        assert not waiting.done(), "the use case must wait for the held row"
        await holder.commit()
    return await waiting


@pytest.fixture
async def world_on_pg(pg_uow_factory: UnitOfWorkFactory) -> tuple[Services, DemoWorld]:
    """The demo world on PostgreSQL."""
    services = services_over(pg_uow_factory)
    return services, await build_demo_world(services)


async def test_a_channel_change_keeps_a_change_committed_while_it_waited(
    pg_conninfo: str, world_on_pg: tuple[Services, DemoWorld]
) -> None:
    services, world = world_on_pg
    robin = world.owner.principal
    for round_ in range(ROUNDS):
        channel = await services.admin.create_channel(
            robin, world.spaces["support"].id, name=f"race {round_}", type=ChannelType.TEXT
        )
        archived = await _behind_held_change(
            pg_conninfo,
            "UPDATE channels SET free_response = true WHERE id = %(id)s",
            {"id": channel.id},
            partial(services.admin.archive_channel, robin, channel.id),
        )
        assert (archived.archived, archived.behavior.free_response) == (True, True)
        behaved = await _behind_held_change(
            pg_conninfo,
            "UPDATE channels SET free_response = false WHERE id = %(id)s",
            {"id": channel.id},
            partial(services.admin.set_behavior, robin, channel.id, allow_mentioned_agents=True),
        )
        assert (
            behaved.archived,
            behaved.behavior.free_response,
            behaved.behavior.allow_mentioned_agents,
        ) == (
            True,
            False,
            True,
        )


async def test_an_agents_configuration_keeps_a_capability_reported_while_it_waited(
    pg_conninfo: str, world_on_pg: tuple[Services, DemoWorld]
) -> None:
    services, world = world_on_pg
    robin, lotse = world.owner.principal, world.principal("lotse")
    for round_ in range(ROUNDS):
        reported = ("steer", "queue")[round_ % 2]
        configured = await _behind_held_change(
            pg_conninfo,
            "UPDATE principals SET reported_followups = %(reported)s WHERE id = %(id)s",
            {"id": lotse.id, "reported": reported},
            partial(services.admin.set_agent_config, robin, lotse.id, enabled=True),
        )
        assert configured.reported_followups == reported


async def test_a_grant_deleted_while_its_delete_waited_is_not_found(
    pg_conninfo: str, world_on_pg: tuple[Services, DemoWorld]
) -> None:
    services, world = world_on_pg
    robin, sam = world.owner.principal, world.principal("sam")
    for _ in range(ROUNDS):
        grant = await services.admin.create_grant(
            robin,
            principal_id=sam.id,
            resource_kind=ResourceKind.SPACE,
            resource_id=world.spaces["research"].id,
            level=Level.READ,
        )
        before = len(await _audit_of(services, grant.id))
        with pytest.raises(NotFound):
            await _behind_held_change(
                pg_conninfo,
                "DELETE FROM grants WHERE id = %(id)s",
                {"id": grant.id},
                partial(services.admin.delete_grant, robin, grant.id),
            )
        # The delete that lost wrote no audit record of its own.
        assert len(await _audit_of(services, grant.id)) == before


async def _audit_of(services: Services, subject_id: uuid.UUID) -> list[object]:
    async with services.uow() as uow:
        return list(await uow.audit.changes(subject_id))
