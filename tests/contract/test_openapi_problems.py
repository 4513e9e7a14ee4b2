"""Each operation documents the problems it gives, not those of every other route.

The 403, 409 and 429 examples of an operation are exactly the answers its services and
guards give (read from them and from the suites that assert the codes); its 400 examples
show its own detail codes where API.md names them, besides a generic one; every
description names the codes of its examples and no other. The second half gives real
refusals over HTTP and finds each among the examples of its operation.
"""

from __future__ import annotations

import re
from typing import Any, get_args

import pytest

from tests.support.http import ContractClient, bearer
from tests.support.openapi import Spec, assert_matches_openapi
from tests.support.scenario import main_thread
from turnkeeper.adapters.http.openapi_problems import PROBLEM_EXAMPLES, ProblemName
from turnkeeper.adapters.http.problems import STATUS_BY_CODE
from turnkeeper.application.demo import DemoWorld

PROBLEM_MEDIA_TYPE = "application/problem+json"

#: A documented problem: (status, code, reason) for 403, 409 and 429.
Documented = tuple[int, str, str | None]

FORBIDDEN = 403
CONFLICT = 409
RATE_LIMITED = 429
#: The statuses whose examples the table below lists in full.
LISTED = (FORBIDDEN, CONFLICT, RATE_LIMITED)

OWNER_REQUIRED: set[Documented] = {(FORBIDDEN, "forbidden", "owner_required")}
AGENTS_ONLY: Documented = (FORBIDDEN, "forbidden", "agents_only")
LEVEL_INSUFFICIENT: Documented = (FORBIDDEN, "forbidden", "level_insufficient")
CHANNEL_ARCHIVED: Documented = (FORBIDDEN, "channel_read_only", "channel_archived")
NOT_RUN_AGENT: Documented = (FORBIDDEN, "forbidden", "not_run_agent")
IDEMPOTENCY: Documented = (CONFLICT, "idempotency_conflict", None)
RUN_NOT_ACTIVE: Documented = (CONFLICT, "conflict", "run_not_active")
TRANSITION: Documented = (CONFLICT, "invalid_state_transition", None)
BASE_VERSION: Documented = (CONFLICT, "base_version_conflict", None)
LIMITED: Documented = (RATE_LIMITED, "rate_limited", None)


def _token(reason: str) -> Documented:
    return (FORBIDDEN, "invocation_token_invalid", reason)


#: The routes of the owner only (`owner_route`).
OWNER_ROUTES = (
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
)

#: The 403, 409 and 429 answers of every /v1 operation (none: it gives none of them).
EXPECTED: dict[tuple[str, str], set[Documented]] = {
    **dict.fromkeys(OWNER_ROUTES, OWNER_REQUIRED),
    ("get", "/v1/me"): set(),
    ("post", "/v1/channels/{channel_id}/threads"): {
        LEVEL_INSUFFICIENT,
        CHANNEL_ARCHIVED,
        IDEMPOTENCY,
        LIMITED,
    },
    ("post", "/v1/threads/{thread_id}/messages"): {
        LEVEL_INSUFFICIENT,
        CHANNEL_ARCHIVED,
        IDEMPOTENCY,
        RUN_NOT_ACTIVE,
        LIMITED,
    },
    ("get", "/v1/threads/{thread_id}"): set(),
    ("get", "/v1/threads/{thread_id}/messages"): set(),
    ("post", "/v1/threads/{thread_id}/close"): {LEVEL_INSUFFICIENT, CHANNEL_ARCHIVED},
    ("get", "/v1/events"): set(),
    ("get", "/v1/events/stream"): {LIMITED},
    ("get", "/v1/runs/{run_id}"): set(),
    ("post", "/v1/runs/{run_id}/cancel"): {LEVEL_INSUFFICIENT, CHANNEL_ARCHIVED, TRANSITION},
    ("post", "/v1/runs/{run_id}/start"): {
        NOT_RUN_AGENT,
        CHANNEL_ARCHIVED,
        _token("malformed"),
        _token("expired"),
        _token("run_mismatch"),
        TRANSITION,
    },
    ("post", "/v1/runs/{run_id}/await-input"): {NOT_RUN_AGENT, CHANNEL_ARCHIVED, TRANSITION},
    ("post", "/v1/runs/{run_id}/resume"): {
        NOT_RUN_AGENT,
        CHANNEL_ARCHIVED,
        _token("malformed"),
        _token("expired"),
        _token("run_mismatch"),
        _token("superseded"),
        TRANSITION,
    },
    ("post", "/v1/runs/{run_id}/finish"): {NOT_RUN_AGENT, TRANSITION},
    ("patch", "/v1/runs/{run_id}"): {
        NOT_RUN_AGENT,
        CHANNEL_ARCHIVED,
        BASE_VERSION,
        RUN_NOT_ACTIVE,
        TRANSITION,
    },
    ("get", "/v1/agent/events"): {AGENTS_ONLY},
    ("post", "/v1/agent/events/ack"): {AGENTS_ONLY},
    ("put", "/v1/agent/heartbeat"): {AGENTS_ONLY},
    ("get", "/v1/agent/events/stream"): {AGENTS_ONLY, LIMITED},
    ("post", "/v1/agent/send"): {
        AGENTS_ONLY,
        LEVEL_INSUFFICIENT,
        CHANNEL_ARCHIVED,
        IDEMPOTENCY,
        RUN_NOT_ACTIVE,
        LIMITED,
    },
}

#: The 400 details API.md names for a route: (pointer, code) its examples must show.
NAMED_400: dict[tuple[str, str], set[tuple[str, str]]] = {
    ("post", "/v1/agent/send"): {
        ("/freshness", "freshness_required"),
        ("/client_message_id", "client_message_id_required"),
        ("/freshness/target_key", "target_key_mismatch"),
    },
    ("post", "/v1/threads/{thread_id}/messages"): {("/run_id", "run_mismatch")},
    ("patch", "/v1/runs/{run_id}"): {("/ops/0/path", "patch_target_missing")},
}


def _examples(spec: Spec, method: str, path: str, status: int) -> list[dict[str, Any]]:
    response = spec["paths"][path][method]["responses"].get(str(status))
    if response is None:
        return []
    media = response["content"][PROBLEM_MEDIA_TYPE]
    return [example["value"] for example in media["examples"].values()]


def _documented(spec: Spec, method: str, path: str) -> set[Documented]:
    return {
        (status, value["code"], value.get("reason"))
        for status in LISTED
        for value in _examples(spec, method, path, status)
    }


def _details_400(spec: Spec, method: str, path: str) -> set[tuple[str, str]]:
    return {
        (error["pointer"], error["code"])
        for value in _examples(spec, method, path, 400)
        for error in value.get("errors", [])
    }


def _v1_operations(spec: Spec) -> list[tuple[str, str]]:
    return [
        (method, path)
        for path, item in spec["paths"].items()
        if path.startswith("/v1/")
        for method in item
    ]


async def test_the_catalogue_names_real_statuses_and_every_entry_is_shown(
    client: ContractClient,
) -> None:
    assert set(PROBLEM_EXAMPLES) == set(get_args(ProblemName))
    for name, example in PROBLEM_EXAMPLES.items():
        assert STATUS_BY_CODE[example.answer.code] == example.answer.status, name
    shown = {
        key
        for item in client.spec["paths"].values()
        for operation in item.values()
        for response in operation["responses"].values()
        for key in response.get("content", {}).get(PROBLEM_MEDIA_TYPE, {}).get("examples", {})
    }
    assert shown >= set(PROBLEM_EXAMPLES)


async def test_the_table_covers_every_v1_operation(client: ContractClient) -> None:
    assert set(_v1_operations(client.spec)) == set(EXPECTED)


@pytest.mark.parametrize(("method", "path"), sorted(EXPECTED))
async def test_each_operation_documents_exactly_its_403_409_and_429_answers(
    client: ContractClient, method: str, path: str
) -> None:
    assert _documented(client.spec, method, path) == EXPECTED[(method, path)]


async def test_owner_routes_document_no_token_channel_or_level_refusal(
    client: ContractClient,
) -> None:
    for method, path in OWNER_ROUTES:
        codes = {value["code"] for value in _examples(client.spec, method, path, FORBIDDEN)}
        assert codes == {"forbidden"}, (method, path)
        assert "409" not in client.spec["paths"][path][method]["responses"], (method, path)


async def test_every_400_shows_a_generic_example_and_the_routes_own_detail_codes(
    client: ContractClient,
) -> None:
    for method, path in _v1_operations(client.spec):
        details = _details_400(client.spec, method, path)
        assert {code for _, code in details} >= {"unknown_member"}, (method, path)
        assert details >= NAMED_400.get((method, path), set()), (method, path)
    # A detail code of one route is not shown on another.
    assert ("/run_id", "run_mismatch") not in _details_400(client.spec, "post", "/v1/spaces")


async def test_the_run_patch_shows_its_base_version_conflict_with_the_current_run(
    client: ContractClient,
) -> None:
    (conflict,) = [
        value
        for value in _examples(client.spec, "patch", "/v1/runs/{run_id}", CONFLICT)
        if value["code"] == "base_version_conflict"
    ]
    # `current` is the whole Run, as GET /v1/runs/{run_id} answers it.
    assert_matches_openapi(client.spec, "get", "/v1/runs/{run_id}", 200, conflict["current"])
    for method, path in _v1_operations(client.spec):
        for value in _examples(client.spec, method, path, CONFLICT):
            assert ("current" in value) == (value["code"] == "base_version_conflict")


def _named(description: str, word: str) -> bool:
    return re.search(rf"(?<![a-z_]){re.escape(word)}(?![a-z_])", description) is not None


async def test_descriptions_name_the_codes_of_their_examples_and_no_other(
    client: ContractClient,
) -> None:
    for method, path in _v1_operations(client.spec):
        for status, response in client.spec["paths"][path][method]["responses"].items():
            if PROBLEM_MEDIA_TYPE not in response.get("content", {}):
                continue
            description = response["description"]
            values = _examples(client.spec, method, path, int(status))
            shown = {value["code"] for value in values}
            details = {value["reason"] for value in values if "reason" in value} | {
                error["code"] for value in values for error in value.get("errors", [])
            }
            for word in shown | details:
                assert _named(description, word), (method, path, status, word)
            for code, code_status in STATUS_BY_CODE.items():
                if code_status == int(status) and code not in shown:
                    assert not _named(description, code), (method, path, status, code)


# -- real refusals are among the examples of their operation ----------------------------


def _assert_documented(
    spec: Spec, method: str, path: str, answer: Any, status: int
) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    body: dict[str, Any] = answer.json()
    if status == 400:
        for error in body["errors"]:
            assert (error["pointer"], error["code"]) in _details_400(spec, method, path), error
    else:
        assert (status, body["code"], body.get("reason")) in _documented(spec, method, path)
    return body


async def test_a_persons_send_is_refused_agents_only_as_documented(
    client: ContractClient, world: DemoWorld
) -> None:
    thread = str(main_thread(world, "allgemein"))
    answer = await client.post(
        "/v1/agent/send",
        json={"target": thread, "content": "hi", "client_message_id": "p1"},
        headers=bearer(world.people["alex"].token),
    )
    _assert_documented(client.spec, "post", "/v1/agent/send", answer, FORBIDDEN)


async def test_an_owner_route_refuses_a_person_owner_required_as_documented(
    client: ContractClient, world: DemoWorld
) -> None:
    answer = await client.post(
        "/v1/spaces", json={"name": "X"}, headers=bearer(world.people["alex"].token)
    )
    _assert_documented(client.spec, "post", "/v1/spaces", answer, FORBIDDEN)


async def test_the_sends_400_detail_codes_are_documented(
    client: ContractClient, world: DemoWorld
) -> None:
    thread = str(main_thread(world, "allgemein"))
    lotse = bearer(world.agents["lotse"].token)
    freshness = {"target_key": f"thread:{thread}", "seen_up_to_seq": 0}
    for sent in (
        {"target": thread, "content": "hi", "client_message_id": "s1"},
        {"target": thread, "content": "hi", "freshness": freshness},
        {
            "target": thread,
            "content": "hi",
            "client_message_id": "s1",
            "freshness": {**freshness, "target_key": "thread:other"},
        },
    ):
        answer = await client.post("/v1/agent/send", json=sent, headers=lotse)
        _assert_documented(client.spec, "post", "/v1/agent/send", answer, 400)


async def test_a_persons_run_id_is_run_mismatch_as_documented(
    client: ContractClient, world: DemoWorld
) -> None:
    thread = main_thread(world, "allgemein")
    answer = await client.post(
        f"/v1/threads/{thread}/messages",
        json={"client_msg_id": "m1", "content": "hi", "run_id": str(thread)},
        headers=bearer(world.people["alex"].token),
    )
    path = "/v1/threads/{thread_id}/messages"
    _assert_documented(client.spec, "post", path, answer, 400)


async def test_the_run_patch_refusals_are_documented(
    client: ContractClient, world: DemoWorld
) -> None:
    thread = main_thread(world, "allgemein")
    opened = await client.post(
        f"/v1/threads/{thread}/messages",
        json={
            "client_msg_id": "t1",
            "content": "can someone help?",
            "mentions": [str(world.principal("lotse").id)],
        },
        headers=bearer(world.people["alex"].token),
    )
    run_id = opened.json()["trigger"]["run_id"]
    lotse = bearer(world.agents["lotse"].token)
    run = (await client.get(f"/v1/runs/{run_id}", headers=lotse)).json()
    path = "/v1/runs/{run_id}"
    stale = await client.request(
        "PATCH",
        f"/v1/runs/{run_id}",
        json={"base_version": run["version"] + 1, "ops": []},
        headers=lotse,
    )
    body = _assert_documented(client.spec, "patch", path, stale, CONFLICT)
    assert body["current"] == run
    missing = await client.request(
        "PATCH",
        f"/v1/runs/{run_id}",
        json={
            "base_version": run["version"],
            "ops": [{"op": "replace", "path": f"/followups/{thread}/state", "value": "delivered"}],
        },
        headers=lotse,
    )
    _assert_documented(client.spec, "patch", path, missing, 400)
    other = await client.request(
        "PATCH",
        f"/v1/runs/{run_id}",
        json={"base_version": run["version"], "ops": []},
        headers=bearer(world.people["alex"].token),
    )
    _assert_documented(client.spec, "patch", path, other, FORBIDDEN)
