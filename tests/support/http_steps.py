"""HTTP steps of people and Lotse on the demo world, over any store.

The create-answer and stop suites run the same requests on the memory adapter and on
PostgreSQL (the parametrised ``services`` of tests/integration); every answer is
checked against /openapi.json by the `ContractClient`.
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.http import ContractClient, bearer_of
from tests.support.scenario import main_thread
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.domain.world import Level, ResourceKind


async def sam_may_trigger(services: Services, world: DemoWorld) -> None:
    """Sam gets trigger on Support/Allgemein instead of read (a second writer)."""
    robin, sam = world.principal("robin"), world.principal("sam")
    await services.admin.create_grant(
        robin,
        principal_id=sam.id,
        resource_kind=ResourceKind.CHANNEL,
        resource_id=world.channels["allgemein"].id,
        level=Level.TRIGGER,
    )


async def heartbeat(client: ContractClient, world: DemoWorld, followups: str | None) -> None:
    """Lotse reports its follow-up capability (None: reports none)."""
    capabilities = {} if followups is None else {"followups": followups}
    beat = await client.put(
        "/v1/agent/heartbeat",
        json={"capabilities": capabilities},
        headers=bearer_of(world, "lotse"),
    )
    assert beat.status_code == 204, beat.text


async def say(
    client: ContractClient,
    world: DemoWorld,
    who: str,
    cid: str,
    *,
    channel: str = "allgemein",
    mentions: tuple[str, ...] = (),
) -> httpx.Response:
    """A person writes into a channel's main thread through createMessage."""
    body: dict[str, Any] = {"client_msg_id": cid, "content": f"note {cid}"}
    if mentions:
        body["mentions"] = [str(world.principal(m).id) for m in mentions]
    return await client.post(
        f"/v1/threads/{main_thread(world, channel)}/messages",
        json=body,
        headers=bearer_of(world, who),
    )


async def agent_feed(client: ContractClient, world: DemoWorld) -> dict[str, Any]:
    """Lotse's page of personal events, acknowledged."""
    page = await client.get("/v1/agent/events", headers=bearer_of(world, "lotse"))
    assert page.status_code == 200
    body: dict[str, Any] = page.json()
    await client.post(
        "/v1/agent/events/ack",
        json={"through_seq": body["next_after"]},
        headers=bearer_of(world, "lotse"),
    )
    return body


async def start(client: ContractClient, world: DemoWorld) -> str:
    """Lotse takes its invocation and starts the run; the run id."""
    page = await agent_feed(client, world)
    (invocation,) = [e for e in page["events"] if e["type"] == "agent.invocation"]
    run_id = str(invocation["payload"]["run_id"])
    started = await client.post(
        f"/v1/runs/{run_id}/start",
        json={"invocation_token": invocation["invocation_token"]},
        headers=bearer_of(world, "lotse"),
    )
    assert (started.status_code, started.json()["state"]) == (200, "running"), started.text
    return run_id


async def run_document(client: ContractClient, world: DemoWorld, run_id: str) -> dict[str, Any]:
    """GET /v1/runs/{id} as Alex."""
    answer = await client.get(f"/v1/runs/{run_id}", headers=bearer_of(world, "alex"))
    assert answer.status_code == 200
    body: dict[str, Any] = answer.json()
    return body


async def history(client: ContractClient, world: DemoWorld) -> dict[str, dict[str, Any]]:
    """Allgemein's main thread as Alex reads it, by message id."""
    answer = await client.get(
        f"/v1/threads/{main_thread(world, 'allgemein')}/messages",
        headers=bearer_of(world, "alex"),
    )
    assert answer.status_code == 200
    return {m["id"]: m for m in answer.json()["messages"]}
