"""Create answers say what became of the message (API.md Trigger), over HTTP on both stores.

POST /v1/threads/{id}/messages answers the Message as committed plus ``trigger``;
POST /v1/channels/{id}/threads answers ``{thread, message, trigger}`` with the thread's
latest_seq counting the run anchor. Every outcome (run_opened, followup in steer, queue
and none, refused, none) is checked on the first answer (201) and on its replay (200 +
``Idempotent-Replay: true``), also after the run, the follow-up and the agent's reported
capability changed. Every answer is validated against /openapi.json.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
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
from tests.support.scenario import main_thread
from turnkeeper.adapters.client import AppliedFollowupMode, Trigger, TriggerOutcome, wire
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld


@pytest.fixture
async def client(services: Services, world: DemoWorld) -> AsyncIterator[ContractClient]:
    """A checked client over the parametrised store; Sam may trigger in Allgemein."""
    await sam_may_trigger(services, world)
    async with contract_client(services) as checked:
        yield checked


def created(answer: httpx.Response) -> dict[str, Any]:
    assert answer.status_code == 201, answer.text
    assert "idempotent-replay" not in answer.headers
    body: dict[str, Any] = answer.json()
    return body


def replayed(answer: httpx.Response) -> dict[str, Any]:
    assert answer.status_code == 200, answer.text
    assert answer.headers["idempotent-replay"] == "true"
    body: dict[str, Any] = answer.json()
    return body


def without_trigger(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "trigger"}


class TestRunOpened:
    async def test_the_answer_shows_the_committed_message_and_the_run(
        self, client: ContractClient, world: DemoWorld
    ) -> None:
        first = created(await say(client, world, "alex", "m1"))
        assert (first["trigger_state"], first["version"]) == ("received", 2)
        anchors = [m for m in (await history(client, world)).values() if m["kind"] == "run"]
        (anchor,) = anchors
        assert first["trigger"] == {"outcome": "run_opened", "run_id": anchor["run_id"]}
        run = await run_document(client, world, anchor["run_id"])
        assert run["triggering_message_id"] == first["id"]
        # The answer is the message as stored, and the replay answers the same.
        assert (await history(client, world))[first["id"]] == without_trigger(first)
        assert replayed(await say(client, world, "alex", "m1")) == first

    async def test_a_later_replay_shows_the_message_now_and_the_same_trigger(
        self, client: ContractClient, world: DemoWorld
    ) -> None:
        first = created(await say(client, world, "alex", "m1"))
        await start(client, world)
        again = replayed(await say(client, world, "alex", "m1"))
        assert (again["trigger_state"], again["version"]) == ("working", 4)
        assert again["trigger"] == first["trigger"]


class TestFollowup:
    @pytest.mark.parametrize(
        ("reported", "mode"), [("steer", "steer"), ("queue", "queue"), (None, "none")]
    )
    async def test_the_mode_that_applies_is_reported_and_kept(
        self, client: ContractClient, world: DemoWorld, reported: str | None, mode: str
    ) -> None:
        await heartbeat(client, world, reported)
        created(await say(client, world, "alex", "trigger"))
        run_id = await start(client, world)
        followup = created(await say(client, world, "sam", "f1"))
        assert (followup["trigger_state"], followup["version"]) == ("received", 2)
        assert followup["trigger"] == {"outcome": "followup", "run_id": run_id, "mode": mode}
        assert replayed(await say(client, world, "sam", "f1")) == followup

        # The agent reports something else, the run ends and the follow-up triggers the
        # follow-on run: the replay still tells what happened to the message then.
        await heartbeat(client, world, "steer" if reported != "steer" else "queue")
        finish = await client.post(
            f"/v1/runs/{run_id}/finish",
            json={"state": "completed"},
            headers=bearer_of(world, "lotse"),
        )
        assert finish.status_code == 200
        later = replayed(await say(client, world, "sam", "f1"))
        assert later["trigger"] == followup["trigger"]
        follow_on = [
            m["run_id"] for m in (await history(client, world)).values() if m["kind"] == "run"
        ]
        assert len(follow_on) == 2
        assert (await run_document(client, world, follow_on[1]))["triggering_message_id"] == (
            followup["id"]
        )

    async def test_a_moved_followup_keeps_the_run_it_was_accepted_into(
        self, client: ContractClient, world: DemoWorld
    ) -> None:
        await heartbeat(client, world, "queue")
        created(await say(client, world, "alex", "trigger"))
        run_id = await start(client, world)
        created(await say(client, world, "sam", "f1"))
        second = created(await say(client, world, "alex", "f2"))
        finish = await client.post(
            f"/v1/runs/{run_id}/finish",
            json={"state": "completed"},
            headers=bearer_of(world, "lotse"),
        )
        assert finish.status_code == 200
        anchors = [
            m["run_id"] for m in (await history(client, world)).values() if m["kind"] == "run"
        ]
        moved_to = await run_document(client, world, anchors[1])
        assert second["id"] in moved_to["followups"]
        again = replayed(await say(client, world, "alex", "f2"))
        assert again["trigger"] == {"outcome": "followup", "run_id": run_id, "mode": "queue"}

    async def test_a_followup_to_a_waiting_run_is_delivered_now(
        self, client: ContractClient, world: DemoWorld
    ) -> None:
        await heartbeat(client, world, "queue")
        created(await say(client, world, "alex", "trigger"))
        run_id = await start(client, world)
        waiting = await client.post(
            f"/v1/runs/{run_id}/await-input",
            json={"question": "which printer?"},
            headers=bearer_of(world, "lotse"),
        )
        assert waiting.status_code == 200
        answer = created(await say(client, world, "sam", "f1"))
        assert answer["trigger"] == {"outcome": "followup", "run_id": run_id, "mode": "steer"}
        page = await agent_feed(client, world)
        assert [
            e["payload"]["message_id"] for e in page["events"] if e["type"] == "agent.followup"
        ] == [answer["id"]]


class TestRefusedAndNone:
    async def test_a_mention_that_cannot_trigger_is_refused_with_its_reason(
        self, client: ContractClient, world: DemoWorld
    ) -> None:
        # Assistent operates Research and is no guest of Allgemein.
        refused = created(await say(client, world, "alex", "m1", mentions=("assistent",)))
        assert (refused["trigger_state"], refused["trigger_state_reason"]) == (
            "failed",
            "agent_not_allowed_here",
        )
        assert refused["trigger"] == {"outcome": "refused", "reason": "agent_not_allowed_here"}
        assert replayed(await say(client, world, "alex", "m1", mentions=("assistent",))) == refused

    async def test_another_agent_during_the_run_is_refused(
        self, client: ContractClient, world: DemoWorld
    ) -> None:
        created(await say(client, world, "alex", "trigger"))
        await start(client, world)
        refused = created(await say(client, world, "alex", "m2", mentions=("texter",)))
        assert refused["trigger"] == {"outcome": "refused", "reason": "run_active_other_agent"}

    async def test_nothing_to_trigger_answers_none(
        self, client: ContractClient, world: DemoWorld
    ) -> None:
        # Eskalation's main thread: no free response, and no mention.
        quiet = created(await say(client, world, "alex", "m1", channel="eskalation"))
        assert (quiet["version"], "trigger_state" in quiet) == (1, False)
        assert quiet["trigger"] == {"outcome": "none"}
        assert replayed(await say(client, world, "alex", "m1", channel="eskalation")) == quiet

    async def test_an_agents_message_answers_none(
        self, client: ContractClient, world: DemoWorld
    ) -> None:
        answer = created(
            await client.post(
                f"/v1/threads/{main_thread(world, 'allgemein')}/messages",
                json={
                    "client_msg_id": "a1",
                    "content": "on it",
                    "mentions": [str(world.principal("lotse").id)],
                },
                headers=bearer_of(world, "texter"),
            )
        )
        assert (answer["origin"], answer["trigger"]) == ("agent", {"outcome": "none"})


class TestCreateThread:
    async def test_the_thread_counts_the_anchor_and_the_trigger_names_the_run(
        self, client: ContractClient, world: DemoWorld
    ) -> None:
        body = {"title": "Printer", "first_message": {"client_msg_id": "t1", "content": "jam"}}
        url = f"/v1/channels/{world.channels['bulletin'].id}/threads"
        first = created(await client.post(url, json=body, headers=bearer_of(world, "alex")))
        thread, message = first["thread"], first["message"]
        assert thread["latest_seq"] == 2
        assert (message["trigger_state"], message["version"]) == ("received", 2)
        read = await client.get(f"/v1/threads/{thread['id']}", headers=bearer_of(world, "alex"))
        assert read.json() == thread
        page = await client.get(
            f"/v1/threads/{thread['id']}/messages", headers=bearer_of(world, "alex")
        )
        first_message, anchor = page.json()["messages"]
        assert first_message == message
        assert first["trigger"] == {"outcome": "run_opened", "run_id": anchor["run_id"]}
        again = replayed(await client.post(url, json=body, headers=bearer_of(world, "alex")))
        assert again == first

    async def test_a_first_message_that_triggers_nothing(
        self, client: ContractClient, world: DemoWorld
    ) -> None:
        # Reports has no operator.
        url = f"/v1/channels/{world.channels['reports'].id}/threads"
        body = {"title": "Week", "first_message": {"client_msg_id": "t1", "content": "done"}}
        first = created(await client.post(url, json=body, headers=bearer_of(world, "alex")))
        assert first["thread"]["latest_seq"] == 1
        assert first["trigger"] == {"outcome": "none"}


class TestTheRuntimeClientModels:
    async def test_every_outcome_parses_into_the_clients_trigger(
        self, client: ContractClient, world: DemoWorld
    ) -> None:
        await heartbeat(client, world, "queue")
        opened = wire.posted_message(await say(client, world, "alex", "trigger"))
        assert opened.trigger.outcome is TriggerOutcome.RUN_OPENED
        assert opened.trigger.run_id is not None
        assert (opened.message.origin, opened.replayed) == ("human", False)
        run_id = await start(client, world)
        assert opened.trigger.run_id == run_id
        followup = wire.posted_message(await say(client, world, "sam", "f1"))
        assert followup.trigger == Trigger(
            outcome=TriggerOutcome.FOLLOWUP, run_id=run_id, mode=AppliedFollowupMode.QUEUE
        )
        refused = wire.posted_message(await say(client, world, "alex", "m2", mentions=("texter",)))
        assert refused.trigger == Trigger(
            outcome=TriggerOutcome.REFUSED, reason="run_active_other_agent"
        )
        quiet = wire.posted_message(await say(client, world, "alex", "m3", channel="eskalation"))
        assert quiet.trigger == Trigger(outcome=TriggerOutcome.NONE)
        again = wire.posted_message(await say(client, world, "sam", "f1"))
        assert (again.replayed, again.trigger) == (True, followup.trigger)
