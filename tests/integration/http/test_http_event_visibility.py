"""Over HTTP: a forum's new operator gets neither the older threads nor their events."""

from __future__ import annotations

from tests.support.http import ContractClient, bearer_of
from turnkeeper.application.demo import DemoWorld


async def test_a_new_operator_reads_no_event_of_a_thread_it_gets_404_on(
    client: ContractClient, world: DemoWorld
) -> None:
    bulletin = world.channels["bulletin"].id
    created = await client.post(
        f"/v1/channels/{bulletin}/threads",
        json={"title": "Old", "first_message": {"client_msg_id": "old", "content": "older"}},
        headers=bearer_of(world, "alex"),
    )
    assert created.status_code == 201, created.text
    old = created.json()["thread"]["id"]
    changed = await client.put(
        f"/v1/channels/{bulletin}/operator",
        json={"mode": "agent", "operator_id": str(world.principal("texter").id)},
        headers=bearer_of(world, "robin"),
    )
    assert changed.status_code == 200, changed.text
    later = await client.post(
        f"/v1/threads/{old}/messages",
        json={"client_msg_id": "later", "content": "written after the change"},
        headers=bearer_of(world, "alex"),
    )
    assert later.status_code == 201, later.text
    texter = bearer_of(world, "texter")
    assert (await client.get(f"/v1/threads/{old}", headers=texter)).status_code == 404
    events = await client.get("/v1/events", headers=texter)
    assert events.status_code == 200
    assert old not in {e["scope"]["thread_id"] for e in events.json()["events"]}
    assert "written after the change" not in events.text
    assert "older" not in events.text
