"""Long polls whose client left end at once (API.md, Live delivery).

Litestar never cancels a handler when its client disconnects. A long poll (``wait`` on
GET /v1/events and GET /v1/agent/events) must still stop waiting and reading as soon as
its client is gone: otherwise it holds a wake-up listener for its whole wait, reads the
feed on every commit and, on the agent feed, delivers an invocation to nobody (the
agent's next poll would get it marked redelivered).

The exchanges are raw ASGI calls on the test's loop, whose receive channel gives the
empty request of a GET and then nothing until the test lets the client leave
(``http.disconnect``). The clock is the fixtures' `FakeClock`; every wait for something
that must happen at once is bounded by `BOUND_SECONDS`, far below the polls' own wait
(``stream.max_wait_seconds``), so an orphaned poll fails the bound instead of sleeping.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlencode

import attrs
import pytest

from tests.support.asgi import get_scope, local_waker, until
from tests.support.http import ContractClient, bearer_of
from tests.support.scenario import main_thread
from turnkeeper.adapters.http.app import create_app
from turnkeeper.adapters.http.correlation import CorrelatedApp
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld

#: Bound of a wait for something that must happen at once.
BOUND_SECONDS = 5.0
SHARED_FEED = "/v1/events"
AGENT_FEED = "/v1/agent/events"
#: The feeds and a reader of each in the demo world.
FEEDS = [(SHARED_FEED, "sam"), (AGENT_FEED, "lotse")]


@pytest.fixture
def app(services: Services) -> CorrelatedApp:
    # The bound proves something only while an orphaned poll would outlast it.
    assert services.settings.stream_max_wait.total_seconds() > BOUND_SECONDS
    return create_app(services, services.settings)


def longest_wait(services: Services) -> float:
    """The longest ``wait`` a long poll may ask (``stream.max_wait_seconds``)."""
    return services.settings.stream_max_wait.total_seconds()


@attrs.define
class Client:
    """One GET exchange's client: the empty request, then silence until it leaves.

    Attributes:
        others: messages the channel gives after the request that are no disconnect.
        left: set by the test when the client leaves.
        listening: set once a receive waits after the request (the poll is watched).
        asked: how often the application called receive.
        abandoned: receives the application cancelled while they waited.
        sent: what the application sent.
    """

    others: list[dict[str, Any]] = attrs.Factory(list)
    left: asyncio.Event = attrs.Factory(asyncio.Event)
    listening: asyncio.Event = attrs.Factory(asyncio.Event)
    asked: int = 0
    abandoned: int = 0
    sent: list[dict[str, Any]] = attrs.Factory(list)

    async def receive(self) -> dict[str, Any]:
        self.asked += 1
        if self.asked == 1:
            return {"type": "http.request", "body": b"", "more_body": False}
        if self.others:
            return self.others.pop(0)
        self.listening.set()
        try:
            await self.left.wait()
        except asyncio.CancelledError:
            self.abandoned += 1
            raise
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def status(self) -> int:
        (start,) = [m for m in self.sent if m["type"] == "http.response.start"]
        return int(start["status"])

    def body(self) -> Any:
        chunks = [m.get("body", b"") for m in self.sent if m["type"] == "http.response.body"]
        return json.loads(b"".join(chunks))


def exchange(
    app: CorrelatedApp, client: Client, path: str, token: str, **query: float | int | None
) -> asyncio.Task[None]:
    """Start one GET of a feed (with the given query parameters) as a task of the loop."""
    given = {name: f"{value:g}" for name, value in query.items() if value is not None}
    scope = get_scope(path, token, urlencode(given))
    return asyncio.create_task(app(scope, client.receive, client.send))


def listeners(services: Services) -> int:
    """The wake-up listeners open now (the memory store's in-process waker)."""
    return local_waker(services).listeners


def token_of(world: DemoWorld, handle: str) -> str:
    return (world.people.get(handle) or world.agents[handle]).token


async def trigger(client: ContractClient, world: DemoWorld, cid: str) -> None:
    """Alex asks for help in Support/Allgemein: Lotse, its operator, gets an invocation."""
    answer = await client.post(
        f"/v1/threads/{main_thread(world, 'allgemein')}/messages",
        json={"client_msg_id": cid, "content": "can someone help?"},
        headers=bearer_of(world, "alex"),
    )
    assert answer.status_code == 201, answer.text


async def test_a_long_poll_whose_client_left_ends_at_once_and_frees_its_listener(
    services: Services, world: DemoWorld, app: CorrelatedApp
) -> None:
    before = asyncio.all_tasks()
    client = Client()
    poll = exchange(app, client, SHARED_FEED, token_of(world, "sam"), wait=longest_wait(services))
    await until(lambda: listeners(services) == 1, BOUND_SECONDS)  # the poll waits for an event

    client.left.set()
    await asyncio.wait_for(poll, BOUND_SECONDS)

    assert listeners(services) == 0
    # No task of the exchange is left (tasks of earlier tests may end meanwhile).
    assert asyncio.all_tasks() - before == set()


async def test_an_invocation_after_the_client_left_is_not_delivered_to_the_orphan(
    services: Services, world: DemoWorld, app: CorrelatedApp, client: ContractClient
) -> None:
    lotse = Client()
    poll = exchange(app, lotse, AGENT_FEED, token_of(world, "lotse"), wait=longest_wait(services))
    await until(lambda: listeners(services) == 1, BOUND_SECONDS)
    lotse.left.set()
    await asyncio.wait_for(poll, BOUND_SECONDS)

    await trigger(client, world, "after-leaving")

    answer = await client.get(AGENT_FEED, headers=bearer_of(world, "lotse"))
    assert answer.status_code == 200
    (invocation,) = [e for e in answer.json()["events"] if e["type"] == "agent.invocation"]
    assert not invocation.get("redelivered", False)


@pytest.mark.parametrize(("path", "reader"), FEEDS)
async def test_a_long_poll_whose_client_stays_answers_the_event_and_stops_watching(
    services: Services,
    world: DemoWorld,
    app: CorrelatedApp,
    client: ContractClient,
    path: str,
    reader: str,
) -> None:
    # A message that is no disconnect is skipped: the client is still there.
    staying = Client(others=[{"type": "http.request", "body": b"", "more_body": False}])
    start = await client.get(path, headers=bearer_of(world, reader))
    cursor = start.json()["next_after"]
    before = asyncio.all_tasks()
    poll = exchange(
        app, staying, path, token_of(world, reader), after=cursor, wait=longest_wait(services)
    )
    await asyncio.wait_for(staying.listening.wait(), BOUND_SECONDS)
    await until(lambda: listeners(services) == 1, BOUND_SECONDS)

    await trigger(client, world, "while-waiting")
    await asyncio.wait_for(poll, BOUND_SECONDS)

    assert staying.status() == 200
    events = staying.body()["events"]
    assert events
    assert all(e["seq"] > cursor for e in events)
    assert (staying.abandoned, listeners(services)) == (1, 0)
    # No task of the exchange is left (tasks of earlier tests may end meanwhile).
    assert asyncio.all_tasks() - before == set()


@pytest.mark.parametrize(("path", "reader"), FEEDS)
async def test_only_a_long_poll_watches_its_client(
    services: Services,
    world: DemoWorld,
    app: CorrelatedApp,
    client: ContractClient,
    path: str,
    reader: str,
) -> None:
    # Every request below answers at once: an event is readable (Lotse's invocation is
    # delivered again until acknowledged).
    await trigger(client, world, "readable")
    token = token_of(world, reader)
    asked = []
    for wait in (None, 0.0, longest_wait(services)):
        reading = Client()
        await asyncio.wait_for(exchange(app, reading, path, token, wait=wait), BOUND_SECONDS)
        assert reading.status() == 200
        assert reading.body()["events"]
        asked.append(reading.asked > 0)

    # A plain page never starts the watcher; a long poll does (and ends it).
    assert asked == [False, False, True]
