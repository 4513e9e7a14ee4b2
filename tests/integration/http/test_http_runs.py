"""The run lifecycle over HTTP, the agent side as plain HTTP calls (contract-checked)."""

from __future__ import annotations

from typing import Any

from tests.support.http import ContractClient, bearer_of
from turnkeeper.application.demo import DemoWorld


async def trigger(client: ContractClient, world: DemoWorld, cid: str = "t1") -> str:
    thread_id = world.channels["allgemein"].main_thread_id
    answer = await client.post(
        f"/v1/threads/{thread_id}/messages",
        json={"client_msg_id": cid, "content": "can someone help?"},
        headers=bearer_of(world, "alex"),
    )
    assert answer.status_code == 201
    return str(answer.json()["id"])


async def poll(client: ContractClient, world: DemoWorld, **params: Any) -> dict[str, Any]:
    answer = await client.get("/v1/agent/events", params=params, headers=bearer_of(world, "lotse"))
    assert answer.status_code == 200
    body: dict[str, Any] = answer.json()
    return body


async def test_full_lifecycle(client: ContractClient, world: DemoWorld) -> None:
    message_id = await trigger(client, world)
    feed = await poll(client, world)
    (invocation,) = [e for e in feed["events"] if e["type"] == "agent.invocation"]
    assert invocation["payload"]["message_id"] == message_id
    assert "redelivered" not in invocation
    token = invocation["invocation_token"]
    run_id = invocation["payload"]["run_id"]
    lotse = bearer_of(world, "lotse")

    started = await client.post(
        f"/v1/runs/{run_id}/start", json={"invocation_token": token}, headers=lotse
    )
    assert started.status_code == 200
    assert (started.json()["state"], started.headers["etag"]) == ("running", '"2"')
    waiting = await client.post(f"/v1/runs/{run_id}/await-input", json={}, headers=lotse)
    assert waiting.json()["state"] == "waiting_input"
    # The start token was consumed by the start: only the answer's token resumes.
    consumed = await client.post(
        f"/v1/runs/{run_id}/resume", json={"invocation_token": token}, headers=lotse
    )
    assert (consumed.status_code, consumed.json()["code"], consumed.json()["reason"]) == (
        403,
        "invocation_token_invalid",
        "superseded",
    )
    answer_id = await trigger(client, world, "answer")
    (followup,) = [
        e
        for e in (await poll(client, world, after=feed["next_after"]))["events"]
        if e["type"] == "agent.followup"
    ]
    assert followup["payload"]["message_id"] == answer_id
    resumed = await client.post(
        f"/v1/runs/{run_id}/resume",
        json={"invocation_token": followup["invocation_token"]},
        headers=lotse,
    )
    assert resumed.json()["state"] == "running"
    absorbed = await client.request(
        "PATCH",
        f"/v1/runs/{run_id}",
        json={
            "base_version": resumed.json()["version"],
            "ops": [
                {"op": "replace", "path": f"/followups/{answer_id}/state", "value": "absorbed"}
            ],
        },
        headers=lotse,
    )
    assert absorbed.status_code == 200
    finished = await client.post(
        f"/v1/runs/{run_id}/finish", json={"state": "completed"}, headers=lotse
    )
    assert finished.status_code == 200
    document = finished.json()
    assert (document["state"], document["version"], document["followups"]) == (
        "completed",
        7,
        {answer_id: {"state": "absorbed"}},
    )
    again = await client.post(
        f"/v1/runs/{run_id}/finish", json={"state": "completed"}, headers=lotse
    )
    assert (again.status_code, again.json()["version"]) == (200, 7)
    conflict = await client.post(
        f"/v1/runs/{run_id}/finish", json={"state": "failed"}, headers=lotse
    )
    assert (conflict.status_code, conflict.json()["code"]) == (409, "invalid_state_transition")
    read = await client.get(f"/v1/runs/{run_id}", headers=bearer_of(world, "sam"))
    assert (read.status_code, read.headers["etag"]) == (200, '"7"')
    thread_id = world.channels["allgemein"].main_thread_id
    history = await client.get(f"/v1/threads/{thread_id}/messages", headers=lotse)
    trigger_message = next(m for m in history.json()["messages"] if m["id"] == message_id)
    assert trigger_message["trigger_state"] == "done"


async def test_superseded_token_and_no_token_in_problems(
    client: ContractClient, world: DemoWorld
) -> None:
    await trigger(client, world)
    first = (await poll(client, world))["events"][0]
    second = (await poll(client, world))["events"][0]
    assert second["redelivered"] is True
    run_id = first["payload"]["run_id"]
    lotse = bearer_of(world, "lotse")
    await client.post(
        f"/v1/runs/{run_id}/start",
        json={"invocation_token": second["invocation_token"]},
        headers=lotse,
    )
    await client.post(f"/v1/runs/{run_id}/await-input", json={}, headers=lotse)
    refused = await client.post(
        f"/v1/runs/{run_id}/resume",
        json={"invocation_token": first["invocation_token"]},
        headers=lotse,
    )
    assert refused.status_code == 403
    problem = refused.json()
    assert (problem["code"], problem["reason"]) == ("invocation_token_invalid", "superseded")
    assert first["invocation_token"] not in refused.text


async def test_finish_from_queued_and_cancel(client: ContractClient, world: DemoWorld) -> None:
    await trigger(client, world)
    run_id = (await poll(client, world))["events"][0]["payload"]["run_id"]
    early = await client.post(
        f"/v1/runs/{run_id}/finish", json={"state": "completed"}, headers=bearer_of(world, "lotse")
    )
    assert (early.status_code, early.json()["code"]) == (409, "invalid_state_transition")
    sam = await client.post(f"/v1/runs/{run_id}/cancel", headers=bearer_of(world, "sam"))
    assert (sam.status_code, sam.json()["reason"]) == (403, "level_insufficient")
    cancelled = await client.post(f"/v1/runs/{run_id}/cancel", headers=bearer_of(world, "alex"))
    assert cancelled.status_code == 200
    assert (cancelled.json()["state"], cancelled.json()["state_reason"]) == (
        "cancelled",
        "user_cancelled",
    )


async def test_ack_heartbeat_and_people_refused(client: ContractClient, world: DemoWorld) -> None:
    await trigger(client, world)
    feed = await poll(client, world)
    ack = await client.post(
        "/v1/agent/events/ack",
        json={"through_seq": feed["next_after"]},
        headers=bearer_of(world, "lotse"),
    )
    assert ack.status_code == 204
    assert (await poll(client, world))["events"] == []
    beat = await client.put(
        "/v1/agent/heartbeat",
        json={"capabilities": {"followups": "steer"}},
        headers=bearer_of(world, "lotse"),
    )
    assert beat.status_code == 204
    bad = await client.put(
        "/v1/agent/heartbeat",
        json={"capabilities": {"followups": "sometimes"}},
        headers=bearer_of(world, "lotse"),
    )
    assert bad.status_code == 400
    person = await client.get("/v1/agent/events", headers=bearer_of(world, "alex"))
    assert person.status_code == 403


async def test_unknown_run_is_not_found(client: ContractClient, world: DemoWorld) -> None:
    unknown = await client.get(
        "/v1/runs/01900000-0000-7000-8000-0000000fffff", headers=bearer_of(world, "alex")
    )
    assert (unknown.status_code, unknown.json()["code"]) == (404, "not_found")
