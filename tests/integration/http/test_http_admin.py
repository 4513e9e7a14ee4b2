"""Administration routes over HTTP, as the owner."""

from __future__ import annotations

from tests.support.http import ContractClient, bearer
from turnkeeper.application.demo import DemoWorld


async def test_the_owner_builds_a_world_over_http(client: ContractClient, world: DemoWorld) -> None:
    owner = bearer(world.owner.token)
    agent = await client.post(
        "/v1/principals", json={"kind": "agent", "handle": "helper"}, headers=owner
    )
    assert agent.status_code == 201
    assert agent.json()["token"].startswith("tk_")
    agent_id = agent.json()["id"]
    person = await client.post(
        "/v1/principals",
        json={"kind": "person", "handle": "kim", "display_name": "Kim"},
        headers=owner,
    )
    me = await client.get("/v1/me", headers=bearer(person.json()["token"]))
    assert me.json()["handle"] == "kim"

    space = await client.post(
        "/v1/spaces", json={"name": "Ops", "default_operator_id": agent_id}, headers=owner
    )
    assert space.status_code == 201
    channel = await client.post(
        f"/v1/spaces/{space.json()['id']}/channels",
        json={"name": "Pager", "type": "text"},
        headers=owner,
    )
    assert channel.status_code == 201
    channel_id = channel.json()["id"]
    assert "main_thread_id" in channel.json()

    behavior = await client.put(
        f"/v1/channels/{channel_id}/behavior", json={"free_response": True}, headers=owner
    )
    assert behavior.json()["free_response"] is True
    operator = await client.put(
        f"/v1/channels/{channel_id}/operator", json={"mode": "none"}, headers=owner
    )
    assert operator.json()["operator_mode"] == "none"

    grant = await client.post(
        "/v1/grants",
        json={
            "principal_id": person.json()["id"],
            "resource_kind": "channel",
            "resource_id": channel_id,
            "level": "trigger",
        },
        headers=owner,
    )
    assert (grant.status_code, grant.json()["level"]) == (201, "trigger")
    deleted = await client.delete(f"/v1/grants/{grant.json()['id']}", headers=owner)
    assert (deleted.status_code, deleted.content) == (204, b"")

    config = await client.put(
        f"/v1/agents/{agent_id}/config",
        json={"supports_followups": False, "enabled": False},
        headers=owner,
    )
    assert config.json()["enabled"] is False
    archived = await client.post(f"/v1/channels/{channel_id}/archive", headers=owner)
    assert archived.json()["archived"] is True


async def test_an_unknown_enum_value_is_refused(client: ContractClient, world: DemoWorld) -> None:
    response = await client.post(
        "/v1/principals", json={"kind": "robot", "handle": "r2"}, headers=bearer(world.owner.token)
    )
    assert response.status_code == 400
    assert response.json()["errors"] == [{"pointer": "/kind", "code": "invalid_enum"}]


async def test_writing_into_an_archived_channel_is_read_only(
    client: ContractClient, world: DemoWorld
) -> None:
    channel = world.channels["allgemein"]
    await client.post(f"/v1/channels/{channel.id}/archive", headers=bearer(world.owner.token))
    response = await client.post(
        f"/v1/threads/{channel.main_thread_id}/messages",
        json={"client_msg_id": "late", "content": "hello?"},
        headers=bearer(world.people["alex"].token),
    )
    assert response.status_code == 403
    assert (response.json()["code"], response.json()["reason"]) == (
        "channel_read_only",
        "channel_archived",
    )


async def test_every_offending_member_is_answered_at_once(
    client: ContractClient, world: DemoWorld
) -> None:
    owner = bearer(world.owner.token)
    response = await client.post(
        "/v1/principals",
        json={"kind": "person", "handle": "two words", "billing_mode": "personal"},
        headers=owner,
    )
    assert response.status_code == 400
    assert {(e["pointer"], e["code"]) for e in response.json()["errors"]} == {
        ("/billing_mode", "agents_only"),
        ("/handle", "invalid"),
    }
    channel = await client.post(
        f"/v1/spaces/{world.spaces['support'].id}/channels",
        json={"name": " ", "type": "text", "operator_mode": "agent"},
        headers=owner,
    )
    assert channel.status_code == 400
    assert {(e["pointer"], e["code"]) for e in channel.json()["errors"]} == {
        ("/name", "required"),
        ("/operator_id", "operator_mode_mismatch"),
    }
