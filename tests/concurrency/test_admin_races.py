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
from tests.support.scenario import draft
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.ports import UnitOfWorkFactory
from turnkeeper.application.transactions import AccessDenied
from turnkeeper.domain.authorization import DenyReason
from turnkeeper.domain.errors import NotFound
from turnkeeper.domain.world import (
    ChannelType,
    Level,
    OperatorMode,
    Principal,
    ResourceKind,
    Thread,
    ThreadState,
)

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


async def _behind_held_thread(
    conninfo: str,
    thread_id: uuid.UUID,
    write: Callable[[], Coroutine[Any, Any, T]],
    change: Callable[[], Coroutine[Any, Any, object]],
) -> T:
    """Run `write` queued behind another session's lock of the thread; `change` commits
    while the write waits, then the holder commits and the write goes on."""
    async with await psycopg.AsyncConnection.connect(conninfo) as holder:
        await holder.execute(
            b"SELECT 1 FROM threads WHERE id = %(id)s FOR UPDATE", {"id": thread_id}
        )
        waiting = asyncio.create_task(write())
        await wait_until_blocked(conninfo, holder.info.backend_pid)
        # The change does not wait for a write that waits for its thread.
        await change()
        assert not waiting.done(), "the write must wait for the held thread"
        await holder.commit()
    return await waiting


#: Robin's writes into a main thread (services, Robin, the thread, the round).
_WRITES: dict[str, Callable[[Services, Principal, uuid.UUID, int], Coroutine[Any, Any, object]]] = {
    "post": lambda services, robin, thread_id, round_: services.conversation.create_message(
        robin, thread_id, draft(f"a{round_}")
    ),
    "close": lambda services, robin, thread_id, _: services.conversation.close_thread(
        robin, thread_id
    ),
}


@pytest.mark.parametrize("write", sorted(_WRITES))
async def test_a_write_that_waited_for_its_thread_sees_an_archive_committed_meanwhile(
    pg_conninfo: str, world_on_pg: tuple[Services, DemoWorld], write: str
) -> None:
    # Found by a black-box audit: a post read its channel in the snapshot taken before
    # its thread lock wait, so posts queued in a busy thread were stored (201) in a
    # channel whose archive had answered, and another post had been refused, before; a
    # close authorized before its wait marked the thread done there.
    services, world = world_on_pg
    robin = world.owner.principal
    for round_ in range(ROUNDS):
        channel = await services.admin.create_channel(
            robin, world.spaces["support"].id, name=f"{write} {round_}", type=ChannelType.TEXT
        )
        thread_id = channel.main_thread_id
        assert thread_id is not None
        with pytest.raises(AccessDenied) as denied:
            await _behind_held_thread(
                pg_conninfo,
                thread_id,
                partial(_WRITES[write], services, robin, thread_id, round_),
                partial(services.admin.archive_channel, robin, channel.id),
            )
        assert (denied.value.code, denied.value.reason) == (
            "channel_read_only",
            DenyReason.CHANNEL_ARCHIVED,
        )
        page = await services.conversation.list_messages(robin, thread_id)
        assert page.messages == []
        thread = await services.conversation.get_thread(robin, thread_id)
        assert thread.state is ThreadState.OPEN


async def test_a_post_that_waited_for_its_thread_sees_an_operator_change_committed_meanwhile(
    pg_conninfo: str, world_on_pg: tuple[Services, DemoWorld]
) -> None:
    # The main thread follows its channel's current operator: the old operator's post,
    # queued behind the thread lock while the change committed, must not be stored.
    services, world = world_on_pg
    robin, lotse, texter = (world.principal(h) for h in ("robin", "lotse", "texter"))
    for round_ in range(ROUNDS):
        channel = await services.admin.create_channel(
            robin, world.spaces["support"].id, name=f"operator {round_}", type=ChannelType.TEXT
        )
        assert channel.main_thread_id is not None
        with pytest.raises(AccessDenied) as denied:
            await _behind_held_thread(
                pg_conninfo,
                channel.main_thread_id,
                partial(
                    services.conversation.create_message,
                    lotse,
                    channel.main_thread_id,
                    draft(f"o{round_}"),
                ),
                partial(
                    services.admin.set_operator,
                    robin,
                    channel.id,
                    mode=OperatorMode.AGENT,
                    operator_id=texter.id,
                ),
            )
        assert denied.value.code == "not_found"
        page = await services.conversation.list_messages(robin, channel.main_thread_id)
        assert page.messages == []


async def test_a_channel_change_does_not_wait_for_the_posts_under_way_in_it(
    world_on_pg: tuple[Services, DemoWorld], pg_uow_factory: UnitOfWorkFactory
) -> None:
    # A post reads its channel without a lock (ADR 0044): with the row held FOR SHARE,
    # the archive's FOR UPDATE waited for every post, and under a stream of posts into
    # the channel it never got the row (a new share locker does not queue behind a
    # waiting writer) and failed after database.request_timeout. Here the changes run
    # while a post's unit, which also inserted a new thread, is open.
    services, world = world_on_pg
    robin = world.owner.principal
    for round_ in range(ROUNDS):
        channel = await services.admin.create_channel(
            robin, world.spaces["support"].id, name=f"held {round_}", type=ChannelType.TEXT
        )
        assert channel.main_thread_id is not None
        async with pg_uow_factory() as uow:
            facts = await uow.threads.post_facts(channel.main_thread_id, robin.id, f"h{round_}")
            assert facts is not None
            assert facts.target.channel.archived is False
            # A new thread's insert holds the channel FOR KEY SHARE (its foreign key),
            # which the change's FOR NO KEY UPDATE does not wait for either.
            held = Thread(
                id=uuid.uuid4(),
                channel_id=channel.id,
                created_by=robin.id,
                created_at=facts.target.channel.created_at,
            )
            await uow.threads.add(held)
            assert await uow.threads.get(held.id) is not None  # the insert has run
            behaved = await services.admin.set_behavior(robin, channel.id, free_response=True)
            archived = await services.admin.archive_channel(robin, channel.id)
        assert behaved.behavior.free_response is True
        assert archived.archived is True
