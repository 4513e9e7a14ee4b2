"""Over HTTP: no auto title from a restricted first message (createThread, GET, events)."""

from __future__ import annotations

from tests.support.http import ContractClient, bearer_of
from turnkeeper.application.demo import DemoWorld

SECRET = "Salary of Sam\nnot for everyone"


async def test_a_restricted_first_message_gives_no_title_over_http(
    client: ContractClient, world: DemoWorld
) -> None:
    answer = await client.post(
        f"/v1/channels/{world.channels['reports'].id}/threads",
        json={
            "first_message": {
                "client_msg_id": "secret",
                "content": SECRET,
                "restricted_to": [str(world.principal("robin").id)],
            }
        },
        headers=bearer_of(world, "lotse"),
    )
    assert answer.status_code == 201, answer.text
    thread = answer.json()["thread"]
    assert "title" not in thread
    assert thread["title_source"] == "auto"
    seen = await client.get(f"/v1/threads/{thread['id']}", headers=bearer_of(world, "alex"))
    assert seen.status_code == 200
    assert "title" not in seen.json()
    events = await client.get("/v1/events", headers=bearer_of(world, "alex"))
    created = [
        e
        for e in events.json()["events"]
        if e["type"] == "thread.created" and e["resource"]["id"] == thread["id"]
    ]
    assert len(created) == 1
    assert "title" not in created[0]["payload"]["thread"]
    assert "Salary" not in events.text
