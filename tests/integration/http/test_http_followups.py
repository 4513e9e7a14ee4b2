"""Follow-ups over HTTP (seed followups-steer-and-queue): the run document and PATCH route.

Every answer is validated against /openapi.json by the ContractClient. The adapter side
is plain HTTP with Lotse's token (poll, start, await-input, resume, finish, PATCH).
Sam gets trigger on Support/Allgemein through the admin service, as in the scenario tests
of tests/integration/test_followups.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.http import ContractClient, bearer_of
from tests.support.scenario import main_thread
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.domain.world import Level, ResourceKind


@pytest.fixture
async def ext(services: Services, world: DemoWorld) -> DemoWorld:
    """Sam with trigger on Allgemein (instead of read); Lotse reports steer."""
    robin, sam = world.principal("robin"), world.principal("sam")
    async with services.uow() as uow:
        grants = await uow.grants.for_principal(sam.id)
    (read,) = [g for g in grants if g.resource_id == world.channels["allgemein"].id]
    await services.admin.delete_grant(robin, read.id)
    await services.admin.create_grant(
        robin,
        principal_id=sam.id,
        resource_kind=ResourceKind.CHANNEL,
        resource_id=world.channels["allgemein"].id,
        level=Level.TRIGGER,
    )
    return world


async def heartbeat(client: ContractClient, world: DemoWorld, followups: str) -> None:
    beat = await client.put(
        "/v1/agent/heartbeat",
        json={"capabilities": {"followups": followups}},
        headers=bearer_of(world, "lotse"),
    )
    assert beat.status_code == 204


async def write(client: ContractClient, world: DemoWorld, who: str, cid: str) -> str:
    answer = await client.post(
        f"/v1/threads/{main_thread(world, 'allgemein')}/messages",
        json={"client_msg_id": cid, "content": f"note {cid}"},
        headers=bearer_of(world, who),
    )
    assert answer.status_code == 201
    return str(answer.json()["id"])


async def feed(client: ContractClient, world: DemoWorld) -> dict[str, Any]:
    answer = await client.get("/v1/agent/events", headers=bearer_of(world, "lotse"))
    assert answer.status_code == 200
    body: dict[str, Any] = answer.json()
    return body


async def running(client: ContractClient, world: DemoWorld) -> tuple[str, str]:
    """Alex triggers; Lotse polls, acks and starts: (run id, start token)."""
    await write(client, world, "alex", "trigger")
    page = await feed(client, world)
    (invocation,) = [e for e in page["events"] if e["type"] == "agent.invocation"]
    await client.post(
        "/v1/agent/events/ack",
        json={"through_seq": page["next_after"]},
        headers=bearer_of(world, "lotse"),
    )
    run_id = str(invocation["payload"]["run_id"])
    token = str(invocation["invocation_token"])
    started = await client.post(
        f"/v1/runs/{run_id}/start",
        json={"invocation_token": token},
        headers=bearer_of(world, "lotse"),
    )
    assert (started.status_code, started.json()["state"]) == (200, "running")
    return run_id, token


async def patch(
    client: ContractClient, world: DemoWorld, run_id: str, base: int, *ops: tuple[str, str]
) -> Any:
    return await client.request(
        "PATCH",
        f"/v1/runs/{run_id}",
        json={
            "base_version": base,
            "ops": [{"op": "replace", "path": path, "value": value} for path, value in ops],
        },
        headers=bearer_of(world, "lotse"),
    )


def state_path(message_id: str) -> str:
    return f"/followups/{message_id}/state"


class TestRunDocumentListsFollowups:
    async def test_followups_keyed_by_message_id_and_etag_is_the_version(
        self, client: ContractClient, ext: DemoWorld
    ) -> None:
        world = ext
        await heartbeat(client, world, "steer")
        run_id, _ = await running(client, world)
        one = await write(client, world, "sam", "f1")
        two = await write(client, world, "alex", "f2")
        for reader in ("sam", "alex", "robin"):
            answer = await client.get(f"/v1/runs/{run_id}", headers=bearer_of(world, reader))
            assert answer.status_code == 200
            document = answer.json()
            assert answer.headers["etag"] == f'"{document["version"]}"' == '"4"'
            assert document["followups"] == {one: {"state": "queued"}, two: {"state": "queued"}}
        moved = await patch(client, world, run_id, 4, (state_path(one), "absorbed"))
        assert moved.headers["etag"] == '"5"'
        assert moved.json()["followups"] == {
            one: {"state": "absorbed"},
            two: {"state": "queued"},
        }

    async def test_agent_followup_events_name_the_message_only_by_id(
        self, client: ContractClient, ext: DemoWorld
    ) -> None:
        world = ext
        await heartbeat(client, world, "steer")
        run_id, _ = await running(client, world)
        followup = await write(client, world, "sam", "f1")
        page = await feed(client, world)
        (event,) = [e for e in page["events"] if e["type"] == "agent.followup"]
        assert event["payload"] == {
            "run_id": run_id,
            "thread_id": str(main_thread(world, "allgemein")),
            "message_id": followup,
        }
        assert event["resource"] == {"kind": "run", "id": run_id}
        assert isinstance(event["invocation_token"], str)
        assert "note f1" not in str(event)
        assert "redelivered" not in event


class TestPatchRoute:
    async def test_delivered_then_absorbed(self, client: ContractClient, ext: DemoWorld) -> None:
        world = ext
        await heartbeat(client, world, "steer")
        run_id, _ = await running(client, world)
        followup = await write(client, world, "sam", "f1")
        delivered = await patch(client, world, run_id, 3, (state_path(followup), "delivered"))
        assert (delivered.status_code, delivered.headers["etag"]) == (200, '"4"')
        assert delivered.json()["followups"] == {followup: {"state": "delivered"}}
        history = await client.get(
            f"/v1/threads/{main_thread(world, 'allgemein')}/messages",
            headers=bearer_of(world, "sam"),
        )
        (shown,) = [m for m in history.json()["messages"] if m["id"] == followup]
        assert shown["trigger_state"] == "followup_delivered"
        again = await patch(client, world, run_id, 4, (state_path(followup), "delivered"))
        assert (again.status_code, again.json()["version"]) == (200, 4)
        absorbed = await patch(client, world, run_id, 4, (state_path(followup), "absorbed"))
        assert (absorbed.status_code, absorbed.json()["version"]) == (200, 5)

    async def test_base_version_conflict_carries_current(
        self, client: ContractClient, ext: DemoWorld
    ) -> None:
        world = ext
        await heartbeat(client, world, "steer")
        run_id, _ = await running(client, world)
        followup = await write(client, world, "sam", "f1")
        stale = await patch(client, world, run_id, 2, (state_path(followup), "delivered"))
        assert stale.status_code == 409
        problem = stale.json()
        assert problem["code"] == "base_version_conflict"
        current = await client.get(f"/v1/runs/{run_id}", headers=bearer_of(world, "lotse"))
        assert problem["current"] == current.json()
        assert problem["current"]["followups"] == {followup: {"state": "queued"}}
        rebased = await patch(
            client,
            world,
            run_id,
            problem["current"]["version"],
            (state_path(followup), "delivered"),
        )
        assert rebased.status_code == 200

    async def test_backward_is_invalid_state_transition(
        self, client: ContractClient, ext: DemoWorld
    ) -> None:
        world = ext
        await heartbeat(client, world, "steer")
        run_id, _ = await running(client, world)
        followup = await write(client, world, "sam", "f1")
        await patch(client, world, run_id, 3, (state_path(followup), "absorbed"))
        before = (await client.get(f"/v1/runs/{run_id}", headers=bearer_of(world, "lotse"))).json()
        back = await patch(client, world, run_id, 4, (state_path(followup), "delivered"))
        assert (back.status_code, back.json()["code"]) == (409, "invalid_state_transition")
        after = (await client.get(f"/v1/runs/{run_id}", headers=bearer_of(world, "lotse"))).json()
        assert after == before

    @pytest.mark.parametrize(
        "path",
        [
            "/followups/01900000-0000-7000-8000-0000000fffff/state",
            "/followups/not-an-id/state",
            "/followups",
            "/state",
            "/followups/{trigger}/state",
            "/followups/{followup}/state\n",
            "/followups/{followup}/state/",
            "/followups/{hex}/state",
            "/followups/{{{followup}}}/state",
            "/followups/urn:uuid:{followup}/state",
        ],
        ids=[
            "unknown-id",
            "bad-id",
            "no-message",
            "other-member",
            "trigger-message",
            "trailing-line-break",
            "trailing-slash",
            # Other spellings of the follow-up's id name no member of the run document
            # (capitals: tests/unit/test_run_patch_paths.py, these ids have no letters).
            "no-hyphens",
            "braces",
            "urn",
        ],
    )
    async def test_target_missing(self, client: ContractClient, ext: DemoWorld, path: str) -> None:
        world = ext
        await heartbeat(client, world, "steer")
        run_id, _ = await running(client, world)
        followup = await write(client, world, "sam", "f1")
        document = (
            await client.get(f"/v1/runs/{run_id}", headers=bearer_of(world, "lotse"))
        ).json()
        target = path.format(
            trigger=document["triggering_message_id"],
            followup=followup,
            hex=followup.replace("-", ""),
        )
        for ops, index in [
            ([(target, "delivered")], 0),
            ([(state_path(followup), "delivered"), (target, "delivered")], 1),
        ]:
            missing = await patch(client, world, run_id, 3, *ops)
            assert missing.status_code == 400
            problem = missing.json()
            assert problem["code"] == "validation_failed"
            assert problem["errors"] == [
                {"pointer": f"/ops/{index}/path", "code": "patch_target_missing"}
            ]
        unchanged = await client.get(f"/v1/runs/{run_id}", headers=bearer_of(world, "lotse"))
        assert unchanged.json()["followups"] == {followup: {"state": "queued"}}
        assert unchanged.headers["etag"] == '"3"'

    async def test_values_other_than_delivered_and_absorbed_are_refused(
        self, client: ContractClient, ext: DemoWorld
    ) -> None:
        world = ext
        await heartbeat(client, world, "steer")
        run_id, _ = await running(client, world)
        followup = await write(client, world, "sam", "f1")
        for value in ("queued", "deferred", "discarded"):
            refused = await patch(client, world, run_id, 3, (state_path(followup), value))
            assert (refused.status_code, refused.json()["code"]) == (400, "validation_failed")

    async def test_only_the_runs_agent(self, client: ContractClient, ext: DemoWorld) -> None:
        world = ext
        await heartbeat(client, world, "steer")
        run_id, _ = await running(client, world)
        followup = await write(client, world, "sam", "f1")
        for who, status in [("texter", 403), ("alex", 403)]:
            answer = await client.request(
                "PATCH",
                f"/v1/runs/{run_id}",
                json={
                    "base_version": 3,
                    "ops": [{"op": "replace", "path": state_path(followup), "value": "delivered"}],
                },
                headers=bearer_of(world, who),
            )
            assert answer.status_code == status


class TestAnswerToWaitingInputOverHttp:
    @pytest.mark.parametrize("mode", ["steer", "queue"])
    async def test_start_token_superseded_followup_token_resumes(
        self, client: ContractClient, ext: DemoWorld, mode: str
    ) -> None:
        world = ext
        lotse = bearer_of(world, "lotse")
        await heartbeat(client, world, mode)
        run_id, start_token = await running(client, world)
        waiting = await client.post(f"/v1/runs/{run_id}/await-input", json={}, headers=lotse)
        assert waiting.json()["state"] == "waiting_input"
        answer = await write(client, world, "alex", "answer")
        (event,) = [
            e for e in (await feed(client, world))["events"] if e["type"] == "agent.followup"
        ]
        assert event["payload"]["message_id"] == answer
        refused = await client.post(
            f"/v1/runs/{run_id}/resume", json={"invocation_token": start_token}, headers=lotse
        )
        assert refused.status_code == 403
        assert (refused.json()["code"], refused.json()["reason"]) == (
            "invocation_token_invalid",
            "superseded",
        )
        assert start_token not in refused.text
        resumed = await client.post(
            f"/v1/runs/{run_id}/resume",
            json={"invocation_token": event["invocation_token"]},
            headers=lotse,
        )
        assert (resumed.status_code, resumed.json()["state"]) == (200, "running")
