"""A post racing a close never leaves a message in a done thread without a reopen line.

Issue 16 item 3: the post read the thread's state without the lock, so a close that
committed while the post waited for the thread row lock left the thread done with the
new message after it and no reopen line. The decision is now taken on the state read
under the thread row lock (``LockThreadState``). Proven with real concurrent
transactions on PostgreSQL: the close is held open in one unit while the post runs, the
post is seen waiting for the lock in ``pg_stat_activity`` (no sleep), and after the
close commits the post must reopen the thread. A free race of closes and posts then
keeps ``no_message_after_done_without_reopen`` and every other invariant of
``turnkeeper check``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.support.database import execute
from tests.support.locks import backend_pid, wait_until_blocked
from tests.support.scenario import draft, main_thread
from tests.support.services import services_over
from turnkeeper.adapters.postgres.invariants import Invariant, check_database
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.ports import UnitOfWorkFactory
from turnkeeper.application.settings import Settings
from turnkeeper.domain.events import EventType
from turnkeeper.domain.messaging import SYSTEM_REOPENED_CONTENT, MessageKind, Origin
from turnkeeper.domain.world import ThreadState

#: Rounds of the held-close race (each one a close held open while a post waits).
ROUNDS = 8
#: Rounds of the free race of a close and posts started together.
FREE_ROUNDS = 15
#: Posts started beside each close of the free race.
POSTS_PER_ROUND = 3
#: No rate limit gets in the way of the posts.
BURST = 100000
#: Seconds the ``turnkeeper check`` subprocess may take.
CLI_TIMEOUT_SECONDS = 60
TURNKEEPER = Path(sys.executable).with_name("turnkeeper")


@pytest.fixture
async def services(pg_uow_factory: UnitOfWorkFactory) -> Services:
    return services_over(pg_uow_factory, Settings(rl_message_burst=BURST))


@pytest.fixture
async def world(services: Services) -> DemoWorld:
    return await build_demo_world(services)


async def history(services: Services, world: DemoWorld, thread_id: uuid.UUID) -> list[str]:
    """The thread's messages as ``origin/kind:content``, in seq order."""
    page = await services.conversation.list_messages(
        world.principal("robin"), thread_id, limit=services.settings.page_max_limit
    )
    return [f"{m.origin.value}/{m.kind.value}:{m.content}" for m in page.messages]


REOPEN_LINE = f"{Origin.SYSTEM.value}/{MessageKind.SYSTEM.value}:{SYSTEM_REOPENED_CONTENT}"


async def test_a_post_waiting_for_a_close_reopens_the_thread(
    services: Services, world: DemoWorld, pg_uow_factory: UnitOfWorkFactory, pg_conninfo: str
) -> None:
    thread_id = main_thread(world, "eskalation")
    alex = world.principal("alex")
    await services.conversation.create_message(alex, thread_id, draft("before", "before"))
    for round_ in range(ROUNDS):
        async with pg_uow_factory() as closing:
            await closing.threads.set_state(thread_id, ThreadState.DONE)
            post = asyncio.create_task(
                services.conversation.create_message(
                    alex, thread_id, draft(f"racing-{round_}", f"racing {round_}")
                )
            )
            # The post reached the thread row lock the uncommitted close holds.
            await wait_until_blocked(pg_conninfo, backend_pid(closing))
            assert not post.done()
            await closing.commit()
        posted = await post
        lines = await history(services, world, thread_id)
        # The close came first: the post reopened the thread with a line before itself.
        assert lines[-2:] == [REOPEN_LINE, f"human/text:racing {round_}"]
        assert posted.message.thread_seq == len(lines)
        thread = await services.conversation.get_thread(world.principal("robin"), thread_id)
        assert thread.state is ThreadState.OPEN
    reopened = [
        e
        for e in (
            await services.conversation.list_events(world.principal("robin"), limit=500)
        ).events
        if e.type is EventType.THREAD_REOPENED
    ]
    assert len(reopened) == ROUNDS
    assert await check_database(pg_conninfo) == []


async def test_a_close_waits_for_a_post_holding_the_thread_lock(
    services: Services, world: DemoWorld, pg_uow_factory: UnitOfWorkFactory, pg_conninfo: str
) -> None:
    thread_id = main_thread(world, "eskalation")
    robin = world.principal("robin")
    for _ in range(ROUNDS):
        async with pg_uow_factory() as posting:
            # What an append takes first: the row lock, with the state read under it.
            assert await posting.threads.lock_state(thread_id) is ThreadState.OPEN
            close = asyncio.create_task(services.conversation.close_thread(robin, thread_id))
            await wait_until_blocked(pg_conninfo, backend_pid(posting))
            assert not close.done()
            await posting.commit()
        await close
        thread = await services.conversation.get_thread(robin, thread_id)
        assert thread.state is ThreadState.DONE
        await services.conversation.create_message(
            robin, thread_id, draft(f"after-{uuid.uuid4()}", "after the close")
        )
    assert await check_database(pg_conninfo) == []


async def test_a_close_answers_the_frontier_of_a_post_it_waited_for(
    services: Services, world: DemoWorld, pg_uow_factory: UnitOfWorkFactory, pg_conninfo: str
) -> None:
    # Found by a black-box audit: the close answered the thread it read before it waited,
    # so its latest_seq was behind the frontier it closed at.
    thread_id = main_thread(world, "eskalation")
    robin = world.principal("robin")
    for _ in range(ROUNDS):
        await services.conversation.create_message(
            robin, thread_id, draft(f"open-{uuid.uuid4()}", "opens the thread again")
        )
        async with pg_uow_factory() as posting:
            assert await posting.threads.lock_state(thread_id) is ThreadState.OPEN
            posted_seq = await posting.threads.allocate_seq(thread_id)
            close = asyncio.create_task(services.conversation.close_thread(robin, thread_id))
            await wait_until_blocked(pg_conninfo, backend_pid(posting))
            await posting.commit()
        closed = await close
        assert (closed.state, closed.latest_seq) == (ThreadState.DONE, posted_seq)
        assert closed == await services.conversation.get_thread(robin, thread_id)


async def test_a_free_race_of_closes_and_posts_keeps_every_invariant(
    services: Services, world: DemoWorld, pg_conninfo: str
) -> None:
    thread_id = main_thread(world, "eskalation")
    alex, robin = world.principal("alex"), world.principal("robin")
    for round_ in range(FREE_ROUNDS):
        await asyncio.gather(
            services.conversation.close_thread(robin, thread_id),
            *(
                services.conversation.create_message(
                    alex, thread_id, draft(f"free-{round_}-{i}", f"free {round_} {i}")
                )
                for i in range(POSTS_PER_ROUND)
            ),
        )
        assert await check_database(pg_conninfo) == []
    lines = await history(services, world, thread_id)
    assert len([line for line in lines if line.startswith("human/text:free")]) == (
        FREE_ROUNDS * POSTS_PER_ROUND
    )


def _check_cli(conninfo: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TURNKEEPER_DATABASE_URL": conninfo}
    return subprocess.run(
        [str(TURNKEEPER), "check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_SECONDS,
        check=False,
    )


async def test_turnkeeper_check_reports_a_message_after_a_done_state(
    services: Services, world: DemoWorld, pg_conninfo: str
) -> None:
    thread_id = main_thread(world, "eskalation")
    robin = world.principal("robin")
    for cid in ("one", "two"):
        await services.conversation.create_message(robin, thread_id, draft(cid, cid))
    await services.conversation.close_thread(robin, thread_id)
    await services.conversation.create_message(robin, thread_id, draft("three", "reopens"))
    await services.conversation.close_thread(robin, thread_id)
    clean = _check_cli(pg_conninfo)
    assert (clean.returncode, clean.stdout) == (0, ""), clean.stderr
    # What the race left: the thread closed before its last message, and no reopen line.
    await execute(
        pg_conninfo,
        "UPDATE threads SET closed_at_seq = latest_seq - 1 WHERE id = %(thread)s",
        {"thread": thread_id},
    )
    dirty = _check_cli(pg_conninfo)
    assert dirty.returncode == 1
    assert dirty.stdout.splitlines() == [
        f"{Invariant.MESSAGE_AFTER_DONE.value} {thread_id} state=done closed_at_seq=3"
        " latest_seq=4 next=human/text"
    ]


@pytest.mark.parametrize(
    "planted",
    [
        # Open again, but the message after the close is no reopen line.
        "UPDATE threads SET state = 'open', closed_at_seq = latest_seq - 1 WHERE id = %(thread)s",
        # The reopen line after the last close is gone (an ordinary message in its place).
        "UPDATE messages SET origin = 'human', kind = 'text' WHERE thread_id = %(thread)s"
        " AND kind = 'system'",
    ],
)
async def test_each_planted_reopen_violation_is_found(
    services: Services, world: DemoWorld, pg_conninfo: str, planted: str
) -> None:
    thread_id = main_thread(world, "eskalation")
    robin = world.principal("robin")
    await services.conversation.create_message(robin, thread_id, draft("one", "one"))
    await services.conversation.close_thread(robin, thread_id)
    await services.conversation.create_message(robin, thread_id, draft("two", "reopens"))
    assert await check_database(pg_conninfo) == []
    await execute(pg_conninfo, planted, {"thread": thread_id})
    found = await check_database(pg_conninfo)
    assert [(v.invariant, v.subject_id) for v in found] == [
        (Invariant.MESSAGE_AFTER_DONE, thread_id)
    ]
