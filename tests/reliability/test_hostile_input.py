"""Hostile input: byte-level fuzz of every JSON body, and Hypothesis over /openapi.json.

Every POST/PUT/PATCH route with a request body (read from /openapi.json) gets oversized,
deeply nested, invalid UTF-8, huge-number, duplicated-key, null-member, wrong-type and
non-object bodies: the answer is 4xx (never 5xx), problem+json, echoes neither the
caller's token nor the content sent, and nothing is stored (store compared before and
after). Then Hypothesis generates bodies from the members the document declares and
checks that no answer is 5xx and every answer matches the document (ContractClient).

Schemathesis runs next to this file (tests/reliability/test_schemathesis.py): it fuzzes
every operation from the document and chains them along the document's links, as every
principal. This file keeps what schemathesis does not send: bodies that are no JSON
document at all (invalid UTF-8, lone surrogates, truncated, empty), duplicated keys,
nesting far beyond any schema, and a body over ``http.max_body_bytes`` (see
docs/reliability.md).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.http import HttpWorld, http_world
from turnkeeper.application.settings import Settings

#: Depth of the nested body (far beyond any schema, well below a recursion limit).
NESTING_DEPTH = 5000
#: Hypothesis examples per route for the schema-driven fuzz.
SCHEMA_FUZZ_EXAMPLES = 10
#: A marker that must never come back in a problem body.
MARKER = "HOSTILE-MARKER-example.com"
#: The body limit of these tests (small, so the oversized body stays cheap).
MAX_BODY_BYTES = 4096

BODY_METHODS = ("post", "put", "patch")
AGENT_PREFIXES = ("/v1/agent/", "/v1/runs/{run_id}")


def hostile_bodies() -> dict[str, bytes]:
    """Every hostile body, by name."""
    return {
        "oversized": b'{"content": "' + b"A" * (MAX_BODY_BYTES + 1) + b'"}',
        "deeply_nested": b'{"content": ' + b"[" * NESTING_DEPTH + b"]" * NESTING_DEPTH + b"}",
        "invalid_utf8": b'{"content": "\xff\xfe\xfd ' + MARKER.encode() + b'"}',
        "lone_surrogate": b'{"content": "\\ud800 ' + MARKER.encode() + b'"}',
        "huge_integer": b'{"through_seq": ' + b"9" * 400 + b', "base_version": 1e999999}',
        "duplicated_keys": (
            b'{"content": "' + MARKER.encode() + b'", "content": "' + MARKER.encode() + b'"}'
        ),
        "null_members": json.dumps({"content": None, "client_msg_id": None, "name": None}).encode(),
        "wrong_types": json.dumps(
            {"content": 5, "client_msg_id": [MARKER], "name": {"x": MARKER}, "kind": 7}
        ).encode(),
        "not_an_object": json.dumps([MARKER]).encode(),
        "truncated": b'{"content": "' + MARKER.encode(),
        "empty": b"",
    }


async def _routes(hw: HttpWorld) -> list[tuple[str, str]]:
    return [
        (method, path)
        for path, item in hw.client.spec["paths"].items()
        for method in BODY_METHODS
        if method in item and "requestBody" in item[method]
    ]


async def _fill(hw: HttpWorld, path: str, run_id: str) -> str:
    values = {
        "space_id": str(hw.world.spaces["support"].id),
        "channel_id": str(hw.world.channels["allgemein"].id),
        "thread_id": str(hw.main_thread("allgemein")),
        "agent_id": str(hw.world.principal("lotse").id),
        "principal_id": str(hw.world.principal("sam").id),
        "run_id": run_id,
    }
    return path.format(**values)


def _caller(path: str) -> str:
    return "lotse" if path.startswith(AGENT_PREFIXES) else "robin"


def _assert_clean_problem(hw: HttpWorld, answer: Any, caller: str) -> None:
    assert 400 <= answer.status_code < 500, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    token = hw.headers(caller)["Authorization"].removeprefix("Bearer ")
    assert token not in answer.text
    assert MARKER not in answer.text
    assert not has_null(answer.json())


def has_null(value: Any) -> bool:
    """Whether a decoded JSON document holds a null anywhere (a member's name may be
    the text "null": a pointer like ``/null`` is not a null)."""
    if value is None:
        return True
    if isinstance(value, dict):
        return any(has_null(v) for v in value.values())
    if isinstance(value, list):
        return any(has_null(v) for v in value)
    return False


@pytest.mark.parametrize("name", sorted(hostile_bodies()))
async def test_hostile_bodies_get_a_clean_4xx_and_store_nothing(name: str) -> None:
    body = hostile_bodies()[name]
    async with http_world(Settings(max_body_bytes=MAX_BODY_BYTES)) as hw:
        routes = await _routes(hw)
        assert routes, "the document declares routes with bodies"
        run_id, _ = await hw.trigger()
        for method, template in routes:
            path = await _fill(hw, template, run_id)
            caller = _caller(template)
            before = hw.stored()
            answer = await hw.client.request(
                method.upper(),
                path,
                content=body,
                headers={**hw.headers(caller), "Content-Type": "application/json"},
            )
            _assert_clean_problem(hw, answer, caller)
            if name == "oversized":
                assert (answer.status_code, answer.json()["code"]) == (413, "payload_too_large")
            assert hw.stored() == before, f"{method} {template} stored something"


async def test_duplicated_keys_in_a_valid_message_are_refused() -> None:
    async with http_world() as hw:
        thread = hw.main_thread("allgemein")
        before = hw.stored()
        answer = await hw.client.post(
            f"/v1/threads/{thread}/messages",
            content=b'{"client_msg_id": "a", "content": "one", "content": "two"}',
            headers={**hw.headers("alex"), "Content-Type": "application/json"},
        )
        _assert_clean_problem(hw, answer, "alex")
        assert hw.stored() == before


# -- Hypothesis over the document ------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.uuids().map(str),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def _members(spec: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    for option in schema.get("oneOf", []) + schema.get("anyOf", []):
        found = _members(spec, option)
        if found:
            return found
    return sorted(schema.get("properties", {}))


def _body_schema(spec: dict[str, Any], method: str, template: str) -> dict[str, Any]:
    content = spec["paths"][template][method]["requestBody"]["content"]
    schema: dict[str, Any] = next(iter(content.values()))["schema"]
    return schema


def bodies_for(members: list[str]) -> st.SearchStrategy[Any]:
    """Objects with the declared members (some dropped) and random values, or anything."""
    declared = st.fixed_dictionaries({}, optional=dict.fromkeys(members, json_values))
    return declared | json_values


#: The routes with a request body (a test checks this is every such route of the document).
FUZZED_ROUTES: list[tuple[str, str]] = [
    ("post", "/v1/principals"),
    ("post", "/v1/spaces"),
    ("post", "/v1/spaces/{space_id}/channels"),
    ("put", "/v1/channels/{channel_id}/behavior"),
    ("put", "/v1/channels/{channel_id}/operator"),
    ("post", "/v1/grants"),
    ("post", "/v1/principals/{principal_id}/tokens"),
    ("put", "/v1/agents/{agent_id}/config"),
    ("post", "/v1/channels/{channel_id}/threads"),
    ("post", "/v1/threads/{thread_id}/messages"),
    ("patch", "/v1/runs/{run_id}"),
    ("post", "/v1/runs/{run_id}/start"),
    ("post", "/v1/runs/{run_id}/await-input"),
    ("post", "/v1/runs/{run_id}/resume"),
    ("post", "/v1/runs/{run_id}/finish"),
    ("post", "/v1/agent/events/ack"),
    ("put", "/v1/agent/heartbeat"),
    ("post", "/v1/agent/send"),
]


async def _schema_routes() -> list[tuple[str, str]]:
    async with http_world() as hw:
        return await _routes(hw)


@pytest.mark.parametrize(("method", "template"), FUZZED_ROUTES)
# Derandomized: CI runs the same examples every time (a new finding must not turn a
# later, unrelated change red); run with another seed locally to look further.
@settings(
    max_examples=SCHEMA_FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
    derandomize=True,
)
@given(data=st.data())
async def test_generated_bodies_never_get_a_5xx_and_answers_match_the_document(
    method: str, template: str, data: st.DataObject
) -> None:
    async with http_world() as hw:
        members = _members(hw.client.spec, _body_schema(hw.client.spec, method, template))
        body = data.draw(bodies_for(members), label="body")
        run_id, _ = await hw.trigger()
        path = await _fill(hw, template, run_id)
        caller = _caller(template)
        # ContractClient checks every answer with a body against the document.
        answer = await hw.client.request(
            method.upper(), path, json=body, headers=hw.headers(caller)
        )
        assert answer.status_code < 500, answer.text
        token = hw.headers(caller)["Authorization"].removeprefix("Bearer ")
        assert token not in answer.text
        if answer.status_code >= 400:
            assert answer.headers["content-type"].startswith("application/problem+json")
            assert not has_null(answer.json())


async def test_the_fuzzed_routes_are_every_route_with_a_body() -> None:
    assert set(await _schema_routes()) == set(FUZZED_ROUTES)


def test_a_member_named_null_is_not_a_null() -> None:
    # Found by the schema fuzz: a body member named "null" comes back in a pointer.
    assert not has_null({"errors": [{"pointer": "/null", "code": "unknown_member"}]})
    assert has_null({"errors": [{"pointer": None}]})
    assert has_null([1, {"a": [None]}])
