"""Database faults: a frozen, a killed and a slow PostgreSQL never hang a request.

The application runs in-process over a PostgreSQL of its own (`support_faults`), with a
request timeout, a readiness timeout and a reconnection bound of one second:

- frozen (SIGSTOP of every server process): every request, also more of them than the
  pool has connections, answers 503 problem+json ``unavailable`` with ``Retry-After``
  within ``database.request_timeout``, and /readyz 503 within
  ``database.readiness_timeout``; after SIGCONT the server serves again, a post that got
  a 503 is settled by its retry with the same client id, and every invariant holds;
- killed (SIGKILL) and restarted after an outage: every answer during the outage is such
  a 503 within the bound (never a 500, never the pool's old 30 s wait), and the first
  request after the restart that succeeds comes within ``database.reconnect_max_wait``
  (the pool's doubling backoff used to wait up to a minute);
- down: once the requests of an outage have answered 503, the pool gauge counts none of
  them as waiting for a connection (psycopg_pool's own count kept them until a connection
  came back);
- slow: a statement that waits on a row lock (the wait is observed in pg_stat_activity)
  answers the same 503 within the bound, and a unit whose statement runs past the
  bound fails as `StoreUnavailable` while the pool goes on serving (shared server).

Timing bounds add `SLACK_SECONDS` for a loaded machine; each test takes well under a
minute.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import httpx
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.reliability.support_faults import FaultyPostgres, faulty_postgres
from tests.reliability.support_server import run_cli, server_env
from turnkeeper.adapters.http import create_app
from turnkeeper.adapters.postgres.invariants import check_database
from turnkeeper.adapters.postgres.migrations import migrate
from turnkeeper.adapters.postgres.pool import PoolPolicy
from turnkeeper.adapters.postgres.uow import (
    PostgresUnitOfWork,
    PostgresUnitOfWorkFactory,
    create_pool,
)
from turnkeeper.adapters.wiring import postgres_backend
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.errors import StoreUnavailable
from turnkeeper.application.settings import Settings

#: One second for every bound, so that the tests are short.
SETTINGS = Settings(
    request_timeout=timedelta(seconds=1),
    reconnect_max_wait=timedelta(seconds=1),
    readiness_timeout=timedelta(seconds=1),
    pool_min_size=2,
    pool_max_size=4,
    rl_message_burst=100000,
)
#: What the bounds may be exceeded by on a loaded machine (scheduling, not waiting).
SLACK_SECONDS = 1.0
#: Requests of one wave: more than the pool has connections, so some wait for one.
WAVE = 8
#: Seconds the killed server stays down (the fault simulated: long enough that the
#: pool's old doubling backoff would pause about seven seconds before its next attempt).
OUTAGE_SECONDS = 8.0
#: Seconds between two requests of the prober during an outage.
PROBE_SECONDS = 0.1
#: Seconds the server may take to serve again after the database is back, at most.
RECOVERY_DEADLINE_SECONDS = 20.0
KEY = b"turnkeeper-faults-signing-key-32"


@attrs.frozen
class Served:
    """The application over the faulty server, its world and a client."""

    client: httpx.AsyncClient
    world: DemoWorld
    conninfo: str

    def headers(self, handle: str) -> dict[str, str]:
        found = self.world.people.get(handle) or self.world.agents[handle]
        return {"Authorization": f"Bearer {found.token}"}

    def thread(self) -> str:
        thread_id = self.world.channels["allgemein"].main_thread_id
        assert thread_id is not None
        return str(thread_id)


@asynccontextmanager
async def served(pg: FaultyPostgres) -> AsyncIterator[Served]:
    conninfo = pg.uri()
    await migrate(conninfo)
    async with postgres_backend(conninfo, SETTINGS, KEY) as backend:
        world = await build_demo_world(backend.services)
        async with asgi_client(create_app(backend.services, SETTINGS, backend.readiness)) as client:
            yield Served(client=client, world=world, conninfo=conninfo)


def asgi_client(app: Any) -> httpx.AsyncClient:
    # Litestar's AsyncTestClient runs the application in a thread of its own and blocks
    # this event loop for each request, which would also stop the pool's tasks here.
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


@attrs.frozen
class Answer:
    """One request's answer and how long it took."""

    label: str
    seconds: float
    status: int
    code: str | None
    retry_after: str | None


async def timed(
    app: Served, label: str, method: str, path: str, body: object | None = None
) -> Answer:
    start = time.monotonic()
    response = await app.client.request(method, path, json=body, headers=app.headers("alex"))
    seconds = time.monotonic() - start
    code = None
    if response.headers.get("content-type", "").startswith("application/problem+json"):
        code = response.json()["code"]
    return Answer(label, seconds, response.status_code, code, response.headers.get("retry-after"))


def wave(app: Served, client_id: str) -> list[Any]:
    thread = app.thread()
    post = {"client_msg_id": client_id, "content": "Alex writes while the database sleeps"}
    requests = [
        ("post", "POST", f"/v1/threads/{thread}/messages", post),
        ("thread", "GET", f"/v1/threads/{thread}", None),
        ("history", "GET", f"/v1/threads/{thread}/messages", None),
        ("events", "GET", "/v1/events", None),
    ]
    return [timed(app, *requests[i % len(requests)]) for i in range(WAVE)]


def assert_unavailable(answer: Answer, bound: float) -> None:
    assert (answer.status, answer.code) == (503, "unavailable"), answer
    assert answer.retry_after == str(int(SETTINGS.reconnect_max_wait.total_seconds())), answer
    assert answer.seconds <= bound + SLACK_SECONDS, answer


async def until_served(app: Served) -> float:
    """Seconds until a request that needs the database succeeds (bounded)."""
    start = time.monotonic()
    while time.monotonic() - start < RECOVERY_DEADLINE_SECONDS:
        answer = await timed(app, "probe", "GET", f"/v1/threads/{app.thread()}")
        if answer.status == 200:
            return time.monotonic() - start
        assert answer.status == 503, answer
        await asyncio.sleep(PROBE_SECONDS)
    raise AssertionError(f"not served again within {RECOVERY_DEADLINE_SECONDS}s")


async def test_a_frozen_database_answers_503_within_the_request_timeout() -> None:
    with faulty_postgres() as pg:
        async with served(pg) as app:
            warm = await timed(app, "warm", "GET", f"/v1/threads/{app.thread()}")
            assert warm.status == 200
            pg.freeze()
            try:
                # Two waves: the first finds pooled connections to the frozen server,
                # the second finds the pool trying to reconnect to it.
                for round_ in range(2):
                    answers = await asyncio.gather(
                        *wave(app, f"frozen-{round_}"), timed(app, "ready", "GET", "/readyz")
                    )
                    for answer in answers:
                        bound = SETTINGS.readiness_timeout.total_seconds()
                        if answer.label != "ready":
                            bound = SETTINGS.request_timeout.total_seconds()
                        assert_unavailable(answer, bound)
            finally:
                pg.thaw()
            assert (
                await until_served(app)
                <= SETTINGS.reconnect_max_wait.total_seconds() + SLACK_SECONDS
            )
            ready = await timed(app, "ready", "GET", "/readyz")
            assert ready.status == 200
            # A post that got a 503 may or may not be stored: its retry settles it.
            for round_ in range(2):
                retry = await timed(app, "post", *_post(app, f"frozen-{round_}"))
                assert retry.status in (200, 201), retry
        assert await check_database(pg.uri()) == []


def _post(app: Served, client_id: str) -> tuple[str, str, dict[str, str]]:
    body = {"client_msg_id": client_id, "content": "Alex writes while the database sleeps"}
    return "POST", f"/v1/threads/{app.thread()}/messages", body


async def _probe(app: Served, answers: list[Answer], stop: asyncio.Event) -> None:
    thread = app.thread()
    while not stop.is_set():
        burst = [timed(app, "probe", "GET", f"/v1/threads/{thread}") for _ in range(WAVE)]
        answers.extend(await asyncio.gather(*burst))
        await asyncio.sleep(PROBE_SECONDS)


@pytest.mark.slow
async def test_a_killed_database_answers_503_and_is_served_again_soon_after_its_restart() -> None:
    with faulty_postgres() as pg:
        async with served(pg) as app:
            warm = await timed(app, "warm", "GET", f"/v1/threads/{app.thread()}")
            assert warm.status == 200
            pg.kill()
            answers: list[Answer] = []
            stop = asyncio.Event()
            prober = asyncio.create_task(_probe(app, answers, stop))
            try:
                await asyncio.sleep(OUTAGE_SECONDS)  # the length of the outage, not a wait
                outage = list(answers)
                await asyncio.to_thread(pg.restart)
            finally:
                stop.set()
                await prober
            recovery = await until_served(app)
            assert outage, "the prober sent nothing during the outage"
            for answer in outage:
                assert_unavailable(answer, SETTINGS.request_timeout.total_seconds())
            assert recovery <= SETTINGS.reconnect_max_wait.total_seconds() + SLACK_SECONDS, recovery
            ready = await timed(app, "ready", "GET", "/readyz")
            assert ready.status == 200
        assert await check_database(pg.uri()) == []


async def _pool_gauge(app: Served, state: str) -> float:
    """The ``turnkeeper_db_pool_connections`` sample of a state, scraped from /metrics."""
    answer = await app.client.get("/metrics")
    assert answer.status_code == 200
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            if sample.name == "turnkeeper_db_pool_connections" and sample.labels == {
                "state": state
            }:
                return sample.value
    raise AssertionError(f"no pool sample of state {state}")


async def test_requests_that_answered_503_are_no_longer_counted_as_waiting() -> None:
    with faulty_postgres() as pg:
        async with served(pg) as app:
            warm = await timed(app, "warm", "GET", "/v1/me")
            assert warm.status == 200
            pg.kill()
            # More requests than the pool has connections, twice: most of them wait for a
            # connection that never comes and time out.
            for _ in range(2):
                answers = await asyncio.gather(
                    *(timed(app, "me", "GET", "/v1/me") for _ in range(WAVE))
                )
                for answer in answers:
                    assert_unavailable(answer, SETTINGS.request_timeout.total_seconds())
            assert await _pool_gauge(app, "waiting") == 0


async def test_a_statement_waiting_on_a_lock_is_cancelled_by_the_request_timeout(
    pg_conninfo: str,
) -> None:
    async with postgres_backend(pg_conninfo, SETTINGS, KEY) as backend:
        world = await build_demo_world(backend.services)
        app = Served(
            client=asgi_client(create_app(backend.services, SETTINGS, backend.readiness)),
            world=world,
            conninfo=pg_conninfo,
        )
        async with app.client, await psycopg.AsyncConnection.connect(pg_conninfo) as holder:
            await holder.execute("SELECT id FROM threads WHERE id = %s FOR UPDATE", (app.thread(),))
            post = asyncio.create_task(timed(app, "post", *_post(app, "locked")))
            await _until_waiting_on_a_lock(pg_conninfo)
            answer = await post
            await holder.rollback()
            assert_unavailable(answer, SETTINGS.request_timeout.total_seconds())
            retry = await timed(app, "post", *_post(app, "locked"))
            assert retry.status == 201, retry


async def _until_waiting_on_a_lock(conninfo: str) -> None:
    deadline = time.monotonic() + RECOVERY_DEADLINE_SECONDS
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        while time.monotonic() < deadline:
            cursor = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            row = await cursor.fetchone()
            if row is not None and row[0] > 0:
                return
            await asyncio.sleep(PROBE_SECONDS / 10)
    raise AssertionError("the post never waited on the row lock")


async def test_a_unit_running_past_the_request_timeout_is_an_unavailable_store(
    pg_conninfo: str,
) -> None:
    policy = PoolPolicy.from_settings(SETTINGS)
    pool = await create_pool(pg_conninfo, min_size=1, max_size=1, policy=policy)
    try:
        factory = PostgresUnitOfWorkFactory(pool, policy=policy)
        start = time.monotonic()

        async def sleep_in_a_unit() -> None:
            async with factory() as uow:
                assert isinstance(uow, PostgresUnitOfWork)
                await uow.connection.execute("SELECT pg_sleep(30)")

        with pytest.raises(StoreUnavailable) as raised:
            await sleep_in_a_unit()
        assert time.monotonic() - start <= SETTINGS.request_timeout.total_seconds() + SLACK_SECONDS
        assert raised.value.retry_after == SETTINGS.reconnect_max_wait.total_seconds()
        # The pool replaced the connection: the next unit works.
        async with factory.read_only() as uow:
            assert isinstance(uow, PostgresUnitOfWork)
            cursor = await uow.connection.execute("SELECT 1")
            assert await cursor.fetchone() == (1,)
    finally:
        await pool.close()


async def test_check_and_migrate_end_on_a_frozen_database(tmp_path: Path) -> None:
    # An audit: `turnkeeper check` waited for ever on a frozen database (no bound on its
    # connection), where a database that is down ends it at once with one line.
    with faulty_postgres() as pg:
        await migrate(pg.uri())
        env = server_env(pg.uri(), tmp_path, DATABASE__REQUEST_TIMEOUT="1")
        pg.freeze()
        try:
            for command in ("check", "migrate"):
                # run_cli raises TimeoutExpired for a command that does not end.
                done = await asyncio.to_thread(run_cli, env, command)
                assert done.returncode == 1, (command, done.stderr)
                (line,) = done.stderr.strip().splitlines()
                assert line.startswith("turnkeeper: "), line
                assert "Traceback" not in done.stderr
        finally:
            pg.thaw()
