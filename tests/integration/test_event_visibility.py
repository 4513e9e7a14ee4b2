"""The shared event log serves the threads a reader may open, after operator changes.

Issue 16 item 1: a forum's new operator (or the first operator of a channel that had
none) got 404 on the channel's older threads, whose fixed operator is someone else, yet
the log served it every event of them with content. Run on memory and on PostgreSQL;
pages, long-poll and stream read through the same use case and are all checked.
"""

from __future__ import annotations

import uuid

import pytest

from tests.support.http import PRINCIPALS
from tests.support.scenario import draft, main_thread
from tests.support.visibility import expected_events, openable, served_events, whole_log
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.services.live_stream import Heartbeat
from turnkeeper.application.transactions import AccessDenied
from turnkeeper.domain.world import OperatorMode

#: A small page, so that the reads page through the log.
PAGE = 2
#: A long-poll that has something to answer at once never waits this long.
WAIT_SECONDS = 5


async def new_thread(services: Services, world: DemoWorld, channel: str, cid: str) -> uuid.UUID:
    """Alex (trigger on Support) opens a thread in a channel."""
    created = await services.conversation.create_thread(
        world.principal("alex"),
        world.channels[channel].id,
        title=f"Thread {cid}",
        first_message=draft(cid, f"first message {cid}"),
    )
    return created.thread.id


async def say(services: Services, world: DemoWorld, thread_id: uuid.UUID, cid: str) -> None:
    await services.conversation.create_message(
        world.principal("alex"), thread_id, draft(cid, f"later message {cid}")
    )


async def set_operator(
    services: Services, world: DemoWorld, channel: str, agent: str | None
) -> None:
    await services.admin.set_operator(
        world.principal("robin"),
        world.channels[channel].id,
        mode=OperatorMode.AGENT if agent else OperatorMode.NONE,
        operator_id=world.principal(agent).id if agent else None,
    )


async def assert_log_matches_open_threads(
    services: Services, world: DemoWorld, reader: str, threads: set[uuid.UUID]
) -> set[uuid.UUID]:
    """The reader is served exactly the events of the threads it may open; returns those."""
    principal = world.principal(reader)
    log = await whole_log(services, map(world.principal, PRINCIPALS))
    known = threads | {e.thread_id for e in log if e.thread_id is not None}
    allowed = await openable(services, principal, known)
    served = [e.seq for e in await served_events(services, principal, PAGE)]
    assert served == expected_events(log, principal.id, allowed)
    return allowed


async def test_a_new_forum_operator_reads_no_event_of_the_older_threads(
    services: Services, world: DemoWorld
) -> None:
    old = await new_thread(services, world, "bulletin", "old")  # fixed operator Lotse
    await set_operator(services, world, "bulletin", "texter")
    await say(services, world, old, "after-change")
    new = await new_thread(services, world, "bulletin", "new")  # fixed operator Texter
    texter = world.principal("texter")
    with pytest.raises(AccessDenied) as denied:
        await services.conversation.get_thread(texter, old)
    assert denied.value.code == "not_found"
    served = await served_events(services, texter, PAGE)
    assert old not in {e.thread_id for e in served}
    assert new in {e.thread_id for e in served}
    assert "later message after-change" not in repr([e.payload for e in served])
    allowed = await assert_log_matches_open_threads(services, world, "texter", {old, new})
    assert new in allowed
    assert old not in allowed
    # The fixed operator of the old thread still reads it, the later message included.
    assert old in await assert_log_matches_open_threads(services, world, "lotse", {old, new})


async def test_the_first_operator_of_a_channel_reads_no_event_of_its_older_threads(
    services: Services, world: DemoWorld
) -> None:
    # Reports has operator mode none (Lotse writes there through a grant).
    old = await new_thread(services, world, "reports", "before-operator")
    await set_operator(services, world, "reports", "assistent")
    await say(services, world, old, "after-operator")
    new = await new_thread(services, world, "reports", "with-operator")
    assistent = world.principal("assistent")
    with pytest.raises(AccessDenied):
        await services.conversation.get_thread(assistent, old)
    served = {e.thread_id for e in await served_events(services, assistent, PAGE)}
    assert old not in served
    assert new in served
    await assert_log_matches_open_threads(services, world, "assistent", {old, new})
    # Lotse's grant on Reports opens every thread of it, whoever operates them.
    assert {old, new} <= await assert_log_matches_open_threads(services, world, "lotse", {old, new})


async def test_a_main_thread_follows_the_channels_current_operator_in_the_log(
    services: Services, world: DemoWorld
) -> None:
    kampagnen = main_thread(world, "kampagnen")
    await services.conversation.create_message(
        world.principal("sam"), kampagnen, draft("main-1", "in the main thread")
    )
    forum = await services.conversation.create_thread(
        world.principal("sam"),
        world.channels["kampagnen"].id,
        title="Plan",
        first_message=draft("plan-1", "a thread Texter operates"),
    )
    await services.admin.set_operator(
        world.principal("robin"),
        world.channels["kampagnen"].id,
        mode=OperatorMode.AGENT,
        operator_id=world.principal("lotse").id,
    )
    threads = {kampagnen, forum.thread.id}
    # Lotse now operates the main thread (its whole history), not Texter's thread.
    assert await assert_log_matches_open_threads(services, world, "lotse", threads) >= {kampagnen}
    texter_threads = await assert_log_matches_open_threads(services, world, "texter", threads)
    assert forum.thread.id in texter_threads
    assert kampagnen not in texter_threads


async def test_long_poll_and_stream_skip_the_threads_the_reader_may_not_open(
    services: Services, world: DemoWorld
) -> None:
    old = await new_thread(services, world, "bulletin", "old")
    await set_operator(services, world, "bulletin", "texter")
    texter = world.principal("texter")
    cursor = (await services.conversation.list_events(texter, after=0)).next_after
    await say(services, world, old, "hidden")
    new = await new_thread(services, world, "bulletin", "visible")
    page = await services.live.wait_events(texter, after=cursor, wait=WAIT_SECONDS)
    assert page.events
    assert {e.thread_id for e in page.events} == {new}
    async with await services.live.open_events(texter, after=cursor) as stream:
        item = await anext(stream)
    assert not isinstance(item, Heartbeat)
    assert [e.seq for e in item.events] == [e.seq for e in page.events]
