"""Every error answers with the problem shape of API.md."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.support.http import ContractClient, bearer, contract_client
from tests.support.scenario import main_thread, post, runs_of
from tests.support.services import memory_services
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.errors import StoreUnavailable
from turnkeeper.application.settings import Settings

PROBLEM_KEYS = {"type", "title", "status", "code", "correlation_id"}


def assert_problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert set(body) >= PROBLEM_KEYS
    assert set(body) <= PROBLEM_KEYS | {"reason", "errors", "current"}
    assert (body["status"], body["code"]) == (status, code)
    assert body["correlation_id"] == response.headers["x-correlation-id"]
    return body


async def test_a_missing_token_is_unauthenticated(client: ContractClient) -> None:
    response = await client.get("/v1/me")
    body = assert_problem(response, 401, "unauthenticated")
    assert response.headers["www-authenticate"] == "Bearer"
    assert "reason" not in body


@pytest.mark.parametrize(
    "header", ["Bearer tk_unknown", "Basic dXNlcjpwYXNz", "Bearer", "tk_no_scheme"]
)
async def test_a_bad_token_is_unauthenticated(
    client: ContractClient, world: DemoWorld, header: str
) -> None:
    response = await client.get("/v1/me", headers={"Authorization": header})
    assert_problem(response, 401, "unauthenticated")


MESSAGE_BODIES = {
    "valid": b'{"client_msg_id": "p-1", "content": "Sam, the report is ready."}',
    "unknown member": b'{"client_msg_id": "p-1", "content": "Sam, hi.", "colour": "red"}',
    "wrong type": b'{"client_msg_id": "p-1", "content": 7}',
    "empty content": b'{"client_msg_id": "p-1", "content": ""}',
}


@pytest.mark.parametrize("body", sorted(MESSAGE_BODIES))
@pytest.mark.parametrize("path_id", ["known", "malformed", "unknown"])
async def test_a_message_with_an_unknown_token_is_401_whatever_its_body_and_path(
    client: ContractClient, world: DemoWorld, body: str, path_id: str
) -> None:
    # The message route resolves its token in the post's unit (ADR 0026); a request that
    # fails to decode before it still answers 401 first, as every other route does.
    thread = {
        "known": str(world.channels["allgemein"].main_thread_id),
        "malformed": "not-a-uuid",
        "unknown": str(uuid.uuid4()),
    }[path_id]
    response = await client.post(
        f"/v1/threads/{thread}/messages",
        content=MESSAGE_BODIES[body],
        headers={**bearer("tk_unknown"), "content-type": "application/json"},
    )
    assert_problem(response, 401, "unauthenticated")
    assert response.headers["www-authenticate"] == "Bearer"


#: An agent's moves of its run, each with a valid body and two it fails to decode.
RUN_MOVES = {
    "start": {
        "valid": b'{"invocation_token": "not-a-token"}',
        "unknown member": b'{"invocation_token": "not-a-token", "colour": "red"}',
        "wrong type": b'{"invocation_token": 7}',
    },
    "await-input": {
        "valid": b'{"question": "Sam, which week?"}',
        "unknown member": b'{"colour": "red"}',
        "wrong type": b'{"question": 7}',
    },
    "resume": {
        "valid": b'{"invocation_token": "not-a-token"}',
        "unknown member": b'{"colour": "red"}',
        "wrong type": b'{"invocation_token": []}',
    },
    "finish": {
        "valid": b'{"state": "completed"}',
        "unknown member": b'{"state": "completed", "colour": "red"}',
        "wrong type": b'{"state": "done"}',
    },
}


@pytest.mark.parametrize("body", ["valid", "unknown member", "wrong type"])
@pytest.mark.parametrize("move", sorted(RUN_MOVES))
@pytest.mark.parametrize("path_id", ["known", "malformed", "unknown"])
async def test_a_run_move_with_an_unknown_token_is_401_whatever_its_body_and_path(
    client: ContractClient,
    world: DemoWorld,
    services: Services,
    body: str,
    move: str,
    path_id: str,
) -> None:
    # The agent's moves resolve their token in the round trip of the run's lock (ADR
    # 0026); a request that fails to decode before it still answers 401 first.
    await post(services, world, "alex", main_thread(world, "allgemein"), "trigger")
    (run,) = await runs_of(services, main_thread(world, "allgemein"))
    run_id = {"known": str(run.id), "malformed": "not-a-uuid", "unknown": str(uuid.uuid4())}
    response = await client.post(
        f"/v1/runs/{run_id[path_id]}/{move}",
        content=RUN_MOVES[move][body],
        headers={**bearer("tk_unknown"), "content-type": "application/json"},
    )
    assert_problem(response, 401, "unauthenticated")
    assert response.headers["www-authenticate"] == "Bearer"
    assert (await runs_of(services, main_thread(world, "allgemein"))) == [run]


#: Bodies of PATCH /v1/runs/{run_id}: a valid one and two it fails to decode.
RUN_PATCHES = {
    "valid": b'{"base_version": 1, "ops": []}',
    "unknown member": b'{"base_version": 1, "ops": [], "colour": "red"}',
    "wrong type": b'{"base_version": 1, "ops": [{"op": "add", "path": "/x", "value": 1}]}',
}


@pytest.mark.parametrize("body", sorted(RUN_PATCHES))
@pytest.mark.parametrize("path_id", ["known", "malformed", "unknown"])
async def test_a_run_patch_with_an_unknown_token_is_401_whatever_its_body_and_path(
    client: ContractClient, world: DemoWorld, services: Services, body: str, path_id: str
) -> None:
    await post(services, world, "alex", main_thread(world, "allgemein"), "trigger")
    (run,) = await runs_of(services, main_thread(world, "allgemein"))
    run_id = {"known": str(run.id), "malformed": "not-a-uuid", "unknown": str(uuid.uuid4())}
    response = await client.request(
        "PATCH",
        f"/v1/runs/{run_id[path_id]}",
        content=RUN_PATCHES[body],
        headers={**bearer("tk_unknown"), "content-type": "application/json"},
    )
    assert_problem(response, 401, "unauthenticated")
    assert (await runs_of(services, main_thread(world, "allgemein"))) == [run]


#: Queries of GET /v1/agent/events: none, and ones the poll refuses (decoding, the
#: cursor, the limit, the wait).
POLL_QUERIES = ["", "?after=abc", "?after=-1", "?limit=0", "?wait=-1", "?wait=9999"]


@pytest.mark.parametrize("query", POLL_QUERIES)
async def test_a_poll_with_an_unknown_token_is_401_whatever_its_query(
    client: ContractClient, world: DemoWorld, query: str
) -> None:
    response = await client.get(f"/v1/agent/events{query}", headers=bearer("tk_unknown"))
    assert_problem(response, 401, "unauthenticated")
    assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("query", POLL_QUERIES[1:])
async def test_a_poll_by_a_person_is_403_whatever_its_query(
    client: ContractClient, world: DemoWorld, query: str
) -> None:
    response = await client.get(
        f"/v1/agent/events{query}", headers=bearer(world.people["alex"].token)
    )
    # Also for a query Litestar cannot decode: a person is refused before its input.
    body = assert_problem(response, 403, "forbidden")
    assert body["reason"] == "agents_only"


@pytest.mark.parametrize(
    "body", [b'{"through_seq": 1}', b'{"through_seq": -1}', b'{"through_seq": 1, "x": 1}']
)
async def test_an_ack_with_an_unknown_token_is_401_whatever_its_body(
    client: ContractClient, world: DemoWorld, body: bytes
) -> None:
    response = await client.post(
        "/v1/agent/events/ack",
        content=body,
        headers={**bearer("tk_unknown"), "content-type": "application/json"},
    )
    assert_problem(response, 401, "unauthenticated")


@pytest.mark.parametrize("move", sorted(RUN_MOVES))
async def test_a_run_move_with_a_live_token_gets_its_decoding_error(
    client: ContractClient, world: DemoWorld, move: str
) -> None:
    response = await client.post(
        f"/v1/runs/{uuid.uuid4()}/{move}",
        content=RUN_MOVES[move]["wrong type"],
        headers={**bearer(world.agents["lotse"].token), "content-type": "application/json"},
    )
    assert_problem(response, 400, "validation_failed")


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [("unknown member", 400, "validation_failed"), ("wrong type", 400, "validation_failed")],
)
async def test_a_message_with_a_live_token_gets_its_decoding_error(
    client: ContractClient, world: DemoWorld, body: str, status: int, code: str
) -> None:
    thread = world.channels["allgemein"].main_thread_id
    response = await client.post(
        f"/v1/threads/{thread}/messages",
        content=MESSAGE_BODIES[body],
        headers={**bearer(world.people["alex"].token), "content-type": "application/json"},
    )
    assert_problem(response, status, code)


async def test_a_message_whose_token_check_finds_no_store_is_503(
    client: ContractClient,
    world: DemoWorld,
    services: Services,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    detail = "connection to server on socket /tmp/example.com failed"

    async def down(*args: object, **kwargs: object) -> None:
        raise StoreUnavailable(detail, retry_after=3)

    monkeypatch.setattr(services.identity, "authenticate_bearer", down)
    thread = world.channels["allgemein"].main_thread_id
    response = await client.post(
        f"/v1/threads/{thread}/messages",
        content=MESSAGE_BODIES["unknown member"],
        headers={**bearer(world.people["alex"].token), "content-type": "application/json"},
    )
    assert_problem(response, 503, "unavailable")
    assert detail not in response.text


async def test_an_unknown_route_is_a_not_found_problem(client: ContractClient) -> None:
    response = await client.get("/v1/nowhere")
    assert_problem(response, 404, "not_found")


async def test_a_wrong_method_is_a_method_not_allowed_problem(client: ContractClient) -> None:
    response = await client.delete("/v1/me")
    assert_problem(response, 405, "method_not_allowed")


async def test_an_unknown_member_is_refused_with_its_pointer(
    client: ContractClient, world: DemoWorld
) -> None:
    response = await client.post(
        "/v1/spaces", json={"name": "S", "colour": "red"}, headers=bearer(world.owner.token)
    )
    body = assert_problem(response, 400, "validation_failed")
    assert body["errors"] == [{"pointer": "/colour", "code": "unknown_member"}]


@pytest.mark.parametrize(
    ("member", "pointer"),
    [
        ("", "/"),
        ("a/b", "/a~1b"),
        ("a~b", "/a~0b"),
        ("a`b", "/a`b"),
        ("a - b", "/a - b"),
    ],
    ids=["empty", "slash", "tilde", "backtick", "dash"],
)
async def test_an_unknown_member_is_named_by_a_json_pointer(
    client: ContractClient, world: DemoWorld, member: str, pointer: str
) -> None:
    # Found by tests/reliability/test_schemathesis.py: the empty name was answered with
    # the pointer of the whole body, "/" and "~" were not escaped (RFC 6901), and a name
    # with a backtick or " - " was cut.
    response = await client.post(
        "/v1/spaces", json={"name": "S", member: 1}, headers=bearer(world.owner.token)
    )
    body = assert_problem(response, 400, "validation_failed")
    assert body["errors"] == [{"pointer": pointer, "code": "unknown_member"}]


async def test_a_nested_unknown_member_with_an_empty_name_is_named(
    client: ContractClient, world: DemoWorld
) -> None:
    channel = world.channels["bulletin"].id
    response = await client.post(
        f"/v1/channels/{channel}/threads",
        json={"first_message": {"client_msg_id": "c1", "content": "hi", "": 1}},
        headers=bearer(world.people["alex"].token),
    )
    body = assert_problem(response, 400, "validation_failed")
    assert body["errors"] == [{"pointer": "/first_message/", "code": "unknown_member"}]


async def test_an_unknown_mention_of_a_first_message_names_the_whole_path(
    client: ContractClient, world: DemoWorld
) -> None:
    # createThread answered /mentions/0, the pointer of createMessage's body (issue 14).
    channel = world.channels["bulletin"].id
    response = await client.post(
        f"/v1/channels/{channel}/threads",
        json={
            "first_message": {
                "client_msg_id": "c1",
                "content": "hi",
                "mentions": ["01900000-0000-7000-8000-0000000fffff"],
            }
        },
        headers=bearer(world.people["alex"].token),
    )
    body = assert_problem(response, 400, "validation_failed")
    assert body["errors"] == [{"pointer": "/first_message/mentions/0", "code": "unknown_principal"}]


@pytest.mark.parametrize(
    ("body", "pointer"),
    [
        (b'{"name": "S", "name": "T"}', "/name"),
        (
            b'{"first_message": {"client_msg_id": "a", "content": "x", "content": "y"}}',
            "/first_message/content",
        ),
    ],
    ids=["top-level", "nested"],
)
async def test_a_duplicated_member_is_refused_with_its_pointer(
    client: ContractClient, world: DemoWorld, body: bytes, pointer: str
) -> None:
    channel = world.channels["bulletin"].id
    url = "/v1/spaces" if pointer == "/name" else f"/v1/channels/{channel}/threads"
    response = await client.post(
        url,
        content=body,
        headers={**bearer(world.owner.token), "Content-Type": "application/json"},
    )
    problem = assert_problem(response, 400, "validation_failed")
    assert problem["errors"] == [{"pointer": pointer, "code": "duplicate_member"}]


async def test_a_nested_unknown_member_names_the_whole_path(
    client: ContractClient, world: DemoWorld
) -> None:
    channel = world.channels["allgemein"].id
    response = await client.post(
        f"/v1/channels/{channel}/threads",
        json={"first_message": {"client_msg_id": "c1", "content": "hi", "origin": "system"}},
        headers=bearer(world.people["alex"].token),
    )
    body = assert_problem(response, 400, "validation_failed")
    assert body["errors"] == [{"pointer": "/first_message/origin", "code": "unknown_member"}]


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        ({"content": "hi"}, {"pointer": "/client_msg_id", "code": "required"}),
        ({"client_msg_id": "c", "content": 5}, {"pointer": "/content", "code": "invalid_type"}),
        (
            {"client_msg_id": "c", "content": "hi", "mentions": ["nope"]},
            {"pointer": "/mentions/0", "code": "invalid"},
        ),
        (
            {"client_msg_id": "c", "content": "hi", "reply_to_id": None},
            {"pointer": "/reply_to_id", "code": "invalid_type"},
        ),
        (
            {"client_msg_id": "c", "content": "hi", "kind": "system"},
            {"pointer": "/kind", "code": "invalid_enum"},
        ),
        ([], {"pointer": "", "code": "invalid_type"}),
    ],
)
async def test_a_body_that_does_not_decode_names_the_member(
    client: ContractClient, world: DemoWorld, payload: Any, error: dict[str, str]
) -> None:
    thread = world.channels["allgemein"].main_thread_id
    response = await client.post(
        f"/v1/threads/{thread}/messages", json=payload, headers=bearer(world.people["alex"].token)
    )
    body = assert_problem(response, 400, "validation_failed")
    assert body["errors"] == [error]


async def test_malformed_json_is_a_validation_problem(
    client: ContractClient, world: DemoWorld
) -> None:
    response = await client.post(
        "/v1/spaces",
        content=b'{"name": ',
        headers={**bearer(world.owner.token), "Content-Type": "application/json"},
    )
    body = assert_problem(response, 400, "validation_failed")
    assert body["errors"] == [{"pointer": "", "code": "malformed_json"}]


@pytest.mark.parametrize(
    ("method", "route", "body", "pointer"),
    [
        ("POST", "/v1/agent/events/ack", {"through_seq": 2**63}, "/through_seq"),
        ("PATCH", "/v1/runs/{run}", {"base_version": 2**70, "ops": []}, "/base_version"),
        (
            "POST",
            "/v1/agent/send",
            {
                "target": "{thread}",
                "content": "hi",
                "client_message_id": "c1",
                "freshness": {"seen_up_to_seq": 2**64},
            },
            "/freshness/seen_up_to_seq",
        ),
    ],
    ids=["ack", "patch", "send"],
)
async def test_a_seq_beyond_64_bits_is_out_of_range(
    client: ContractClient,
    world: DemoWorld,
    method: str,
    route: str,
    body: dict[str, Any],
    pointer: str,
) -> None:
    # Found through tests/reliability/test_schemathesis.py, which sends such numbers: on
    # PostgreSQL an acknowledgement through 2**63 overflowed the bigint cursor (500).
    thread = str(world.channels["allgemein"].main_thread_id)
    if "freshness" in body:
        body = {**body, "target": thread}
    url = route.format(run=uuid.uuid4(), thread=thread)
    response = await client.request(
        method, url, json=body, headers=bearer(world.agents["lotse"].token)
    )
    problem = assert_problem(response, 400, "validation_failed")
    assert problem["errors"] == [{"pointer": pointer, "code": "out_of_range"}]


@pytest.mark.parametrize(
    ("method", "route", "body", "pointer"),
    [
        ("POST", "/v1/agent/events/ack", {"through_seq": -1}, "/through_seq"),
        ("PATCH", "/v1/runs/{run}", {"base_version": -1, "ops": []}, "/base_version"),
    ],
    ids=["ack", "patch"],
)
async def test_a_negative_seq_or_version_is_out_of_range(
    client: ContractClient,
    world: DemoWorld,
    method: str,
    route: str,
    body: dict[str, Any],
    pointer: str,
) -> None:
    # A negative base_version was answered 409 base_version_conflict with the run, while
    # the document and the other seqs refuse it as input (DESIGN section 9: negative seq).
    thread = str(world.channels["allgemein"].main_thread_id)
    opened = await client.post(
        f"/v1/threads/{thread}/messages",
        json={"client_msg_id": "neg-1", "content": "Lotse, a question"},
        headers=bearer(world.people["alex"].token),
    )
    run = opened.json()["trigger"]["run_id"]
    response = await client.request(
        method, route.format(run=run), json=body, headers=bearer(world.agents["lotse"].token)
    )
    problem = assert_problem(response, 400, "validation_failed")
    assert problem["errors"] == [{"pointer": pointer, "code": "out_of_range"}]


async def test_a_query_parameter_of_the_wrong_type_names_the_parameter(
    client: ContractClient, world: DemoWorld
) -> None:
    response = await client.get("/v1/events?after=soon", headers=bearer(world.owner.token))
    body = assert_problem(response, 400, "validation_failed")
    assert body["errors"] == [{"pointer": "/after", "code": "invalid_type"}]


async def test_a_body_over_the_limit_is_payload_too_large() -> None:
    services = memory_services(Settings(max_body_bytes=64))
    async with contract_client(services) as client:
        response = await client.post(
            "/v1/spaces", json={"name": "x" * 100}, headers=bearer("tk_whoever")
        )
    assert_problem(response, 413, "payload_too_large")


async def test_a_non_owner_is_forbidden_with_a_reason(
    client: ContractClient, world: DemoWorld
) -> None:
    response = await client.post(
        "/v1/spaces", json={"name": "Mine"}, headers=bearer(world.people["alex"].token)
    )
    body = assert_problem(response, 403, "forbidden")
    assert body["reason"] == "owner_required"


async def test_a_reused_client_id_with_another_payload_is_an_idempotency_conflict(
    client: ContractClient, world: DemoWorld
) -> None:
    thread = world.channels["allgemein"].main_thread_id
    alex = bearer(world.people["alex"].token)
    first = await client.post(
        f"/v1/threads/{thread}/messages", json={"client_msg_id": "k", "content": "a"}, headers=alex
    )
    assert first.status_code == 201
    second = await client.post(
        f"/v1/threads/{thread}/messages", json={"client_msg_id": "k", "content": "b"}, headers=alex
    )
    assert_problem(second, 409, "idempotency_conflict")


async def test_an_empty_bucket_is_rate_limited_with_retry_after() -> None:
    services = memory_services(Settings(rl_message_burst=1, rl_message_per_minute=6))
    from turnkeeper.application.demo import build_demo_world

    world = await build_demo_world(services)
    thread = world.channels["allgemein"].main_thread_id
    alex = bearer(world.people["alex"].token)
    async with contract_client(services) as client:
        ok = await client.post(
            f"/v1/threads/{thread}/messages",
            json={"client_msg_id": "1", "content": "a"},
            headers=alex,
        )
        limited = await client.post(
            f"/v1/threads/{thread}/messages",
            json={"client_msg_id": "2", "content": "b"},
            headers=alex,
        )
    assert ok.status_code == 201
    assert_problem(limited, 429, "rate_limited")
    assert limited.headers["retry-after"] == "10"


async def test_an_unexpected_error_is_internal_without_details(
    client: ContractClient, world: DemoWorld, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "tk_leaked_token and secret content"

    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError(secret)

    monkeypatch.setattr(services.conversation, "get_thread", broken)
    response = await client.get(f"/v1/threads/{uuid.uuid4()}", headers=bearer(world.owner.token))
    body = assert_problem(response, 500, "internal")
    assert secret not in response.text
    assert "Traceback" not in response.text
    assert set(body) == PROBLEM_KEYS


@pytest.mark.parametrize(("retry_after", "header"), [(3, "3"), (None, "1")])
async def test_an_unavailable_store_is_503_with_retry_after_and_no_details(
    client: ContractClient,
    world: DemoWorld,
    services: Services,
    monkeypatch: pytest.MonkeyPatch,
    retry_after: int | None,
    header: str,
) -> None:
    detail = "connection to server on socket /tmp/example.com failed"

    async def down(*args: object, **kwargs: object) -> None:
        raise StoreUnavailable(detail, retry_after=retry_after)

    monkeypatch.setattr(services.conversation, "get_thread", down)
    response = await client.get(f"/v1/threads/{uuid.uuid4()}", headers=bearer(world.owner.token))
    body = assert_problem(response, 503, "unavailable")
    assert response.headers["retry-after"] == header
    assert detail not in response.text
    assert set(body) == PROBLEM_KEYS
