"""A long read answers only while its token lives (ADR 0016: no cache window).

A stream or a long-poll resolves its bearer token when it opens. Once the token is
revoked, every server process answers 401 for it: an open stream delivers nothing more
and ends at its next read or heartbeat, and a waiting long-poll answers 401 instead of
the events that woke it. The exchanges are driven as raw ASGI calls over the memory
store, the client staying connected until the test lets it go.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from tests.support.asgi import BOUND_SECONDS, get_scope, local_waker, until
from tests.support.scenario import main_thread
from turnkeeper.adapters.http.app import create_app
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.settings import Settings
from turnkeeper.domain.messaging import MessageDraft
from turnkeeper.domain.world import Principal

#: The shortest heartbeat the configuration allows (whole seconds).
HEARTBEAT_SECONDS = 1
MAX_WAIT_SECONDS = 30


@pytest.fixture
def settings() -> Settings:
    return Settings(
        stream_heartbeat=timedelta(seconds=HEARTBEAT_SECONDS),
        stream_max_wait=timedelta(seconds=MAX_WAIT_SECONDS),
    )


class Exchange:
    """One raw ASGI exchange whose client stays until `leave` or the answer's end."""

    def __init__(self, app: Any, path: str, token: str, query: str = "") -> None:
        self.status: int | None = None
        self.body = b""
        self.delivered = asyncio.Event()
        self._gone = asyncio.Event()
        self._asked = False
        scope = get_scope(path, token, query)
        self.task = asyncio.create_task(app(scope, self._receive, self._send))

    async def _receive(self) -> dict[str, Any]:
        if not self._asked:
            self._asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        # As uvicorn does, the channel says disconnect once the answer is complete too.
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            return
        self.body += message.get("body", b"")
        if b"event:" in message.get("body", b""):
            self.delivered.set()
        if not message.get("more_body", False):
            self._gone.set()

    def events(self) -> list[str]:
        """The ``event:`` lines of the stream so far."""
        return [line for line in self.body.decode().splitlines() if line.startswith("event:")]

    async def ended(self) -> None:
        """Wait, bounded, until the server ended the answer by itself."""
        await asyncio.wait_for(asyncio.shield(self.task), BOUND_SECONDS)

    async def leave(self) -> None:
        """The client goes; the exchange ends."""
        self._gone.set()
        await asyncio.wait_for(self.task, BOUND_SECONDS)


async def bounded(event: asyncio.Event) -> None:
    """Wait, bounded, for `event`."""
    await asyncio.wait_for(event.wait(), BOUND_SECONDS)


def opened(services: Services) -> asyncio.Event:
    """Set when the next stream opens."""
    event = asyncio.Event()
    services.live.stream_count_hooks.append(lambda count: event.set() if count else None)
    return event


async def feed_end(services: Services, reader: Principal) -> int:
    """The shared feed's cursor after everything `reader` may read now."""
    cursor = 0
    while True:
        page = await services.conversation.list_events(reader, after=cursor)
        if not page.events:
            return cursor
        cursor = page.next_after


async def second_token(services: Services, world: DemoWorld, handle: str) -> tuple[str, Any]:
    """A new token of a principal of the demo world: its secret, and a revoke of it."""
    owner = world.owner.principal
    principal = world.principal(handle)
    issued = await services.tokens.issue_token(owner, principal.id, label="revoked in a test")

    async def revoke() -> None:
        await services.tokens.revoke_token(owner, principal.id, issued.token.id)

    return issued.secret, revoke


async def mention_lotse(services: Services, world: DemoWorld, key: str) -> None:
    """Alex asks Lotse in Allgemein: a shared message event and an invocation of Lotse."""
    lotse = world.principal("lotse")
    await services.conversation.create_message(
        world.principal("alex"),
        main_thread(world, "allgemein"),
        MessageDraft(client_msg_id=key, content="@lotse the report, please", mentions=(lotse.id,)),
    )


@pytest.mark.parametrize(
    ("path", "handle"), [("/v1/events/stream", "sam"), ("/v1/agent/events/stream", "lotse")]
)
async def test_a_stream_of_a_revoked_token_delivers_nothing_more_and_ends(
    services: Services, world: DemoWorld, path: str, handle: str
) -> None:
    secret, revoke = await second_token(services, world, handle)
    app = create_app(services, services.settings)
    query = "" if "agent" in path else f"after={await feed_end(services, world.principal(handle))}"
    started = opened(services)
    stream = Exchange(app, path, secret, query)
    await bounded(started)
    await mention_lotse(services, world, "before")
    await bounded(stream.delivered)
    delivered = len(stream.events())
    await revoke()
    await mention_lotse(services, world, "after")
    await stream.ended()
    assert stream.status == 200
    assert len(stream.events()) == delivered
    assert (services.live.open_streams, local_waker(services).listeners) == (0, 0)


async def test_a_quiet_stream_of_a_revoked_token_ends_at_its_heartbeat(
    services: Services, world: DemoWorld
) -> None:
    secret, revoke = await second_token(services, world, "sam")
    app = create_app(services, services.settings)
    sam = world.principal("sam")
    started = opened(services)
    stream = Exchange(app, "/v1/events/stream", secret, f"after={await feed_end(services, sam)}")
    await bounded(started)
    await revoke()
    # Nothing is committed that would wake it: the heartbeat finds the token gone.
    await stream.ended()
    assert stream.events() == []
    assert services.live.open_streams == 0


async def test_a_stream_whose_token_lives_goes_on(services: Services, world: DemoWorld) -> None:
    secret, _ = await second_token(services, world, "sam")
    _, revoke_other = await second_token(services, world, "sam")
    app = create_app(services, services.settings)
    sam = world.principal("sam")
    started = opened(services)
    stream = Exchange(app, "/v1/events/stream", secret, f"after={await feed_end(services, sam)}")
    await bounded(started)
    await revoke_other()  # another token of the same person
    await mention_lotse(services, world, "one")
    await bounded(stream.delivered)
    assert not stream.task.done()
    await stream.leave()


async def test_a_waiting_agent_long_poll_of_a_revoked_token_answers_401(
    services: Services, world: DemoWorld
) -> None:
    secret, revoke = await second_token(services, world, "lotse")
    app = create_app(services, services.settings)
    poll = Exchange(app, "/v1/agent/events", secret, f"wait={MAX_WAIT_SECONDS}")
    await until(lambda: local_waker(services).listeners == 1)
    await revoke()
    await mention_lotse(services, world, "after")
    await poll.ended()
    assert poll.status == 401
    assert b"invocation_token" not in poll.body
    # The invocation waits for the agent's next poll with a live token, delivered once.
    page = await services.runs.poll(world.principal("lotse"))
    assert [d.redelivered for d in page.deliveries] == [False]


async def test_a_waiting_shared_long_poll_of_a_revoked_token_answers_401(
    services: Services, world: DemoWorld
) -> None:
    secret, revoke = await second_token(services, world, "sam")
    app = create_app(services, services.settings)
    sam = world.principal("sam")
    query = f"after={await feed_end(services, sam)}&wait={MAX_WAIT_SECONDS}"
    poll = Exchange(app, "/v1/events", secret, query)
    await until(lambda: local_waker(services).listeners == 1)
    await revoke()
    await mention_lotse(services, world, "after")
    await poll.ended()
    assert poll.status == 401
    assert b"message.created" not in poll.body


@pytest.mark.parametrize(("path", "handle"), [("/v1/events", "sam"), ("/v1/agent/events", "lotse")])
async def test_a_quiet_long_poll_of_a_revoked_token_answers_401_at_its_heartbeat(
    services: Services, world: DemoWorld, path: str, handle: str
) -> None:
    # Found by an audit: nothing woke the long-poll, so it read nothing again and
    # answered 200 with an empty page at the end of its wait, its token long revoked.
    secret, revoke = await second_token(services, world, handle)
    app = create_app(services, services.settings)
    cursor = (
        "" if "agent" in path else f"after={await feed_end(services, world.principal(handle))}&"
    )
    poll = Exchange(app, path, secret, f"{cursor}wait={MAX_WAIT_SECONDS}")
    await until(lambda: local_waker(services).listeners == 1)
    await revoke()
    # Nothing is committed that would wake it: the heartbeat finds the token gone.
    await poll.ended()
    assert poll.status == 401
    assert local_waker(services).listeners == 0
