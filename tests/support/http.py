"""The HTTP application in tests: a client that checks every answer against the published
OpenAPI document, and a fresh HTTP world (memory services, demo world, client)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx
from litestar.testing import AsyncTestClient

from tests.support.fakes import FakeClock
from tests.support.openapi import Spec, assert_matches_openapi, template_for
from tests.support.scenario import main_thread
from tests.support.services import memory_services
from turnkeeper.adapters.http import Readiness, always_ready, create_app
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.settings import Settings
from turnkeeper.domain.events import EventType

#: Every principal of the demo world, by handle.
PRINCIPALS = ("robin", "alex", "sam", "lotse", "texter", "assistent")


def bearer(token: str) -> dict[str, str]:
    """The Authorization header of a token."""
    return {"Authorization": f"Bearer {token}"}


def bearer_of(world: DemoWorld, handle: str) -> dict[str, str]:
    """The Authorization header of a person or agent of the demo world."""
    found = world.people.get(handle) or world.agents[handle]
    return bearer(found.token)


@attrs.frozen
class Exchange:
    """One request and its answer, as the contract checks saw it."""

    method: str
    template: str
    status: int
    body: Any


@attrs.define
class ContractClient:
    """An AsyncTestClient that validates every JSON answer against /openapi.json."""

    http: AsyncTestClient[Any]
    spec: Spec
    exchanges: list[Exchange] = attrs.Factory(list)

    async def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """Send a request; check the answer body against the document when it has one."""
        response = await self.http.request(method, url, **kwargs)
        template = template_for(self.spec, httpx.URL(url).path)
        declared = template is not None and method.lower() in self.spec["paths"][template]
        if template is not None and declared and response.content:
            body = response.json()
            assert_matches_openapi(self.spec, method, template, response.status_code, body)
            self.exchanges.append(Exchange(method, template, response.status_code, body))
        return response

    async def get(self, url: str, **kwargs: Any) -> httpx.Response:
        """GET."""
        return await self.request("GET", url, **kwargs)

    async def post(self, url: str, **kwargs: Any) -> httpx.Response:
        """POST."""
        return await self.request("POST", url, **kwargs)

    async def put(self, url: str, **kwargs: Any) -> httpx.Response:
        """PUT."""
        return await self.request("PUT", url, **kwargs)

    async def delete(self, url: str, **kwargs: Any) -> httpx.Response:
        """DELETE."""
        return await self.request("DELETE", url, **kwargs)


@asynccontextmanager
async def contract_client(
    services: Services, readiness: Readiness = always_ready
) -> AsyncIterator[ContractClient]:
    """A checked client of a new application over the services."""
    app = create_app(services, services.settings, readiness)
    async with AsyncTestClient(app) as http:
        document = _DOCUMENTS.get(services.settings)
        if document is None:
            document = (await http.get("/openapi.json")).content
            _DOCUMENTS[services.settings] = document
        # Decoded for each client: a test may change its copy (schemathesis resolves it).
        yield ContractClient(http=http, spec=json.loads(document))


#: The document of each settings value, fetched once per test process: an application's
#: document depends on its settings only, and its first encoding takes a tenth of a second.
_DOCUMENTS: dict[Settings, bytes] = {}


@attrs.frozen(kw_only=True)
class HttpWorld:
    """Services, the demo world and a contract-checked client over them."""

    services: Services
    world: DemoWorld
    client: ContractClient
    clock: FakeClock

    def headers(self, handle: str) -> dict[str, str]:
        """The bearer header of a principal of the world."""
        return bearer_of(self.world, handle)

    def main_thread(self, channel: str) -> uuid.UUID:
        """The main thread of a text channel."""
        return main_thread(self.world, channel)

    async def trigger(self, channel: str = "allgemein", cid: str = "trigger") -> tuple[str, str]:
        """Alex triggers the operator in a main thread; the operator polls.

        Returns:
            The run id and the invocation token of its delivery.
        """
        answer = await self.client.post(
            f"/v1/threads/{self.main_thread(channel)}/messages",
            json={
                "client_msg_id": cid,
                "content": "can someone help?",
                "mentions": [str(self.world.principal("lotse").id)],
            },
            headers=self.headers("alex"),
        )
        assert answer.status_code == 201, answer.text
        page = await self.services.runs.poll(self.world.principal("lotse"), after=0)
        invocations = [
            d
            for d in page.deliveries
            if d.event.type is EventType.AGENT_INVOCATION
            and d.event.payload["thread_id"] == str(self.main_thread(channel))
        ]
        token = invocations[-1].invocation_token
        assert token is not None
        return str(invocations[-1].event.payload["run_id"]), token

    def stored(self) -> tuple[object, ...]:
        """What the store holds that a refused request must leave unchanged.

        The event log (every event, shared and personal) and the rows that requests
        create or change; audit denials and rate buckets may legitimately move.
        """
        store = self.services.uow.store  # type: ignore[attr-defined]
        tables = store.tables
        return (
            tuple(tables.events),
            tuple(sorted(tables.messages.items())),
            tuple(sorted(tables.threads.items())),
            tuple(sorted(tables.runs.items())),
            tuple(sorted(tables.grants.items())),
            tuple(sorted(tables.principals.items())),
            tuple(sorted(tables.channels.items())),
            tuple(sorted(tables.spaces.items())),
            tuple(sorted(tables.followups.items())),
        )


@asynccontextmanager
async def http_world(settings: Settings | None = None) -> AsyncIterator[HttpWorld]:
    """A new memory store, the demo world and a client over a new application."""
    clock = FakeClock()
    services = memory_services(settings or Settings(), clock)
    world = await build_demo_world(services)
    async with contract_client(services) as client:
        yield HttpWorld(services=services, world=world, client=client, clock=clock)
