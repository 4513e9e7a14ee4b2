"""POST /v1/agent/send over HTTP: answers, problems and pointers, checked against OpenAPI."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, MutableMapping
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from tests.support.http import ContractClient, bearer
from tests.support.scenario import main_thread
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.settings import Settings

SEND = "/v1/agent/send"


def body(thread: str, cid: str, seen: int, content: str = "Done, Alex.", **extra: Any) -> Any:
    document: dict[str, Any] = {
        "target": thread,
        "content": content,
        "client_message_id": cid,
        "freshness": {"target_key": f"thread:{thread}", "seen_up_to_seq": seen},
    }
    document.update(extra)
    return document


def without_correlation(response: httpx.Response) -> dict[str, Any]:
    return {k: v for k, v in response.json().items() if k != "correlation_id"}


def pointers(answer: Any) -> set[tuple[str, str]]:
    return {(e["pointer"], e["code"]) for e in answer["errors"]}


async def test_sent_already_sent_and_held_answers(client: ContractClient, world: DemoWorld) -> None:
    thread = str(main_thread(world, "eskalation"))
    lotse = bearer(world.agents["lotse"].token)
    alex = bearer(world.people["alex"].token)
    sent = await client.post(SEND, json=body(thread, "s1", 0), headers=lotse)
    assert sent.status_code == 200
    answer = sent.json()
    message_id = answer.pop("message_id")
    assert answer == {
        "state": "sent",
        "target_key": f"thread:{thread}",
        "client_message_id": "s1",
        "seen_up_to_seq": 0,
        "accepted_seq": 1,
        "latest_seq": 1,
    }
    replay = await client.post(SEND, json=body(thread, "s1", 0), headers=lotse)
    assert replay.status_code == 200
    assert "idempotent-replay" not in replay.headers
    assert replay.json() == {**answer, "state": "already_sent", "message_id": message_id}
    await client.post(
        f"/v1/threads/{thread}/messages",
        json={"client_msg_id": "a1", "content": "One more thing"},
        headers=alex,
    )
    held = await client.post(SEND, json=body(thread, "s2", 1), headers=lotse)
    assert held.status_code == 200
    assert held.json() == {
        "state": "held",
        "target_key": f"thread:{thread}",
        "client_message_id": "s2",
        "seen_up_to_seq": 1,
        "latest_seq": 2,
        "needs_refresh_until_seq": 2,
    }
    # The agent's message is an ordinary message of the thread for its readers.
    page = (await client.get(f"/v1/threads/{thread}/messages", headers=alex)).json()
    assert [(m["thread_seq"], m["origin"]) for m in page["messages"]] == [
        (1, "agent"),
        (2, "human"),
    ]


async def test_the_thread_names_the_target_key_of_a_send(
    client: ContractClient, world: DemoWorld
) -> None:
    thread = str(main_thread(world, "eskalation"))
    lotse = bearer(world.agents["lotse"].token)
    read = (await client.get(f"/v1/threads/{thread}", headers=lotse)).json()
    sent = await client.post(SEND, json=body(thread, "s1", read["latest_seq"]), headers=lotse)
    assert sent.json()["target_key"] == read["target_key"]


async def test_validation_problems_name_their_members(
    client: ContractClient, world: DemoWorld, settings: Settings
) -> None:
    thread = str(main_thread(world, "eskalation"))
    other = str(main_thread(world, "allgemein"))
    lotse = bearer(world.agents["lotse"].token)
    base = body(thread, "v1", 0)
    no_freshness = {k: v for k, v in base.items() if k != "freshness"}
    no_client_id = {k: v for k, v in base.items() if k != "client_message_id"}
    sources = [str(uuid.uuid4()) for _ in range(settings.max_source_message_ids + 1)]
    cases: list[tuple[Any, set[tuple[str, str]]]] = [
        (no_freshness, {("/freshness", "freshness_required")}),
        (no_client_id, {("/client_message_id", "client_message_id_required")}),
        ({**base, "client_message_id": ""}, {("/client_message_id", "client_message_id_required")}),
        (
            {**base, "freshness": {"target_key": f"thread:{other}", "seen_up_to_seq": 0}},
            {("/freshness/target_key", "target_key_mismatch")},
        ),
        (
            {**base, "freshness": {"seen_up_to_seq": 0}},
            {("/freshness/target_key", "target_key_required")},
        ),
        (
            {**base, "freshness": {"target_key": f"thread:{thread}", "seen_up_to_seq": -1}},
            {("/freshness/seen_up_to_seq", "negative")},
        ),
        (
            {
                **base,
                "freshness": {
                    "target_key": f"thread:{thread}",
                    "seen_up_to_seq": 0,
                    "source_message_ids": sources,
                },
            },
            {("/freshness/source_message_ids", "too_many")},
        ),
        ({**base, "content": ""}, {("/content", "required")}),
        ({**base, "origin": "agent"}, {("/origin", "unknown_member")}),
        (
            {**base, "freshness": {"target_key": f"thread:{thread}"}},
            {("/freshness/seen_up_to_seq", "required")},
        ),
        ({**base, "target": "not-an-id"}, {("/target", "invalid")}),
    ]
    for request, expected in cases:
        response = await client.post(SEND, json=request, headers=lotse)
        assert response.status_code == 400, request
        problem = response.json()
        assert problem["code"] == "validation_failed"
        assert pointers(problem) == expected, request


async def test_run_answers_through_the_send_route(client: ContractClient, world: DemoWorld) -> None:
    thread = str(main_thread(world, "allgemein"))
    alex = bearer(world.people["alex"].token)
    lotse = bearer(world.agents["lotse"].token)
    texter = bearer(world.agents["texter"].token)
    await client.post(
        f"/v1/threads/{thread}/messages",
        json={"client_msg_id": "q1", "content": "Lotse, please look"},
        headers=alex,
    )
    feed = (await client.get("/v1/agent/events", headers=lotse)).json()
    (invocation,) = [e for e in feed["events"] if e["type"] == "agent.invocation"]
    run_id = invocation["payload"]["run_id"]
    started = await client.post(
        f"/v1/runs/{run_id}/start",
        json={"invocation_token": invocation["invocation_token"]},
        headers=lotse,
    )
    assert started.status_code == 200
    seen = (await client.get(f"/v1/threads/{thread}", headers=lotse)).json()["latest_seq"]
    mismatch = await client.post(SEND, json=body(thread, "t1", seen, run_id=run_id), headers=texter)
    assert mismatch.status_code == 400
    assert pointers(mismatch.json()) == {("/run_id", "run_mismatch")}
    answered = await client.post(SEND, json=body(thread, "l1", seen, run_id=run_id), headers=lotse)
    assert (answered.status_code, answered.json()["state"]) == (200, "sent")
    finished = await client.post(
        f"/v1/runs/{run_id}/finish", json={"state": "completed"}, headers=lotse
    )
    assert finished.status_code == 200
    late = await client.post(SEND, json=body(thread, "l2", seen + 1, run_id=run_id), headers=lotse)
    assert late.status_code == 409
    assert (late.json()["code"], late.json()["reason"]) == ("conflict", "run_not_active")


async def test_people_unknown_threads_and_conflicts(
    client: ContractClient, world: DemoWorld
) -> None:
    thread = str(main_thread(world, "eskalation"))
    lotse = bearer(world.agents["lotse"].token)
    person = await client.post(
        SEND, json=body(thread, "p1", 0), headers=bearer(world.people["alex"].token)
    )
    assert person.status_code == 403
    assert (person.json()["code"], person.json()["reason"]) == ("forbidden", "agents_only")
    unreadable = await client.post(
        SEND, json=body(str(main_thread(world, "notizen")), "n1", 0), headers=lotse
    )
    unknown = await client.post(SEND, json=body(str(uuid.uuid4()), "n2", 0), headers=lotse)
    assert unreadable.status_code == unknown.status_code == 404
    assert without_correlation(unreadable) == without_correlation(unknown)
    assert "reason" not in unreadable.json()
    await client.post(SEND, json=body(thread, "k1", 0, "first"), headers=lotse)
    conflict = await client.post(SEND, json=body(thread, "k1", 1, "second"), headers=lotse)
    assert (conflict.status_code, conflict.json()["code"]) == (409, "idempotency_conflict")
    anonymous = await client.post(SEND, json=body(thread, "a1", 0))
    assert anonymous.status_code == 401


async def test_the_route_is_documented(client: ContractClient) -> None:
    operation = client.spec["paths"][SEND]["post"]
    assert {"200", "400", "401", "403", "404", "409", "429"} <= set(operation["responses"])
    assert operation["security"] == [{"bearer": []}]


async def test_a_held_send_is_in_the_owners_event_log_only(
    client: ContractClient, world: DemoWorld
) -> None:
    thread = str(main_thread(world, "eskalation"))
    lotse = bearer(world.agents["lotse"].token)
    alex = bearer(world.people["alex"].token)
    robin = bearer(world.owner.token)
    start = {
        name: (await client.get("/v1/events", headers=who)).json()["next_after"]
        for name, who in (("robin", robin), ("alex", alex), ("lotse", lotse))
    }
    await client.post(
        f"/v1/threads/{thread}/messages",
        json={"client_msg_id": "a1", "content": "One more thing"},
        headers=alex,
    )
    held = await client.post(SEND, json=body(thread, "s1", 0, "Not for the log."), headers=lotse)
    assert held.json()["state"] == "held"

    page = await client.get("/v1/events", params={"after": start["robin"]}, headers=robin)
    assert page.status_code == 200
    events = page.json()["events"]
    assert [e["type"] for e in events] == ["message.created", "message.held"]
    event = events[1]
    assert event["actor"] == {"id": str(world.principal("lotse").id), "kind": "agent"}
    assert event["scope"]["thread_id"] == thread
    assert event["resource"] == {"kind": "thread", "id": thread}
    assert event["payload"] == {
        "thread_id": thread,
        "author": {"id": str(world.principal("lotse").id), "kind": "agent", "handle": "lotse"},
        "seen_up_to_seq": 0,
        "latest_seq": 1,
        "client_message_id": "s1",
    }
    assert "Not for the log." not in page.text
    # A reader of the thread and the sending agent read the post, never the held send.
    for name, who in (("alex", alex), ("lotse", lotse)):
        theirs = await client.get("/v1/events", params={"after": start[name]}, headers=who)
        assert [e["type"] for e in theirs.json()["events"]] == ["message.created"], name
    feed = await client.get("/v1/agent/events", headers=lotse)
    assert "message.held" not in {e["type"] for e in feed.json()["events"]}


def _refused_records(records: list[MutableMapping[str, Any]]) -> list[tuple[str, str]]:
    return [(r["agent_id"], r["code"]) for r in records if r["event"] == "agent_send_refused"]


def _with(thread: str, **changes: Any) -> bytes:
    sent = body(thread, "r1", 0)
    sent.update(changes)
    return json.dumps(sent).encode()


@pytest.mark.parametrize(
    ("content", "status"),
    [
        pytest.param(lambda thread: b'{"target": ', 400, id="not JSON"),
        pytest.param(lambda thread: b'{"target": "a", "target": "b"}', 400, id="duplicated"),
        pytest.param(
            lambda thread: _with(thread, freshness={"target_key": thread, "seen_up_to_seq": "0"}),
            400,
            id="wrong type",
        ),
        pytest.param(lambda thread: _with(thread, extra=1), 400, id="unknown member"),
    ],
)
async def test_a_send_refused_for_its_body_writes_one_refused_record(
    client: ContractClient, world: DemoWorld, content: Callable[[str], bytes], status: int
) -> None:
    lotse = world.agents["lotse"]
    headers = {**bearer(lotse.token), "content-type": "application/json"}
    with capture_logs() as records:
        answer = await client.post(
            SEND, content=content(str(main_thread(world, "eskalation"))), headers=headers
        )
    assert answer.status_code == status, answer.text
    assert _refused_records(records) == [(str(lotse.principal.id), answer.json()["code"])]


async def test_a_send_the_gate_refuses_writes_one_refused_record(
    client: ContractClient, world: DemoWorld
) -> None:
    thread = str(main_thread(world, "eskalation"))
    lotse = world.agents["lotse"]
    with capture_logs() as records:
        answer = await client.post(SEND, json=body(thread, "r2", 5), headers=bearer(lotse.token))
    assert answer.status_code == 400
    assert _refused_records(records) == [(str(lotse.principal.id), "validation_failed")]


async def test_a_persons_or_an_unknown_tokens_refused_send_writes_no_record(
    client: ContractClient, world: DemoWorld
) -> None:
    thread = str(main_thread(world, "eskalation"))
    sent = {**body(thread, "r3", 0), "extra": 1}
    with capture_logs() as records:
        person = await client.post(SEND, json=sent, headers=bearer(world.people["alex"].token))
        unknown = await client.post(SEND, json=sent, headers=bearer("tk_unknown"))
    assert (person.status_code, unknown.status_code) == (403, 401)
    assert _refused_records(records) == []
