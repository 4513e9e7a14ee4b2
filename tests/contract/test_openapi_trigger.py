"""The OpenAPI document shows the ``trigger`` member of both create answers and replays."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.http import ContractClient, bearer_of
from tests.support.openapi import assert_matches_openapi, response_schema
from tests.support.scenario import main_thread
from turnkeeper.application.demo import DemoWorld

CREATES = ("/v1/channels/{channel_id}/threads", "/v1/threads/{thread_id}/messages")


def resolved(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    found: dict[str, Any] = spec["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    return found


@pytest.mark.parametrize("path", CREATES)
@pytest.mark.parametrize("status", [200, 201])
async def test_both_answers_require_the_trigger(
    client: ContractClient, path: str, status: int
) -> None:
    answer = resolved(client.spec, response_schema(client.spec, "post", path, status))
    assert "trigger" in answer["required"]
    trigger = resolved(client.spec, answer["properties"]["trigger"])
    assert trigger["required"] == ["outcome"]
    assert trigger["properties"]["outcome"]["enum"] == ["run_opened", "followup", "refused", "none"]
    assert set(trigger["properties"]) == {"outcome", "run_id", "mode", "reason"}


@pytest.mark.parametrize(
    "trigger",
    [
        {"outcome": "dropped"},
        {"outcome": "followup", "mode": "later"},
        {"outcome": "none", "run_id": "not-a-uuid"},
        {"run_id": "01900000-0000-7000-8000-000000000001"},
    ],
)
async def test_a_trigger_outside_the_contract_breaks_the_schema(
    client: ContractClient, world: DemoWorld, trigger: dict[str, Any]
) -> None:
    path = "/v1/threads/{thread_id}/messages"
    answer = await client.post(
        f"/v1/threads/{main_thread(world, 'eskalation')}/messages",
        json={"client_msg_id": "m1", "content": "hello"},
        headers=bearer_of(world, "alex"),
    )
    body = answer.json()
    assert_matches_openapi(client.spec, "post", path, 201, body)
    with pytest.raises(AssertionError):
        assert_matches_openapi(client.spec, "post", path, 201, {**body, "trigger": trigger})
