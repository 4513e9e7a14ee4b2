"""Live delivery on the memory adapter and on PostgreSQL: readers are woken by commits.

The same scenarios run on both stores. On PostgreSQL the wake-up comes from each
process's watching connection (`PostgresEventWaker`, ADR 0020): two sets of services on
one database stand for two server processes (a commit through one wakes a reader of the
other), what the watch reads names feeds but neither content nor token, an event held
back by an older open transaction wakes its reader when that transaction ends (though it
appends nothing), and a killed watching connection is replaced without losing an event.
Every wake-up is awaited with a bound; nothing sleeps for a time window.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import attrs
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from tests.support.fakes import TEST_KEY, FakeClock, SequentialIds
from turnkeeper.adapters.memory import MemoryUnitOfWorkFactory
from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.postgres.uow import Conn, PostgresUnitOfWorkFactory
from turnkeeper.adapters.postgres.wakeup import (
    LISTENER_APPLICATION_NAME,
    WATCH_BATCH,
    PostgresEventWaker,
)
from turnkeeper.adapters.tokens import JwtSigner
from turnkeeper.adapters.wakeups import LocalWaker
from turnkeeper.application.bootstrap import Services, build_services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.services.conversation import EventPage
from turnkeeper.application.services.live_stream import HEARTBEAT
from turnkeeper.application.services.runs import AgentEventPage
from turnkeeper.application.settings import Settings
from turnkeeper.domain.events import EventType
from turnkeeper.domain.messaging import MessageDraft

#: Bound of a wait for something that must happen at once.
BOUND_SECONDS = 10.0
#: Long enough that only a wake-up can end a wait within `BOUND_SECONDS`.
LONG_WAIT_SECONDS = 60
#: The PostgreSQL waker's check interval: longer than `BOUND_SECONDS`, so that only the
#: watch can wake a reader in time (never the fallback polling).
CHECK_INTERVAL = timedelta(seconds=LONG_WAIT_SECONDS)
#: Steps of at most `LOOK_STEP_SECONDS` a test yields for while it awaits looks of the watch.
LOOK_STEPS = 10_000
LOOK_STEP_SECONDS = 0.001
#: The check interval (and reconnect pause) of the reconnect test.
RECONNECT_INTERVAL = timedelta(seconds=1)
#: Content that must never cross the watch.
SECRET = "the quarterly numbers are in the red"


def _settings() -> Settings:
    return Settings(
        stream_max_wait=timedelta(seconds=LONG_WAIT_SECONDS),
        stream_heartbeat=timedelta(seconds=LONG_WAIT_SECONDS),
        rl_message_burst=1000,
    )


@attrs.define
class Node:
    """One set of services, as one server process holds them."""

    services: Services
    world: DemoWorld

    def thread(self, channel: str) -> uuid.UUID:
        thread_id = self.world.channels[channel].main_thread_id
        assert thread_id is not None
        return thread_id

    async def post(self, author: str, channel: str, cid: str, *, mention: str = "") -> None:
        mentions = (self.world.principal(mention).id,) if mention else ()
        await self.services.conversation.create_message(
            self.world.principal(author),
            self.thread(channel),
            MessageDraft(client_msg_id=cid, content=SECRET, mentions=mentions),
        )

    async def end_of_feed(self, reader: str) -> int:
        page = await self.services.conversation.list_events(
            self.world.principal(reader), after=0, limit=500
        )
        return page.next_after


def _services(factory: MemoryUnitOfWorkFactory | PostgresUnitOfWorkFactory) -> Services:
    return build_services(factory, _settings(), FakeClock(), SequentialIds(), JwtSigner(TEST_KEY))


@pytest.fixture
def check_interval() -> timedelta:
    return CHECK_INTERVAL


@pytest.fixture
async def pg_node(
    pg_pool: AsyncConnectionPool[Conn], pg_conninfo: str, check_interval: timedelta
) -> AsyncIterator[Node]:
    """Services on the test database with a LISTEN connection of their own."""
    waker = PostgresEventWaker(pg_conninfo, check_interval=check_interval)
    await waker.start()
    try:
        services = _services(PostgresUnitOfWorkFactory(pg_pool, waker=waker))
        yield Node(services=services, world=await build_demo_world(services))
    finally:
        await waker.aclose()


@pytest.fixture
async def memory_node() -> Node:
    """Services on a fresh memory store."""
    services = _services(MemoryUnitOfWorkFactory())
    return Node(services=services, world=await build_demo_world(services))


@pytest.fixture(params=["memory", "postgres"])
def node(request: pytest.FixtureRequest) -> Node:
    name = "pg_node" if request.param == "postgres" else "memory_node"
    found: Node = request.getfixturevalue(name)
    return found


def _listeners(services: Services) -> int:
    waker = services.live.waker
    assert isinstance(waker, LocalWaker | PostgresEventWaker)
    return waker.listeners


async def _until_listening(services: Services, count: int) -> None:
    """Yield to the loop until `count` readers listen (no time passes; bounded)."""
    for _ in range(count * 10):
        await asyncio.sleep(0)
    assert _listeners(services) == count


async def test_a_long_poll_is_woken_by_a_commit(node: Node) -> None:
    sam = node.world.principal("sam")
    end = await node.end_of_feed("sam")
    waiting = asyncio.create_task(
        node.services.live.wait_events(sam, after=end, wait=LONG_WAIT_SECONDS)
    )
    await _until_listening(node.services, 1)
    await node.post("alex", "allgemein", "wake-1")
    page = await asyncio.wait_for(waiting, BOUND_SECONDS)
    assert page.events[0].type is EventType.MESSAGE_CREATED
    assert page.next_after == page.events[-1].seq


async def test_an_agent_stream_is_woken_by_its_invocation_with_a_fresh_token(node: Node) -> None:
    lotse = node.world.principal("lotse")
    stream = await node.services.live.open_agent_events(lotse)
    async with stream:
        reading = asyncio.create_task(anext(stream))
        await _until_listening(node.services, 1)
        await node.post("alex", "eskalation", "wake-2", mention="lotse")
        page = await asyncio.wait_for(reading, BOUND_SECONDS)
    assert isinstance(page, AgentEventPage)
    assert [d.event.type for d in page.deliveries] == [EventType.AGENT_INVOCATION]
    assert page.deliveries[0].invocation_token
    # The page route delivers the same event again, with another token.
    again = await node.services.runs.poll(lotse, after=0)
    assert again.deliveries[0].event.seq == page.deliveries[0].event.seq
    assert again.deliveries[0].invocation_token != page.deliveries[0].invocation_token


async def test_a_stream_reader_never_gets_an_event_of_a_thread_it_may_not_open(
    node: Node,
) -> None:
    sam = node.world.principal("sam")
    stream = await node.services.live.open_events(sam, after=await node.end_of_feed("sam"))
    async with stream:
        reading = asyncio.create_task(anext(stream))
        await _until_listening(node.services, 1)
        await node.post("alex", "eskalation", "hidden-1")  # Sam may not read Eskalation
        await node.post("alex", "allgemein", "shown-1")
        page = await asyncio.wait_for(reading, BOUND_SECONDS)
    assert page is not HEARTBEAT
    assert isinstance(page, EventPage)
    allgemein = node.world.channels["allgemein"].id
    assert page.events
    assert {event.channel_id for event in page.events} == {allgemein}


# -- PostgreSQL only -----------------------------------------------------------------------


@pytest.fixture
async def two_nodes(
    pg_pool: AsyncConnectionPool[Conn], pg_conninfo: str
) -> AsyncIterator[tuple[Node, Node, PostgresEventWaker]]:
    """Two "processes" on one database: each its own pool, services and LISTEN connection."""
    waker_a = PostgresEventWaker(pg_conninfo, check_interval=CHECK_INTERVAL)
    waker_b = PostgresEventWaker(pg_conninfo, check_interval=CHECK_INTERVAL)
    await waker_a.start()
    await waker_b.start()
    other_pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
        pg_conninfo, min_size=1, max_size=4, open=False, configure=_autocommit_off
    )
    await other_pool.open(wait=True)
    try:
        a = _services(PostgresUnitOfWorkFactory(pg_pool, waker=waker_a))
        world = await build_demo_world(a)
        b = _services(PostgresUnitOfWorkFactory(other_pool, waker=waker_b))
        yield Node(services=a, world=world), Node(services=b, world=world), waker_b
    finally:
        await waker_a.aclose()
        await waker_b.aclose()
        await other_pool.close()


async def _autocommit_off(conn: Conn) -> None:
    await conn.set_autocommit(False)


async def test_a_commit_through_one_process_wakes_a_reader_of_the_other(
    two_nodes: tuple[Node, Node, PostgresEventWaker],
) -> None:
    a, b, _ = two_nodes
    sam = b.world.principal("sam")
    waiting = asyncio.create_task(
        b.services.live.wait_events(sam, after=await b.end_of_feed("sam"), wait=LONG_WAIT_SECONDS)
    )
    await _until_listening(b.services, 1)
    await a.post("alex", "allgemein", "across-1")
    page = await asyncio.wait_for(waiting, BOUND_SECONDS)
    assert page.events[0].type is EventType.MESSAGE_CREATED


async def test_the_watch_names_feeds_only_never_content_or_tokens(
    pg_node: Node, pg_conninfo: str
) -> None:
    async with await psycopg.AsyncConnection.connect(pg_conninfo, autocommit=True) as conn:
        before = await q.read_readable_top(conn) or 0
        await pg_node.post("alex", "eskalation", "notify-1", mention="lotse")
        look = await q.read_readable_since(conn, after_seq=before, max_events=WATCH_BATCH)
        cur = await conn.execute("SELECT max(seq) FROM events")
        row = await cur.fetchone()
    assert row is not None
    assert look is not None
    assert look.top_seq == row[0]
    assert sorted(look.feeds.split()) == sorted(["*", str(pg_node.world.principal("lotse").id)])
    assert SECRET not in look.feeds


async def test_an_event_held_back_by_an_older_transaction_wakes_its_reader_when_it_ends(
    pg_node: Node, pg_conninfo: str
) -> None:
    waker = pg_node.services.live.waker
    assert isinstance(waker, PostgresEventWaker)
    sam = pg_node.world.principal("sam")
    waiting = asyncio.create_task(
        pg_node.services.live.wait_events(
            sam, after=await pg_node.end_of_feed("sam"), wait=LONG_WAIT_SECONDS
        )
    )
    await _until_listening(pg_node.services, 1)
    async with await psycopg.AsyncConnection.connect(pg_conninfo) as older:
        # An unrelated transaction that holds an xid and appends nothing.
        await older.execute("SELECT pg_current_xact_id()")
        await pg_node.post("alex", "allgemein", "held-1")
        looks = waker.looks
        async with asyncio.timeout(BOUND_SECONDS):
            for _ in range(LOOK_STEPS):
                if waker.looks >= looks + 2:
                    break
                await asyncio.sleep(LOOK_STEP_SECONDS)
        assert waker.looks >= looks + 2
        # Committed, but below no horizon yet: the watch has not woken the reader.
        assert not waiting.done()
        await older.rollback()
    page = await asyncio.wait_for(waiting, BOUND_SECONDS)
    assert EventType.MESSAGE_CREATED in [e.type for e in page.events]


@pytest.mark.parametrize("check_interval", [RECONNECT_INTERVAL])
async def test_a_killed_listening_connection_is_replaced_and_no_event_is_lost(
    pg_node: Node, pg_conninfo: str
) -> None:
    waker = pg_node.services.live.waker
    assert isinstance(waker, PostgresEventWaker)
    assert waker.connections == 1
    sam = pg_node.world.principal("sam")
    waiting = asyncio.create_task(
        pg_node.services.live.wait_events(
            sam, after=await pg_node.end_of_feed("sam"), wait=LONG_WAIT_SECONDS
        )
    )
    await _until_listening(pg_node.services, 1)
    async with await psycopg.AsyncConnection.connect(pg_conninfo, autocommit=True) as admin:
        # With a timeout the call returns once the backend is gone, so no look of the old
        # connection can succeed after it (without one, a busy host let the next looks
        # still wake readers, and the test ended before any reconnect).
        cur = await admin.execute(
            "SELECT pg_terminate_backend(pid, %s) FROM pg_stat_activity"
            " WHERE application_name = %s AND datname = current_database()",
            (int(BOUND_SECONDS * 1000), LISTENER_APPLICATION_NAME),
        )
        assert [row[0] for row in await cur.fetchall()] == [True]
    # Committed while the process does not listen: the loss or the reconnect wakes the reader.
    await pg_node.post("alex", "allgemein", "outage-1")
    page = await asyncio.wait_for(waiting, BOUND_SECONDS)
    assert page.events
    async with asyncio.timeout(BOUND_SECONDS):
        for _ in range(LOOK_STEPS):
            if waker.connections == 2:
                break
            await asyncio.sleep(LOOK_STEP_SECONDS)
    assert waker.connections == 2
    # Later commits wake readers as before, through the new connection.
    waiting = asyncio.create_task(
        pg_node.services.live.wait_events(sam, after=page.next_after, wait=LONG_WAIT_SECONDS)
    )
    await _until_listening(pg_node.services, 1)
    await pg_node.post("alex", "allgemein", "outage-2")
    assert (await asyncio.wait_for(waiting, BOUND_SECONDS)).events
    assert waker.connections == 2
