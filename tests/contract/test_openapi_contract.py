"""The published OpenAPI document covers the contract, and the answers match it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.http import ContractClient, bearer
from tests.support.openapi import (
    assert_matches_openapi,
    assert_no_null,
    response_schema,
    template_for,
)
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.settings import Settings
from turnkeeper.domain.events import MAX_SEQ

#: The routes of API.md (Administration, Conversation, Live delivery, /v1/me, Operations).
CONTRACT_ROUTES = {
    ("post", "/v1/principals"),
    ("post", "/v1/spaces"),
    ("post", "/v1/spaces/{space_id}/channels"),
    ("put", "/v1/channels/{channel_id}/behavior"),
    ("put", "/v1/channels/{channel_id}/operator"),
    ("post", "/v1/channels/{channel_id}/archive"),
    ("post", "/v1/grants"),
    ("delete", "/v1/grants/{grant_id}"),
    ("get", "/v1/grants"),
    ("post", "/v1/principals/{principal_id}/tokens"),
    ("get", "/v1/principals/{principal_id}/tokens"),
    ("delete", "/v1/principals/{principal_id}/tokens/{token_id}"),
    ("put", "/v1/agents/{agent_id}/config"),
    ("post", "/v1/channels/{channel_id}/threads"),
    ("post", "/v1/threads/{thread_id}/messages"),
    ("get", "/v1/threads/{thread_id}"),
    ("get", "/v1/threads/{thread_id}/messages"),
    ("post", "/v1/threads/{thread_id}/close"),
    ("get", "/v1/events"),
    ("get", "/v1/events/stream"),
    ("get", "/v1/agent/events/stream"),
    ("get", "/v1/me"),
    ("get", "/healthz"),
    ("get", "/readyz"),
}


def _operations(spec: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method, path) for path, item in spec["paths"].items() for method in item}


async def test_every_contract_route_is_documented(client: ContractClient) -> None:
    assert _operations(client.spec) >= CONTRACT_ROUTES


async def test_every_v1_operation_requires_the_bearer_token_and_documents_problems(
    client: ContractClient,
) -> None:
    for method, path in _operations(client.spec):
        if not path.startswith("/v1/"):
            continue
        operation = client.spec["paths"][path][method]
        assert operation.get("security") == [{"bearer": []}], (method, path)
        for status in (400, 401, 404, 413, 500):
            schema = response_schema(client.spec, method, path, status)
            assert schema == {"$ref": "#/components/schemas/Problem"}, (method, path, status)


async def test_creates_document_both_the_created_and_the_replayed_answer(
    client: ContractClient,
) -> None:
    for path in ("/v1/channels/{channel_id}/threads", "/v1/threads/{thread_id}/messages"):
        responses = client.spec["paths"][path]["post"]["responses"]
        assert {"200", "201", "409", "429"} <= set(responses)


async def test_every_answer_of_a_whole_conversation_matches_the_document(
    client: ContractClient, world: DemoWorld
) -> None:
    owner, alex = bearer(world.owner.token), bearer(world.people["alex"].token)
    channel = world.channels["allgemein"]
    await client.get("/v1/me", headers=alex)
    await client.get("/v1/me")
    created = await client.post(
        f"/v1/channels/{world.channels['reports'].id}/threads",
        json={"title": "T", "first_message": {"client_msg_id": "a", "content": "x"}},
        headers=alex,
    )
    thread_id = created.json()["thread"]["id"]
    for _ in range(2):
        await client.post(
            f"/v1/threads/{channel.main_thread_id}/messages",
            json={"client_msg_id": "b", "content": "@lotse", "mentions": []},
            headers=alex,
        )
    await client.post(f"/v1/threads/{thread_id}/messages", json={"content": "x"}, headers=alex)
    await client.get(f"/v1/threads/{thread_id}", headers=alex)
    await client.get(f"/v1/threads/{thread_id}/messages?limit=1", headers=alex)
    await client.get("/v1/events", headers=owner)
    await client.post(f"/v1/threads/{thread_id}/close", headers=alex)
    await client.put(
        f"/v1/channels/{channel.id}/behavior", json={"free_response": False}, headers=owner
    )
    await client.put(f"/v1/agents/{world.principal('lotse').id}/config", json={}, headers=owner)
    await client.post("/v1/spaces", json={"name": "X"}, headers=alex)
    await client.get("/healthz")
    await client.get("/readyz")

    seen = {(e.method, e.template, e.status) for e in client.exchanges}
    assert {s for _, _, s in seen} >= {200, 201, 400, 401, 403}
    # The client checked each answer as it came; check the recorded bodies once more
    # through the public helper, as other suites use it.
    for exchange in client.exchanges:
        assert_matches_openapi(
            client.spec, exchange.method, exchange.template, exchange.status, exchange.body
        )


async def test_the_helper_refuses_a_body_that_breaks_the_schema(client: ContractClient) -> None:
    with pytest.raises(AssertionError, match="latest_seq"):
        assert_matches_openapi(
            client.spec,
            "GET",
            "/v1/threads/{thread_id}",
            200,
            {
                "id": "0190a000-0000-7000-8000-000000000001",
                "channel_id": "0190a000-0000-7000-8000-000000000002",
                "title_source": "human",
                "state": "open",
                "latest_seq": "three",
                "target_key": "thread:x",
                "created_by": "0190a000-0000-7000-8000-000000000003",
                "created_at": "2026-11-30T09:00:00Z",
            },
        )


async def test_the_helper_refuses_an_undocumented_status(client: ContractClient) -> None:
    with pytest.raises(AssertionError, match="does not declare"):
        assert_matches_openapi(client.spec, "GET", "/healthz", 418, {"status": "ok"})


def test_null_is_refused_anywhere() -> None:
    assert_no_null({"a": [1, {"b": "c"}]})
    with pytest.raises(AssertionError, match="/a/1/b"):
        assert_no_null({"a": [1, {"b": None}]})


async def test_templates_prefer_literal_segments(client: ContractClient) -> None:
    assert template_for(client.spec, "/v1/me") == "/v1/me"
    assert template_for(client.spec, "/v1/threads/abc/messages") == (
        "/v1/threads/{thread_id}/messages"
    )
    assert template_for(client.spec, "/v2/nothing") is None


def _refs(value: Any) -> set[str]:
    if isinstance(value, dict):
        found = {value["$ref"].rsplit("/", 1)[1]} if "$ref" in value else set()
        return found.union(*(_refs(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_refs(v) for v in value))
    return set()


async def test_every_request_body_refuses_unknown_members(client: ContractClient) -> None:
    # Unknown members answer 400 unknown_member, so schema-valid data has none: found by
    # schemathesis, whose valid bodies carried members the routes refuse.
    schemas = client.spec["components"]["schemas"]
    pending = {
        name
        for method, path in _operations(client.spec)
        for name in _refs(client.spec["paths"][path][method].get("requestBody", {}))
    }
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        seen.add(name)
        pending |= _refs(schemas[name]) - seen
    assert {"MessageCreate", "ThreadCreate", "RunPatchOp", "SendFreshnessBody"} <= seen
    for name in seen:
        assert schemas[name].get("additionalProperties") is False, name


async def test_paging_parameters_state_their_bounds(client: ContractClient) -> None:
    # Outside these bounds the routes answer 400 out_of_range (found by schemathesis); a
    # cursor is a seq, at most 2**63 - 1.
    bounds = {
        "after": (0, MAX_SEQ),
        "after_seq": (0, MAX_SEQ),
        "limit": (1, Settings().page_max_limit),
    }
    seen = set()
    for method, path in _operations(client.spec):
        for parameter in client.spec["paths"][path][method].get("parameters", []):
            if parameter["name"] in bounds and parameter["in"] == "query":
                low, high = bounds[parameter["name"]]
                schema = parameter["schema"]
                assert (schema.get("minimum"), schema.get("maximum")) == (low, high), path
                seen.add(parameter["name"])
    assert seen == set(bounds)


async def test_seqs_in_request_bodies_state_their_exact_bound(client: ContractClient) -> None:
    # Beyond 2**63 - 1 a seq overflowed PostgreSQL's bigint (a 500 on acknowledging the
    # feed); it is refused with 400 out_of_range, and the document says so exactly, with
    # the lower bound 0 (below it: out_of_range, or the gate's own code negative).
    schemas = client.spec["components"]["schemas"]
    for name, member in (
        ("AckBody", "through_seq"),
        ("RunPatch", "base_version"),
        ("SendFreshnessBody", "seen_up_to_seq"),
    ):
        bounds = schemas[name]["properties"][member]
        assert (bounds["minimum"], bounds["maximum"]) == (0, 2**63 - 1), name


async def test_the_message_members_state_their_rules(client: ContractClient) -> None:
    # The seed's document names the run_id rule and the one kind a client may send.
    schemas = client.spec["components"]["schemas"]
    sent = schemas["MessageCreate"]["properties"]
    assert sent["kind"]["enum"] == ["text"]
    rule = sent["run_id"]["description"]
    for term in ("Agents only", "run_mismatch", "run_not_active", "not stored"):
        assert term in rule, term
    assert "kind run" in schemas["Message"]["properties"]["run_id"]["description"]


async def test_the_document_names_the_headers_and_statuses_the_routes_answer(
    client: ContractClient,
) -> None:
    paths = client.spec["paths"]
    with_body = 0
    for method, path in _operations(client.spec):
        operation = paths[path][method]
        for status, response in operation["responses"].items():
            # Every answer carries its correlation id (API.md conventions).
            assert "X-Correlation-Id" in response.get("headers", {}), (path, method, status)
        if "requestBody" in operation:
            # A body slower than http.body_timeout is answered 408 request_timeout.
            assert "408" in operation["responses"], (path, method)
            with_body += 1
        for parameter in operation.get("parameters", []):
            # A query string holds no JSON null: no parameter schema admits one.
            assert "null" not in json.dumps(parameter["schema"]), (path, parameter["name"])
    assert with_body > 0
    run = paths["/v1/runs/{run_id}"]["get"]["responses"]["200"]["headers"]
    assert run["ETag"]["required"] is True
    for path in ("/v1/threads/{thread_id}/messages", "/v1/channels/{channel_id}/threads"):
        replay = paths[path]["post"]["responses"]["200"]["headers"]["Idempotent-Replay"]
        assert replay["schema"]["enum"] == ["true"]
    freshness = client.spec["components"]["schemas"]["SendFreshnessBody"]
    assert set(freshness["required"]) == {"seen_up_to_seq", "target_key"}
