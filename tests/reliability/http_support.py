"""A fresh HTTP world for each request of the sweeps: memory services, demo world, client."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs

from tests.fakes import FakeClock
from tests.integration.http.support import ContractClient, contract_client, memory_services
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.settings import Settings
from turnkeeper.domain.events import EventType

#: Every principal of the demo world, by handle.
PRINCIPALS = ("robin", "alex", "sam", "lotse", "texter", "assistent")


@attrs.frozen(kw_only=True)
class HttpWorld:
    """Services, the demo world and a contract-checked client over them."""

    services: Services
    world: DemoWorld
    client: ContractClient
    clock: FakeClock

    def headers(self, handle: str) -> dict[str, str]:
        """The bearer header of a principal of the world."""
        found = self.world.people.get(handle) or self.world.agents[handle]
        return {"Authorization": f"Bearer {found.token}"}

    def main_thread(self, channel: str) -> uuid.UUID:
        """The main thread of a text channel."""
        thread_id = self.world.channels[channel].main_thread_id
        assert thread_id is not None
        return thread_id

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
