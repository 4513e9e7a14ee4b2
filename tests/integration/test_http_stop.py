"""A person's stop is a stop (AG-13 "stop with open follow-ups"), over HTTP on both stores.

Alex stops Lotse's running run that holds two open follow-ups (one of Sam's, one of
Alex's, the second already delivered); Lotse confirms with ``finish cancelled``. Whatever
reason Lotse gives (the seed's ``user_cancelled``, another one, or none), the run ends
``cancelled / user_cancelled``, both follow-ups are discarded with their messages
``cancelled / user_cancelled``, and no follow-on run starts. A finish ``cancelled``
without a person's request keeps the agent's reason and defers as before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.http import ContractClient, bearer_of, contract_client
from tests.support.http_steps import (
    agent_feed,
    heartbeat,
    history,
    run_document,
    sam_may_trigger,
    say,
    start,
)
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld


@pytest.fixture
async def client(services: Services, world: DemoWorld) -> AsyncIterator[ContractClient]:
    """A checked client over the parametrised store; Sam may trigger in Allgemein."""
    await sam_may_trigger(services, world)
    async with contract_client(services) as checked:
        yield checked


async def finish(
    client: ContractClient, world: DemoWorld, run_id: str, body: dict[str, Any]
) -> dict[str, Any]:
    answer = await client.post(
        f"/v1/runs/{run_id}/finish", json=body, headers=bearer_of(world, "lotse")
    )
    assert answer.status_code == 200, answer.text
    ended: dict[str, Any] = answer.json()
    return ended


async def with_two_followups(client: ContractClient, world: DemoWorld) -> tuple[str, str, str]:
    """Alex triggers, Lotse starts; Sam and Alex add follow-ups; Lotse takes Alex's."""
    await heartbeat(client, world, "steer")
    assert (await say(client, world, "alex", "trigger")).status_code == 201
    run_id = await start(client, world)
    one = (await say(client, world, "sam", "f1")).json()["id"]
    two = (await say(client, world, "alex", "f2")).json()["id"]
    version = (await run_document(client, world, run_id))["version"]
    delivered = await client.request(
        "PATCH",
        f"/v1/runs/{run_id}",
        json={
            "base_version": version,
            "ops": [{"op": "replace", "path": f"/followups/{two}/state", "value": "delivered"}],
        },
        headers=bearer_of(world, "lotse"),
    )
    assert delivered.status_code == 200, delivered.text
    return run_id, one, two


class TestAPersonsStopIsAStop:
    @pytest.mark.parametrize(
        "body",
        [
            {"state": "cancelled", "reason": "user_cancelled"},
            {"state": "cancelled", "reason": "tool_stopped"},
            {"state": "cancelled"},
        ],
        ids=["seed-reason", "other-reason", "no-reason"],
    )
    async def test_confirmed_stop_discards_the_followups_and_starts_nothing(
        self, client: ContractClient, world: DemoWorld, body: dict[str, Any]
    ) -> None:
        run_id, one, two = await with_two_followups(client, world)
        requested = await client.post(f"/v1/runs/{run_id}/cancel", headers=bearer_of(world, "alex"))
        assert (requested.status_code, requested.json()["cancel_requested"]) == (200, True)
        await agent_feed(client, world)  # run.cancel_requested reaches Lotse

        ended = await finish(client, world, run_id, body)

        assert (ended["state"], ended["state_reason"]) == ("cancelled", "user_cancelled")
        assert ended["followups"] == {one: {"state": "discarded"}, two: {"state": "discarded"}}
        shown = await history(client, world)
        for stopped in (one, two):
            assert (shown[stopped]["trigger_state"], shown[stopped]["trigger_state_reason"]) == (
                "cancelled",
                "user_cancelled",
            )
        # No follow-on run: no new anchor in the thread, nothing new for Lotse.
        assert [m["run_id"] for m in shown.values() if m["kind"] == "run"] == [run_id]
        assert (await agent_feed(client, world))["events"] == []
        # Confirming again with the same end changes nothing.
        assert await finish(client, world, run_id, body) == ended

    async def test_cancelled_without_a_persons_request_keeps_the_agents_reason(
        self, client: ContractClient, world: DemoWorld
    ) -> None:
        run_id, one, two = await with_two_followups(client, world)

        ended = await finish(client, world, run_id, {"state": "cancelled", "reason": "gave_up"})

        assert (ended["state"], ended["state_reason"]) == ("cancelled", "gave_up")
        # Sam's, first in thread order, triggers the follow-on run; Alex's moves to it.
        assert ended["followups"] == {one: {"state": "deferred"}}
        shown = await history(client, world)
        anchors = [m["run_id"] for m in shown.values() if m["kind"] == "run"]
        assert len(anchors) == 2
        assert anchors[0] == run_id
        follow_on = await run_document(client, world, anchors[1])
        assert (follow_on["triggering_message_id"], follow_on["followups"]) == (
            one,
            {two: {"state": "queued"}},
        )
