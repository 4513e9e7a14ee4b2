"""``stream.max_per_principal`` holds across server processes (ADR 0040).

Each process of a server keeps its stream places as session advisory locks on a
connection of its own (`PostgresStreamPlaces`); two of them on one database stand for
two worker processes. The same scenarios run on this process's places
(`LocalStreamPlaces`, the memory store). The concurrent takes of two processes race in
PostgreSQL and are repeated; the locks are observed in ``pg_locks``; a process whose
connection is cut gives its places back with it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from tests.support.fakes import TEST_KEY, FakeClock, SequentialIds
from turnkeeper.adapters.memory import MemoryUnitOfWorkFactory
from turnkeeper.adapters.postgres.pool import PoolPolicy
from turnkeeper.adapters.postgres.stream_places import (
    PLACE_BATCH,
    PLACES_APPLICATION_NAME,
    PostgresStreamPlaces,
)
from turnkeeper.adapters.postgres.uow import Conn, PostgresUnitOfWorkFactory
from turnkeeper.adapters.tokens import JwtSigner
from turnkeeper.application.bootstrap import build_services
from turnkeeper.application.demo import build_demo_world
from turnkeeper.application.errors import StoreUnavailable
from turnkeeper.application.settings import Settings
from turnkeeper.application.stream_places import LocalStreamPlaces, Release, StreamPlaces
from turnkeeper.domain.errors import RateLimited

#: The bound of most scenarios (small, so that the races fill it).
LIMIT = 3
#: Rounds of each race.
ROUNDS = 20
#: Polls of ``pg_locks`` while a release reaches the database (each a round trip).
POLLS = 500
POLL_SECONDS = 0.01

_POLICY = PoolPolicy.from_settings(Settings())
#: A database nobody listens for (port 1 is never PostgreSQL's).
UNREACHABLE = "host=127.0.0.1 port=1 dbname=turnkeeper connect_timeout=1"
#: Advisory locks held by places connections, as PostgreSQL shows them.
_HELD = """
SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = %s
  AND a.datname = current_database()
"""

Processes = Callable[[], StreamPlaces]
PgProcesses = Callable[[], PostgresStreamPlaces]


@pytest.fixture
async def pg_processes(pg_conninfo: str) -> AsyncIterator[PgProcesses]:
    """Makes the places of one more process of a server on the test's database.

    Each is closed after the test (closing twice does nothing).
    """
    made: list[PostgresStreamPlaces] = []

    def make() -> PostgresStreamPlaces:
        made.append(PostgresStreamPlaces(pg_conninfo, _POLICY))
        return made[-1]

    try:
        yield make
    finally:
        for places in made:
            await places.aclose()


@pytest.fixture(params=["memory", "postgres"])
def processes(request: pytest.FixtureRequest) -> Processes:
    """Makes the places of one more process of a server (memory: one process only)."""
    if request.param == "memory":
        local = LocalStreamPlaces()
        return lambda: local
    found: Processes = request.getfixturevalue("pg_processes")
    return found


async def _take_all(places: StreamPlaces, principal: uuid.UUID, limit: int) -> list[Release]:
    taken = []
    while (release := await places.take(principal, limit)) is not None:
        taken.append(release)
        assert len(taken) <= limit
    return taken


async def test_a_principal_holds_at_most_the_limit_and_a_release_frees_one(
    processes: Processes,
) -> None:
    first, second = processes(), processes()
    alex, sam = uuid.uuid4(), uuid.uuid4()
    held = await _take_all(first, alex, LIMIT - 1) + [await _must(second.take(alex, LIMIT))]
    assert await first.take(alex, LIMIT) is None
    assert await second.take(alex, LIMIT) is None
    assert len(await _take_all(second, sam, LIMIT)) == LIMIT, "each principal has its own"
    held.pop()()
    held[0]()
    held[0]()  # a second call gives nothing back twice
    for places in (first, second):
        await _given_back(places)
    again = await _take_all(first, alex, LIMIT)
    assert len(again) == 2


async def test_a_larger_limit_is_taken_in_batches(processes: Processes) -> None:
    limit = PLACE_BATCH + 2
    first, second = processes(), processes()
    robin = uuid.uuid4()
    held = await _take_all(first, robin, PLACE_BATCH + 1)
    assert len(held) == PLACE_BATCH + 1
    assert len(await _take_all(second, robin, limit)) == 1
    assert await first.take(robin, limit) is None


@pytest.mark.parametrize("round_", range(ROUNDS))
async def test_concurrent_takes_of_two_processes_never_pass_the_limit(
    pg_conninfo: str, pg_processes: PgProcesses, round_: int
) -> None:
    first, second = pg_processes(), pg_processes()
    alex = uuid.uuid4()
    takes = [places.take(alex, LIMIT) for places in (first, second) for _ in range(LIMIT)]
    results = await asyncio.gather(*takes)
    assert sum(result is not None for result in results) == LIMIT
    assert await _locks_held(pg_conninfo) == LIMIT
    assert first.held + second.held == LIMIT
    await first.aclose()
    await second.aclose()
    # A closed connection's locks go when the server has ended its session.
    await _until(lambda: _locks_held(pg_conninfo), 0)


async def test_a_release_gives_the_lock_back_and_the_last_one_closes_the_connection(
    pg_conninfo: str, pg_processes: PgProcesses
) -> None:
    places = pg_processes()
    sam = uuid.uuid4()
    first, second = await _must(places.take(sam, LIMIT)), await _must(places.take(sam, LIMIT))
    assert await _locks_held(pg_conninfo) == 2
    first()
    await _until(lambda: _locks_held(pg_conninfo), 1)
    second()
    await _until(lambda: _connections(pg_conninfo), 0)
    assert places.held == 0
    assert await _must(places.take(sam, LIMIT)) is not None, "a new connection takes"
    assert await _locks_held(pg_conninfo) == 1


async def test_a_place_released_while_others_are_given_back_goes_back_too(
    pg_conninfo: str, pg_processes: PgProcesses
) -> None:
    places = pg_processes()
    robin = uuid.uuid4()
    first, second = (
        await _must(places.take(robin, LIMIT)),
        await _must(places.take(robin, LIMIT)),
    )
    first()
    # The task that gives the first back runs up to its round trip, and waits there.
    await asyncio.sleep(0)
    second()
    await places.given_back()
    assert await _locks_held(pg_conninfo) == 0
    assert places.held == 0


async def test_a_take_whose_caller_left_runs_to_its_end_and_gives_its_place_back(
    pg_conninfo: str, pg_processes: PgProcesses
) -> None:
    places = pg_processes()
    sam = uuid.uuid4()
    await _must(places.take(sam, LIMIT))  # the connection is open
    leaving = asyncio.create_task(places.take(sam, LIMIT))
    # It runs up to its statement's round trip, and waits there; then its client goes.
    await asyncio.sleep(0)
    leaving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leaving
    await _until(lambda: _locks_held(pg_conninfo), 1)
    await places.given_back()
    assert places.held == 1
    assert len(await _take_all(places, sam, LIMIT)) == LIMIT - 1


async def test_a_cut_connection_gives_its_places_back(
    pg_conninfo: str, pg_processes: PgProcesses
) -> None:
    cut = pg_processes()
    other = pg_processes()
    alex = uuid.uuid4()
    old = await _take_all(cut, alex, LIMIT)
    assert await other.take(alex, LIMIT) is None
    async with await psycopg.AsyncConnection.connect(pg_conninfo, autocommit=True) as admin:
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = %s AND datname = current_database()",
            (PLACES_APPLICATION_NAME,),
        )
    await _until(lambda: _connections(pg_conninfo), 0)
    taken = await _take_all(other, alex, LIMIT)
    assert len(taken) == LIMIT, "the cut process's places came back"
    for release in old:
        release()  # gone with their connection: nothing to give back
    assert await _locks_held(pg_conninfo) == LIMIT


async def test_streams_of_two_server_processes_share_the_bound(
    pg_pool: AsyncConnectionPool[Conn], pg_conninfo: str
) -> None:
    settings = Settings(stream_max_per_principal=LIMIT, stream_heartbeat=timedelta(seconds=60))
    nodes = [
        build_services(
            PostgresUnitOfWorkFactory(pg_pool),
            settings,
            FakeClock(),
            SequentialIds(),
            JwtSigner(TEST_KEY),
        )
        for _ in range(2)
    ]
    world = await build_demo_world(nodes[0])
    sam = world.principal("sam")
    streams = [await nodes[index % 2].live.open_events(sam) for index in range(LIMIT)]
    try:
        for node in nodes:
            with pytest.raises(RateLimited):
                await node.live.open_events(sam)
        await streams.pop().aclose()
        streams.append(await nodes[0].live.open_events(sam))
    finally:
        for stream in streams:
            await stream.aclose()
        for node in nodes:
            places = node.live.places
            assert isinstance(places, PostgresStreamPlaces)
            await places.aclose()


async def test_a_database_out_of_reach_is_a_store_unavailable() -> None:
    places = PostgresStreamPlaces(UNREACHABLE, _POLICY)
    with pytest.raises(StoreUnavailable) as raised:
        await places.take(uuid.uuid4(), LIMIT)
    assert raised.value.retry_after == _POLICY.retry_after
    assert places.held == 0


async def test_memory_services_keep_their_places_in_process() -> None:
    services = build_services(
        MemoryUnitOfWorkFactory(), Settings(), FakeClock(), SequentialIds(), JwtSigner(TEST_KEY)
    )
    assert isinstance(services.live.places, LocalStreamPlaces)


# -- helpers ----------------------------------------------------------------------------


async def _given_back(places: StreamPlaces) -> None:
    """Wait until a process's releases reach the database (a task gives them back)."""
    if isinstance(places, PostgresStreamPlaces):
        await places.given_back()


async def _must(take: Awaitable[Release | None]) -> Release:
    release = await take
    assert release is not None
    return release


async def _count(conninfo: str, query: str) -> int:
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        row = await (await conn.execute(query, (PLACES_APPLICATION_NAME,))).fetchone()
    assert row is not None
    return int(row[0])


async def _locks_held(conninfo: str) -> int:
    return await _count(conninfo, _HELD)


async def _connections(conninfo: str) -> int:
    return await _count(
        conninfo,
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE application_name = %s AND datname = current_database()",
    )


async def _until(read: Callable[[], Awaitable[int]], expected: int) -> None:
    """Poll until `read` gives `expected` (a release reaches the database in a task)."""
    for _ in range(POLLS):
        if await read() == expected:
            return
        await asyncio.sleep(POLL_SECONDS)
    assert await read() == expected
