"""API tokens over HTTP: issued once, listed without secrets, revoked with 204, owner only."""

from __future__ import annotations

from tests.support.fakes import FakeClock
from tests.support.http import ContractClient, bearer
from turnkeeper.application.demo import DemoWorld

UNKNOWN_ID = "01900000-0000-7000-8000-0000000fffff"


def _tokens(principal_id: str) -> str:
    return f"/v1/principals/{principal_id}/tokens"


async def test_the_owner_issues_lists_and_revokes_a_token(
    client: ContractClient, world: DemoWorld, clock: FakeClock
) -> None:
    owner = bearer(world.owner.token)
    sam = str(world.principal("sam").id)

    issued = await client.post(_tokens(sam), json={"label": "laptop"}, headers=owner)
    assert issued.status_code == 201
    body = issued.json()
    assert set(body) == {"id", "principal_id", "token", "label", "created_at"}
    assert (body["principal_id"], body["label"]) == (sam, "laptop")
    assert body["token"].startswith("tk_")
    me = await client.get("/v1/me", headers=bearer(body["token"]))
    assert (me.status_code, me.json()["handle"]) == (200, "sam")

    listed = await client.get(_tokens(sam), headers=owner)
    assert listed.status_code == 200
    tokens = listed.json()["tokens"]
    assert [t["id"] for t in tokens][-1] == body["id"]
    assert all("token" not in t for t in tokens), "a listing never shows a secret"
    assert body["token"] not in listed.text
    newest = tokens[-1]
    assert newest["label"] == "laptop"
    assert newest["last_used_at"] == clock.now().isoformat().replace("+00:00", "Z")
    assert "label" not in tokens[0], "Sam's first token has no label (no null either)"

    revoked = await client.delete(f"{_tokens(sam)}/{body['id']}", headers=owner)
    assert (revoked.status_code, revoked.content) == (204, b"")
    refused = await client.get("/v1/me", headers=bearer(body["token"]))
    assert (refused.status_code, refused.json()["code"]) == (401, "unauthenticated")
    again = await client.delete(f"{_tokens(sam)}/{body['id']}", headers=owner)
    assert again.status_code == 404
    still = await client.get("/v1/me", headers=bearer(world.people["sam"].token))
    assert still.status_code == 200


async def test_a_token_without_body_members_has_no_label(
    client: ContractClient, world: DemoWorld
) -> None:
    lotse = str(world.principal("lotse").id)
    issued = await client.post(_tokens(lotse), json={}, headers=bearer(world.owner.token))
    assert issued.status_code == 201
    assert "label" not in issued.json()


async def test_bad_bodies_are_refused(client: ContractClient, world: DemoWorld) -> None:
    owner = bearer(world.owner.token)
    sam = str(world.principal("sam").id)
    cases = [
        ({"label": ""}, [{"pointer": "/label", "code": "required"}]),
        ({"label": "x" * 101}, [{"pointer": "/label", "code": "too_long"}]),
        ({"label": 5}, [{"pointer": "/label", "code": "invalid_type"}]),
        ({"token": "tk_mine"}, [{"pointer": "/token", "code": "unknown_member"}]),
    ]
    for body, errors in cases:
        answer = await client.post(_tokens(sam), json=body, headers=owner)
        assert answer.status_code == 400, body
        assert answer.json()["errors"] == errors, body
    listed = await client.get(_tokens(sam), headers=owner)
    assert len(listed.json()["tokens"]) == 1


async def test_only_the_owner_administers_tokens(client: ContractClient, world: DemoWorld) -> None:
    alex = bearer(world.people["alex"].token)
    sam = str(world.principal("sam").id)
    listed = await client.get(_tokens(sam), headers=bearer(world.owner.token))
    (token,) = listed.json()["tokens"]
    for method, url in (
        ("POST", _tokens(sam)),
        ("GET", _tokens(sam)),
        ("DELETE", f"{_tokens(sam)}/{token['id']}"),
    ):
        body: dict[str, object] | None = {} if method == "POST" else None
        answer = await client.request(method, url, headers=alex, json=body)
        assert answer.status_code == 403, (method, url)
        assert (answer.json()["code"], answer.json()["reason"]) == ("forbidden", "owner_required")
    assert (
        await client.get("/v1/me", headers=bearer(world.people["sam"].token))
    ).status_code == 200


async def test_unknown_ids_are_not_found(client: ContractClient, world: DemoWorld) -> None:
    owner = bearer(world.owner.token)
    sam, alex = str(world.principal("sam").id), str(world.principal("alex").id)
    (token,) = (await client.get(_tokens(sam), headers=owner)).json()["tokens"]
    for method, url in (
        ("GET", _tokens(UNKNOWN_ID)),
        ("GET", _tokens("not-an-id")),
        ("DELETE", f"{_tokens(sam)}/{UNKNOWN_ID}"),
        ("DELETE", f"{_tokens(alex)}/{token['id']}"),
        ("DELETE", f"{_tokens(sam)}/not-an-id"),
    ):
        answer = await client.request(method, url, headers=owner)
        assert (answer.status_code, answer.json()["code"]) == (404, "not_found"), (method, url)
    answer = await client.post(_tokens(UNKNOWN_ID), json={}, headers=owner)
    assert answer.status_code == 404


async def test_the_owner_may_revoke_its_own_token(client: ContractClient, world: DemoWorld) -> None:
    owner_id = str(world.owner.principal.id)
    owner = bearer(world.owner.token)
    spare = await client.post(_tokens(owner_id), json={"label": "spare"}, headers=owner)
    (first, _) = (await client.get(_tokens(owner_id), headers=owner)).json()["tokens"]
    revoked = await client.delete(f"{_tokens(owner_id)}/{first['id']}", headers=owner)
    assert revoked.status_code == 204
    assert (await client.get("/v1/me", headers=owner)).status_code == 401
    assert (await client.get("/v1/me", headers=bearer(spare.json()["token"]))).status_code == 200
