"""Grants over HTTP: a second grant of a pair changes its level (200, same id); listing."""

from __future__ import annotations

from tests.support.http import ContractClient, bearer
from turnkeeper.application.demo import DemoWorld


def _grant(world: DemoWorld, handle: str, channel: str, level: str) -> dict[str, str]:
    return {
        "principal_id": str(world.principal(handle).id),
        "resource_kind": "channel",
        "resource_id": str(world.channels[channel].id),
        "level": level,
    }


async def test_raising_sam_to_trigger_changes_the_grant_he_has(
    client: ContractClient, world: DemoWorld
) -> None:
    owner, sam = bearer(world.owner.token), bearer(world.people["sam"].token)
    allgemein = world.channels["allgemein"]
    listed = await client.get(
        "/v1/grants",
        params={"principal_id": str(world.principal("sam").id), "resource_id": str(allgemein.id)},
        headers=owner,
    )
    (before,) = listed.json()["grants"]
    assert before["level"] == "read"
    refused = await client.post(
        f"/v1/threads/{allgemein.main_thread_id}/messages",
        json={"client_msg_id": "s-1", "content": "hello"},
        headers=sam,
    )
    assert refused.status_code == 403

    raised = await client.post(
        "/v1/grants", json=_grant(world, "sam", "allgemein", "trigger"), headers=owner
    )
    assert raised.status_code == 200
    assert raised.json() == {**before, "level": "trigger"}
    kept = await client.post(
        "/v1/grants", json=_grant(world, "sam", "allgemein", "trigger"), headers=owner
    )
    assert (kept.status_code, kept.json()) == (200, raised.json())

    posted = await client.post(
        f"/v1/threads/{allgemein.main_thread_id}/messages",
        json={"client_msg_id": "s-2", "content": "hello"},
        headers=sam,
    )
    assert posted.status_code == 201
    again = await client.get("/v1/grants", params={"resource_id": str(allgemein.id)}, headers=owner)
    assert [
        g["id"] for g in again.json()["grants"] if g["principal_id"] == before["principal_id"]
    ] == [before["id"]]


async def test_a_first_grant_is_created(client: ContractClient, world: DemoWorld) -> None:
    created = await client.post(
        "/v1/grants",
        json=_grant(world, "alex", "kampagnen", "write"),
        headers=bearer(world.owner.token),
    )
    assert created.status_code == 201
    assert created.json()["level"] == "write"


async def test_grants_are_listed_with_both_filters(
    client: ContractClient, world: DemoWorld
) -> None:
    owner = bearer(world.owner.token)
    everything = (await client.get("/v1/grants", headers=owner)).json()["grants"]
    assert len(everything) == 5
    sam = str(world.principal("sam").id)
    sams = (await client.get("/v1/grants", params={"principal_id": sam}, headers=owner)).json()
    assert {g["principal_id"] for g in sams["grants"]} == {sam}
    assert len(sams["grants"]) == 2
    none = await client.get(
        "/v1/grants", params={"principal_id": "01900000-0000-7000-8000-0000000fffff"}, headers=owner
    )
    assert none.json() == {"grants": []}


async def test_a_malformed_filter_is_a_validation_problem(
    client: ContractClient, world: DemoWorld
) -> None:
    answer = await client.get(
        "/v1/grants", params={"principal_id": "sam"}, headers=bearer(world.owner.token)
    )
    assert answer.status_code == 400
    assert [e["pointer"] for e in answer.json()["errors"]] == ["/principal_id"]


async def test_only_the_owner_lists_grants(client: ContractClient, world: DemoWorld) -> None:
    answer = await client.get("/v1/grants", headers=bearer(world.people["alex"].token))
    assert (answer.status_code, answer.json()["reason"]) == (403, "owner_required")
