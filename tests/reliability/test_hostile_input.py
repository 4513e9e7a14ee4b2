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

Last, hostile strings member by member, over HTTP on the memory adapter and on
PostgreSQL: a NUL character in every string member a client writes, an 8,000-character
client id or handle, and a member nested 10,000 deep each answer 400
``validation_failed`` at the member's pointer, store nothing, and the same body without
the hostile member is accepted.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.database import create_database, database_conninfo, drop_database
from tests.support.database import fetch as rows
from tests.support.fakes import TEST_KEY, FakeClock, SequentialIds
from tests.support.http import HttpWorld, contract_client, http_world
from turnkeeper.adapters.postgres.uow import PostgresUnitOfWorkFactory, create_pool
from turnkeeper.adapters.tokens import JwtSigner
from turnkeeper.application.bootstrap import build_services
from turnkeeper.application.demo import build_demo_world
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


async def _routes(hw: HttpWorld, *, required_only: bool = False) -> list[tuple[str, str]]:
    """The routes with a body; with ``required_only``, those whose body is required."""
    return [
        (method, path)
        for path, item in hw.client.spec["paths"].items()
        for method in BODY_METHODS
        if method in item and "requestBody" in item[method]
        if not required_only or item[method]["requestBody"].get("required", False)
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
        # No body at all is `{}` where the body is not required (test_http_optional_bodies).
        routes = await _routes(hw, required_only=name == "empty")
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


# -- hostile strings, member by member, on both adapters ----------------------------------

#: A string with U+0000 inside (PostgreSQL text cannot hold it).
NUL_TEXT = "Alex\x00writes"
#: Longer than any client id or handle may be (and than a unique index row may hold).
LONG_ID = "x" * 8000
#: Nesting of the deep body (beyond the old recursion limit of the decoder).
DEEP = 10000
#: Tables a refused request must leave unchanged (audit denials and rate buckets may
#: move, token rows record their last use).
PG_TABLES = (
    "principals",
    "spaces",
    "channels",
    "threads",
    "messages",
    "grants",
    "events",
    "runs",
    "run_followups",
)


@attrs.frozen
class Hostile:
    """One route and a valid body for it; `at` is the pointer of the member to spoil."""

    name: str
    caller: str
    method: str
    path: str
    body: dict[str, Any]
    ok: int

    def spoiled(self, pointer: str, value: object) -> dict[str, Any]:
        body = copy.deepcopy(self.body)
        target = body
        *parents, last = pointer.strip("/").split("/")
        for part in parents:
            target = target[part]
        target[last] = value
        return body


def hostile_routes(hw: HttpWorld, run_id: str) -> list[Hostile]:
    support = str(hw.world.spaces["support"].id)
    channel = str(hw.world.channels["allgemein"].id)
    thread = str(hw.main_thread("allgemein"))
    message = {"client_msg_id": "hostile-1", "content": "Alex asks for help"}
    return [
        Hostile(
            "principal",
            "robin",
            "POST",
            "/v1/principals",
            {"kind": "person", "handle": "kim", "display_name": "Kim at example.com"},
            201,
        ),
        Hostile("space", "robin", "POST", "/v1/spaces", {"name": "Vertrieb"}, 201),
        Hostile(
            "channel",
            "robin",
            "POST",
            f"/v1/spaces/{support}/channels",
            {"name": "Archiv", "type": "text"},
            201,
        ),
        Hostile(
            "thread",
            "alex",
            "POST",
            f"/v1/channels/{channel}/threads",
            {"title": "A question", "first_message": message},
            201,
        ),
        Hostile("message", "alex", "POST", f"/v1/threads/{thread}/messages", message, 201),
        Hostile(
            "await_input",
            "lotse",
            "POST",
            f"/v1/runs/{run_id}/await-input",
            {"question": "Which account?"},
            200,
        ),
        Hostile(
            "finish",
            "lotse",
            "POST",
            f"/v1/runs/{run_id}/finish",
            {"state": "failed", "reason": "the tool broke"},
            200,
        ),
        Hostile(
            "agent_send",
            "lotse",
            "POST",
            "/v1/agent/send",
            {"target": thread, "content": "Lotse answers", "client_message_id": "hostile-2"},
            200,
        ),
    ]


#: (route, member pointer) of every string member a client writes.
STRING_MEMBERS = [
    ("principal", "/handle"),
    ("principal", "/display_name"),
    ("space", "/name"),
    ("channel", "/name"),
    ("thread", "/title"),
    ("thread", "/first_message/client_msg_id"),
    ("thread", "/first_message/content"),
    ("message", "/client_msg_id"),
    ("message", "/content"),
    ("await_input", "/question"),
    ("finish", "/reason"),
    ("agent_send", "/client_message_id"),
    ("agent_send", "/content"),
]
#: Members that are keys of a unique index, with the setting that bounds them.
LONG_MEMBERS = [
    ("principal", "/handle"),
    ("thread", "/first_message/client_msg_id"),
    ("message", "/client_msg_id"),
    ("agent_send", "/client_message_id"),
]


@attrs.frozen
class AdapterWorld:
    """The HTTP world over one adapter, and how to read what its store holds."""

    hw: HttpWorld
    conninfo: str | None

    async def snapshot(self) -> object:
        """What the store holds that a refused request must leave unchanged."""
        if self.conninfo is None:
            return self.hw.stored()
        found = []
        for table in PG_TABLES:
            statement = (
                "SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) "
                f"FROM {table} t"
            )
            found.append(await rows(self.conninfo, statement))
        return found


@pytest.fixture(params=["memory", "postgres"])
async def adapter_world(
    request: pytest.FixtureRequest, pg_server: str, pg_template: str
) -> AsyncIterator[AdapterWorld]:
    """The HTTP world over the memory adapter, or over a fresh PostgreSQL database."""
    settings = Settings(freshness_required_for_agents=False)
    if request.param == "memory":
        async with http_world(settings) as hw:
            yield AdapterWorld(hw=hw, conninfo=None)
        return
    name = await create_database(pg_server, template=pg_template)
    conninfo = database_conninfo(pg_server, name)
    pool = await create_pool(conninfo, min_size=1, max_size=2)
    try:
        clock = FakeClock()
        services = build_services(
            PostgresUnitOfWorkFactory(pool), settings, clock, SequentialIds(), JwtSigner(TEST_KEY)
        )
        world = await build_demo_world(services)
        async with contract_client(services) as client:
            hw = HttpWorld(services=services, world=world, client=client, clock=clock)
            yield AdapterWorld(hw=hw, conninfo=conninfo)
    finally:
        await pool.close()
        await drop_database(pg_server, name)


async def started_run(hw: HttpWorld) -> str:
    run_id, token = await hw.trigger()
    answer = await hw.client.post(
        f"/v1/runs/{run_id}/start", json={"invocation_token": token}, headers=hw.headers("lotse")
    )
    assert answer.status_code == 200, answer.text
    return run_id


async def _refused_then_accepted(
    aw: AdapterWorld,
    route: str,
    spoiled: Callable[[Hostile], object],
    expected: tuple[str, str],
) -> None:
    hw = aw.hw
    case = next(c for c in hostile_routes(hw, await started_run(hw)) if c.name == route)
    before = await aw.snapshot()
    body = spoiled(case)
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    answer = await hw.client.request(
        case.method,
        case.path,
        content=content,
        headers={**hw.headers(case.caller), "Content-Type": "application/json"},
    )
    assert answer.status_code == 400, answer.text
    problem = answer.json()
    assert problem["code"] == "validation_failed"
    assert [(e["pointer"], e["code"]) for e in problem["errors"]] == [expected]
    assert await aw.snapshot() == before
    # The same body without the hostile member is accepted: the refusal was for it.
    accepted = await hw.client.request(
        case.method, case.path, json=case.body, headers=hw.headers(case.caller)
    )
    assert accepted.status_code == case.ok, accepted.text


@pytest.mark.parametrize(("route", "pointer"), STRING_MEMBERS)
async def test_a_nul_character_in_a_string_member_is_refused_at_its_pointer(
    adapter_world: AdapterWorld, route: str, pointer: str
) -> None:
    await _refused_then_accepted(
        adapter_world,
        route,
        lambda case: case.spoiled(pointer, NUL_TEXT),
        (pointer, "invalid_character"),
    )


@pytest.mark.parametrize(("route", "pointer"), LONG_MEMBERS)
async def test_an_8000_character_client_id_or_handle_is_too_long(
    adapter_world: AdapterWorld, route: str, pointer: str
) -> None:
    await _refused_then_accepted(
        adapter_world, route, lambda case: case.spoiled(pointer, LONG_ID), (pointer, "too_long")
    )


@pytest.mark.parametrize(("route", "pointer"), [("message", "/content"), ("thread", "/title")])
async def test_a_body_nested_10000_deep_is_too_deep_at_its_member(
    adapter_world: AdapterWorld, route: str, pointer: str
) -> None:
    def nested(case: Hostile) -> bytes:
        marker = "__nested__"
        text = json.dumps(case.spoiled(pointer, marker))
        return text.replace(f'"{marker}"', "[" * DEEP + "]" * DEEP).encode()

    await _refused_then_accepted(adapter_world, route, nested, (pointer, "too_deep"))


def _string_pointers(value: Any, pointer: str = "") -> set[str]:
    if isinstance(value, str):
        return {pointer}
    if isinstance(value, dict):
        return {p for k, v in value.items() for p in _string_pointers(v, f"{pointer}/{k}")}
    return set()


#: String members whose value is an enum or an id: refused by their type anyway.
TYPED_MEMBERS = {"/kind", "/type", "/state", "/target"}


async def test_every_string_member_of_the_hostile_routes_is_spoiled() -> None:
    # A string member left out of STRING_MEMBERS would go untested.
    async with http_world() as hw:
        routes = hostile_routes(hw, await started_run(hw))
    found = {
        (case.name, pointer)
        for case in routes
        for pointer in _string_pointers(case.body)
        if pointer not in TYPED_MEMBERS
    }
    assert found == set(STRING_MEMBERS)
