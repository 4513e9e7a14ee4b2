"""What the console's browser tests share: a served world, its people and agent over HTTP,
a proxy that can cut connections, and the page's sign-in and thread steps."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import httpx

from tests.live_server import served_app
from tests.support.fakes import TEST_KEY, FakeClock, SequentialIds
from turnkeeper.adapters.memory import MemoryUnitOfWorkFactory
from turnkeeper.adapters.tokens import JwtSigner
from turnkeeper.application.bootstrap import Services, build_services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.settings import Settings

if TYPE_CHECKING:
    from playwright.async_api import Page

#: The bound within which the page must show a change made over HTTP (issue 21).
LIVE_MS = 1000
#: The bound of steps that include a reconnect after a cut connection.
RECONNECT_MS = 15000
#: Where the screenshots of a run go (gitignored; kept by CI as artefacts).
SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "console-screenshots"
#: The wide and the phone viewport.
WIDE = {"width": 1400, "height": 1000}
PHONE = {"width": 375, "height": 812}


def bearer(token: str) -> dict[str, str]:
    """The Authorization header of a token."""
    return {"Authorization": f"Bearer {token}"}


@attrs.define
class ServedWorld:
    """The demo world behind a served application, with HTTP calls as its principals."""

    url: str
    services: Services
    world: DemoWorld
    http: httpx.AsyncClient

    def token(self, handle: str) -> str:
        """The API token of a person or agent of the demo world (or ``robin``, the owner)."""
        found = self.world.people.get(handle) or self.world.agents.get(handle)
        assert found is not None, handle
        return found.token

    def id_of(self, handle: str) -> str:
        """The principal id of a handle."""
        return str(self.world.principal(handle).id)

    def main_thread(self, channel: str) -> str:
        """The main thread of a text channel."""
        thread_id = self.world.channels[channel].main_thread_id
        assert thread_id is not None
        return str(thread_id)

    async def call(
        self, handle: str, method: str, path: str, body: dict[str, Any] | None = None
    ) -> Any:
        """One API call as a principal; the answer's JSON (None for 204).

        Raises:
            AssertionError: on an answer other than 2xx.
        """
        answer = await self.http.request(
            method, path, json=body, headers=bearer(self.token(handle))
        )
        assert answer.is_success, (method, path, answer.status_code, answer.text)
        return None if answer.status_code == 204 else answer.json()

    async def post(self, handle: str, thread_id: str, content: str, **extra: Any) -> Any:
        """A message by a principal over HTTP."""
        body = {"client_msg_id": str(uuid.uuid4()), "content": content, **extra}
        return await self.call(handle, "POST", f"/v1/threads/{thread_id}/messages", body)

    async def invocation(self, agent: str, run_id: str) -> str:
        """The invocation token of the agent's delivery of a run (its feed, over HTTP)."""
        page = await self.call(agent, "GET", "/v1/agent/events?after=0")
        for event in page["events"]:
            if event["type"] == "agent.invocation" and event["payload"]["run_id"] == run_id:
                return str(event["invocation_token"])
        raise AssertionError(f"no invocation of {run_id} for {agent}")

    async def agent_send(self, agent: str, thread_id: str, run_id: str, content: str) -> Any:
        """The agent's answer through the freshness gate, having seen the whole thread."""
        thread = await self.call(agent, "GET", f"/v1/threads/{thread_id}")
        body = {
            "target": thread_id,
            "content": content,
            "client_message_id": str(uuid.uuid4()),
            "run_id": run_id,
            "freshness": {
                "target_key": thread["target_key"],
                "seen_up_to_seq": thread["latest_seq"],
            },
        }
        answer = await self.call(agent, "POST", "/v1/agent/send", body)
        assert answer["state"] == "sent", answer
        return answer

    async def stale_send(self, agent: str, thread_id: str, seen: int, content: str) -> Any:
        """The agent's answer through the freshness gate from an old frontier: held."""
        body = {
            "target": thread_id,
            "content": content,
            "client_message_id": str(uuid.uuid4()),
            "freshness": {"target_key": f"thread:{thread_id}", "seen_up_to_seq": seen},
        }
        answer = await self.call(agent, "POST", "/v1/agent/send", body)
        assert answer["state"] == "held", answer
        return answer


@contextlib.asynccontextmanager
async def served_world(settings: Settings | None = None) -> AsyncIterator[ServedWorld]:
    """A memory store with the demo world, served by uvicorn on a loopback port."""
    services = build_services(
        MemoryUnitOfWorkFactory(),
        settings or Settings(),
        FakeClock(),
        SequentialIds(),
        JwtSigner(TEST_KEY),
    )
    world = await build_demo_world(services)
    async with served_app(services) as app, httpx.AsyncClient(base_url=app.url) as http:
        yield ServedWorld(url=app.url, services=services, world=world, http=http)


class CuttingProxy:
    """A TCP proxy on a loopback port that can cut every connection it carries.

    While `refusing`, it closes each new connection at once, so the page's reconnects
    fail until the test lets them through again.

    Args:
        target_port: the served application's port.
    """

    def __init__(self, target_port: int) -> None:
        self._target_port = target_port
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.refusing = False
        self.port = 0

    async def __aenter__(self) -> CuttingProxy:
        self._server = await asyncio.start_server(self._carry, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cut()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    def cut(self) -> None:
        """Reset every carried connection (both sides see the connection drop)."""
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            writer.transport.abort()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._target_port)
        self._writers.update({writer, up_writer})
        await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        self._writers.difference_update({writer, up_writer})


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    sink.transport.abort()


async def sign_in(page: Page, url: str, token: str) -> None:
    """Open the console and sign in with the keyboard; wait until the stream is live."""
    from playwright.async_api import expect

    await page.goto(f"{url}/console")
    await page.locator("#token-input").focus()
    await page.keyboard.type(token)
    await page.keyboard.press("Enter")
    await expect(page.locator("#live-status")).to_have_attribute("data-state", "live")


async def open_thread(page: Page, thread_id: str) -> None:
    """Open a thread by its id with the form of the thread list."""
    from playwright.async_api import expect

    await page.locator("#open-thread-input").fill(thread_id)
    await page.locator("#open-thread-input").press("Enter")
    await expect(page.locator("#thread-view")).to_be_visible()
    await expect(page.locator("#thread-meta [data-thread-state]")).to_be_visible()


def message(page: Page, text: str) -> Any:
    """The timeline entry of the message whose content has this text."""
    return page.locator("#timeline > li").filter(has=page.locator(".content", has_text=text))


def run_box(page: Page, run_id: str) -> Any:
    """The live box of a run."""
    return page.locator(f'section.run[data-run-id="{run_id}"]')
