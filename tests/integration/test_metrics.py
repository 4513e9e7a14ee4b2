"""GET /metrics over HTTP, on the memory adapter and on PostgreSQL (API.md, Operations).

Every count is read back from /metrics as Prometheus would: a committed change counts
once, a unit that rolls back counts nothing, a unit that is retried counts once, and no
label ever carries an id, a handle, a target key or a token.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from psycopg_pool import AsyncConnectionPool

from tests.integration.observability_support import (
    SEND,
    UUID_PATTERN,
    FailingCommits,
    allgemein,
    client_of,
    eskalation,
    invocation,
    post,
    scrape,
    send_body,
    start,
    token_of,
)
from tests.support.fakes import TEST_KEY, FakeClock, SequentialIds
from tests.support.json_log import captured_json_log, json_records
from turnkeeper.adapters.observability.metrics import attach_metrics
from turnkeeper.adapters.postgres.uow import Conn
from turnkeeper.adapters.tokens import JwtSigner
from turnkeeper.application.bootstrap import Services, build_services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.ports import UnitOfWorkFactory
from turnkeeper.application.settings import Settings
from turnkeeper.domain.world import Level, ResourceKind

#: Every metric of API.md the server exposes (the partial-held counter is the client's).
SERVER_METRICS = {
    "turnkeeper_agent_send_freshness",
    "turnkeeper_agent_send_freshness_seq_delta",
    "turnkeeper_agent_send_idempotency",
    "turnkeeper_agent_send_compat",
    "turnkeeper_messages_created",
    "turnkeeper_runs_opened",
    "turnkeeper_runs_ended",
    "turnkeeper_run_duration_seconds",
    "turnkeeper_followups",
    "turnkeeper_invocation_denied",
    "turnkeeper_http_requests",
    "turnkeeper_http_request_duration_seconds",
    "turnkeeper_event_stream_clients",
    "turnkeeper_db_pool_connections",
}
#: Seconds a run of the duration test runs (the fake clock moves, nothing sleeps).
RUN_SECONDS = 42


async def test_every_metric_of_the_contract_is_exposed(services: Services) -> None:
    async with client_of(services) as client:
        samples = await scrape(client)
    assert samples.families >= SERVER_METRICS
    assert samples.value("turnkeeper_event_stream_clients") == 0


async def test_messages_are_counted_once_by_origin(services: Services, world: DemoWorld) -> None:
    async with client_of(services) as client:
        before = await scrape(client)
        thread = eskalation(world)
        human = await post(client, world, "alex", thread, "m1", "Alex asks")
        assert human.status_code == 201
        # An idempotent replay stores nothing and counts nothing.
        again = await post(client, world, "alex", thread, "m1", "Alex asks")
        assert again.status_code == 200
        sent = await client.post(
            SEND, json=send_body(thread, "a1", 1, "Lotse answers"), headers=token_of(world, "lotse")
        )
        assert sent.json()["state"] == "sent"
        after = await scrape(client)
    for origin, added in (("human", 1), ("agent", 1), ("system", 0), ("app", 0)):
        name = "turnkeeper_messages_created_total"
        assert after.value(name, origin=origin) - before.value(name, origin=origin) == added


async def test_freshness_outcomes_idempotency_and_seq_delta(
    services: Services, world: DemoWorld
) -> None:
    thread = eskalation(world)
    lotse = token_of(world, "lotse")
    async with client_of(services) as client:
        await client.post(SEND, json=send_body(thread, "s1", 0, "First"), headers=lotse)
        await client.post(SEND, json=send_body(thread, "s1", 0, "First"), headers=lotse)
        for cid in ("h1", "h2", "h3"):
            await post(client, world, "alex", thread, cid, "Alex again")
        held = await client.post(SEND, json=send_body(thread, "s2", 1, "Second"), headers=lotse)
        assert held.json()["state"] == "held"
        # A refused send (its target key is wrong) is no outcome of the gate.
        wrong = send_body(thread, "s3", 4, "Third")
        wrong["freshness"]["target_key"] = "thread:elsewhere"
        assert (await client.post(SEND, json=wrong, headers=lotse)).status_code == 400
        samples = await scrape(client)
    name = "turnkeeper_agent_send_freshness_total"
    for state in ("sent", "already_sent", "held"):
        assert samples.value(name, state=state, target_type="thread") == 1, state
    assert samples.value("turnkeeper_agent_send_idempotency_total", target_type="thread") == 1
    assert samples.value("turnkeeper_agent_send_compat_total", target_type="thread") == 0
    delta = "turnkeeper_agent_send_freshness_seq_delta"
    assert samples.value(f"{delta}_count", target_type="thread") == 1
    assert samples.value(f"{delta}_sum", target_type="thread") == 3
    assert samples.value(f"{delta}_bucket", target_type="thread", le="2.0") == 0
    assert samples.value(f"{delta}_bucket", target_type="thread", le="3.0") == 1


async def test_sends_without_freshness_take_the_compatibility_count(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services = build_services(
        uow_factory,
        Settings(freshness_required_for_agents=False),
        clock,
        SequentialIds(),
        JwtSigner(TEST_KEY),
    )
    world = await build_demo_world(services)
    thread = eskalation(world)
    ungated = {"target": thread, "content": "Hello", "client_message_id": "c1"}
    async with client_of(services) as client:
        states = []
        for _ in range(2):
            answer = await client.post(SEND, json=ungated, headers=token_of(world, "lotse"))
            assert answer.status_code == 200
            states.append(answer.json()["state"])
        samples = await scrape(client)
    assert states == ["sent", "already_sent"]
    # The retry wrote nothing: it is counted as a retry only.
    assert samples.value("turnkeeper_agent_send_compat_total", target_type="thread") == 1
    assert samples.value("turnkeeper_agent_send_idempotency_total", target_type="thread") == 1
    assert samples.value("turnkeeper_messages_created_total", origin="agent") == 1
    name = "turnkeeper_agent_send_freshness_total"
    assert all(
        samples.value(name, state=s, target_type="thread") == 0
        for s in ("sent", "already_sent", "held")
    )


async def test_an_agents_create_message_and_thread_take_the_compatibility_count(
    services: Services, world: DemoWorld
) -> None:
    # createMessage and createThread are the agent's ungated compatibility path (DESIGN
    # section 9), with freshness.required_for_agents at its default (true).
    thread = eskalation(world)
    async with client_of(services) as client:
        posted = [await post(client, world, "lotse", thread, "c1", "Lotse, ungated")]
        # The replay stores nothing: it counts as a retry, never as a message written.
        posted.append(await post(client, world, "lotse", thread, "c1", "Lotse, ungated"))
        created = [
            await client.post(
                f"/v1/channels/{world.channels['eskalation'].id}/threads",
                json={"first_message": {"client_msg_id": "c2", "content": "A report"}},
                headers=token_of(world, "lotse"),
            )
            for _ in range(2)
        ]
        # A person's message is no agent send at all.
        assert (await post(client, world, "alex", thread, "p1", "Alex asks")).status_code == 201
        samples = await scrape(client)
    for first, replay in (posted, created):
        assert (first.status_code, replay.status_code) == (201, 200)
        assert replay.headers["idempotent-replay"] == "true"
    assert samples.value("turnkeeper_agent_send_compat_total", target_type="thread") == 2
    assert samples.value("turnkeeper_agent_send_idempotency_total", target_type="thread") == 2
    assert samples.value("turnkeeper_messages_created_total", origin="agent") == 2
    name = "turnkeeper_agent_send_freshness_total"
    assert all(
        samples.value(name, state=s, target_type="thread") == 0
        for s in ("sent", "already_sent", "held")
    )


async def test_a_rolled_back_unit_counts_nothing(services: Services, world: DemoWorld) -> None:
    thread = allgemein(world)
    async with client_of(services) as client:
        before = await scrape(client)
        # The message is stored and its events appended before the runs subscriber
        # vetoes the unknown run: the whole unit rolls back.
        vetoed = await client.post(
            f"/v1/threads/{thread}/messages",
            json={
                "client_msg_id": "v1",
                "content": "Vetoed answer",
                "run_id": "01900000-0000-7000-8000-0000000fffff",
            },
            headers=token_of(world, "lotse"),
        )
        assert (vetoed.status_code, vetoed.json()["errors"][0]["code"]) == (400, "run_mismatch")
        after = await scrape(client)
    for origin in ("human", "agent", "system", "app"):
        name = "turnkeeper_messages_created_total"
        assert after.value(name, origin=origin) == before.value(name, origin=origin)
    history = await client_history(services, world, thread)
    assert "Vetoed answer" not in history


async def client_history(services: Services, world: DemoWorld, thread: str) -> list[str]:
    async with client_of(services) as client:
        page = await client.get(f"/v1/threads/{thread}/messages", headers=token_of(world, "alex"))
    return [m["content"] for m in page.json()["messages"]]


async def test_a_retried_unit_counts_once(
    uow_factory: UnitOfWorkFactory, settings: Settings, clock: FakeClock
) -> None:
    failing = FailingCommits(uow_factory)
    services = build_services(failing, settings, clock, SequentialIds(), JwtSigner(TEST_KEY))
    world = await build_demo_world(services)
    async with client_of(services) as client:
        before = await scrape(client)
        failing.failures = 2
        triggering = await post(client, world, "alex", allgemein(world), "r1", "Help, please")
        assert triggering.status_code == 201
        assert failing.failed == 2
        after = await scrape(client)
    added = {
        origin: after.value("turnkeeper_messages_created_total", origin=origin)
        - before.value("turnkeeper_messages_created_total", origin=origin)
        for origin in ("human", "system")
    }
    # Three attempts wrote the message and the run's anchor; one committed.
    assert added == {"human": 1, "system": 1}
    assert (
        after.value("turnkeeper_runs_opened_total") - before.value("turnkeeper_runs_opened_total")
        == 1
    )


async def test_a_retried_unit_logs_its_run_lines_once(
    uow_factory: UnitOfWorkFactory, settings: Settings, clock: FakeClock
) -> None:
    # Found by a black-box audit: a unit retried after a deadlock logged run_ended for
    # its rolled-back attempt as well (the metrics counted the committed one only).
    failing = FailingCommits(uow_factory)
    services = build_services(failing, settings, clock, SequentialIds(), JwtSigner(TEST_KEY))
    world = await build_demo_world(services)
    async with client_of(services) as client:
        with captured_json_log() as captured:
            failing.failures = 2
            assert (
                await post(client, world, "alex", allgemein(world), "l1", "Help")
            ).status_code == 201
            run_id, token = await invocation(client, world)
            await start(client, world, run_id, token)
            failing.failures = 2
            finished = await client.post(
                f"/v1/runs/{run_id}/finish",
                json={"state": "completed"},
                headers=token_of(world, "lotse"),
            )
            assert finished.status_code == 200
            assert failing.failed == 4
    lines = [r for r in json_records(captured) if r.get("event") in ("run_opened", "run_ended")]
    assert [(r["event"], r["run_id"]) for r in lines] == [
        ("run_opened", run_id),
        ("run_ended", run_id),
    ]
    assert (lines[1]["state"], lines[1]["reason"]) == ("completed", "none")


async def test_runs_opened_ended_and_their_duration(
    services: Services, world: DemoWorld, clock: FakeClock
) -> None:
    lotse = token_of(world, "lotse")
    async with client_of(services) as client:
        await post(client, world, "alex", allgemein(world), "t1", "Please help")
        run_id, token = await invocation(client, world)
        await start(client, world, run_id, token)
        clock.advance(RUN_SECONDS)
        finished = await client.post(
            f"/v1/runs/{run_id}/finish",
            json={"state": "failed", "reason": "the agent's own words"},
            headers=lotse,
        )
        assert finished.status_code == 200
        # Finishing again changes nothing and counts nothing.
        await client.post(
            f"/v1/runs/{run_id}/finish",
            json={"state": "failed", "reason": "the agent's own words"},
            headers=lotse,
        )
        samples = await scrape(client)
    assert samples.value("turnkeeper_runs_opened_total") == 1
    assert samples.value("turnkeeper_runs_ended_total", state="failed", reason="agent") == 1
    duration = "turnkeeper_run_duration_seconds"
    assert samples.value(f"{duration}_count", state="failed") == 1
    assert samples.value(f"{duration}_sum", state="failed") == RUN_SECONDS


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ("completed", "access_revoked"),
        ("failed", "channel_read_only"),
        ("failed", "access_revoked"),
        ("failed", "stale"),
    ],
)
async def test_an_agents_finish_with_a_servers_reason_is_refused_and_counts_nothing(
    services: Services, world: DemoWorld, state: str, reason: str
) -> None:
    # failed / access_revoked is how the server ends an invocation refused at delivery:
    # an agent may not give it, nor be counted as that refusal.
    lotse = token_of(world, "lotse")
    async with client_of(services) as client:
        await post(client, world, "alex", allgemein(world), "t1", "Please help")
        run_id, token = await invocation(client, world)
        await start(client, world, run_id, token)
        before = (await client.get(f"/v1/runs/{run_id}", headers=lotse)).json()
        refused = await client.post(
            f"/v1/runs/{run_id}/finish", json={"state": state, "reason": reason}, headers=lotse
        )
        after = (await client.get(f"/v1/runs/{run_id}", headers=lotse)).json()
        samples = await scrape(client)
    assert refused.status_code == 400
    assert refused.json()["code"] == "validation_failed"
    assert [(e["pointer"], e["code"]) for e in refused.json()["errors"]] == [
        ("/reason", "reserved")
    ]
    assert (after["state"], after["version"]) == ("running", before["version"])
    for end in ("completed", "failed", "cancelled"):
        assert samples.value("turnkeeper_runs_ended_total", state=end, reason=reason) == 0
        assert samples.value("turnkeeper_run_duration_seconds_count", state=end) == 0


async def test_an_agents_cancel_for_a_lost_right_counts_as_its_own_reason(
    services: Services, world: DemoWorld
) -> None:
    # Seed AG-13: an agent may cancel with access_revoked; the server did not end the run.
    lotse = token_of(world, "lotse")
    async with client_of(services) as client:
        await post(client, world, "alex", allgemein(world), "t1", "Please help")
        run_id, token = await invocation(client, world)
        await start(client, world, run_id, token)
        finished = await client.post(
            f"/v1/runs/{run_id}/finish",
            json={"state": "cancelled", "reason": "access_revoked"},
            headers=lotse,
        )
        samples = await scrape(client)
    assert (finished.status_code, finished.json()["state_reason"]) == (200, "access_revoked")
    assert samples.value("turnkeeper_runs_ended_total", state="cancelled", reason="agent") == 1
    name = "turnkeeper_runs_ended_total"
    assert samples.value(name, state="cancelled", reason="access_revoked") == 0


async def test_runs_ended_stale_by_the_stall_check(
    services: Services, world: DemoWorld, clock: FakeClock, settings: Settings
) -> None:
    async with client_of(services) as client:
        await post(client, world, "alex", allgemein(world), "t1", "Please help")
        run_id, token = await invocation(client, world)
        await start(client, world, run_id, token)
        clock.advance(settings.stall_after + timedelta(seconds=1))
        assert await services.runs.run_jobs_once() == {
            "queued_expiry": 0,
            "cancel_timeout": 0,
            "stall_check": 1,
            "agent_disabled": 0,
        }
        samples = await scrape(client)
    assert samples.value("turnkeeper_runs_ended_total", state="failed", reason="stale") == 1
    assert samples.value("turnkeeper_run_duration_seconds_sum", state="failed") == (
        (settings.stall_after + timedelta(seconds=1)).total_seconds()
    )


async def test_an_invocation_denied_at_delivery_is_counted_by_reason(
    services: Services, world: DemoWorld
) -> None:
    robin = token_of(world, "robin")
    alex = world.principal("alex")
    async with client_of(services) as client:
        await post(client, world, "alex", allgemein(world), "t1", "Please help")
        async with services.uow() as uow:
            grants = await uow.grants.for_principal(alex.id)
        for grant in grants:
            deleted = await client.delete(f"/v1/grants/{grant.id}", headers=robin)
            assert deleted.status_code == 204
        page = await client.get("/v1/agent/events", headers=token_of(world, "lotse"))
        assert [e for e in page.json()["events"] if e["type"] == "agent.invocation"] == []
        samples = await scrape(client)
    # The denial counts agent.invoke's reason; the run ends with its delivery reason.
    assert samples.value("turnkeeper_invocation_denied_total", reason="no_trigger_right") == 1
    assert (
        samples.value("turnkeeper_runs_ended_total", state="failed", reason="access_revoked") == 1
    )


async def test_followups_are_counted_by_outcome(services: Services, world: DemoWorld) -> None:
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
    thread = allgemein(world)
    lotse = token_of(world, "lotse")
    async with client_of(services) as client:
        await post(client, world, "alex", thread, "t1", "Please help")
        run_id, token = await invocation(client, world)
        await start(client, world, run_id, token)
        one = (await post(client, world, "sam", thread, "f1", "And this")).json()["id"]
        await post(client, world, "sam", thread, "f2", "And that")
        run = (await client.get(f"/v1/runs/{run_id}", headers=lotse)).json()
        patched = await client.request(
            "PATCH",
            f"/v1/runs/{run_id}",
            json={
                "base_version": run["version"],
                "ops": [{"op": "replace", "path": f"/followups/{one}/state", "value": "absorbed"}],
            },
            headers=lotse,
        )
        assert patched.status_code == 200
        await client.post(f"/v1/runs/{run_id}/finish", json={"state": "completed"}, headers=lotse)
        samples = await scrape(client)
    counts = {
        outcome: samples.value("turnkeeper_followups_total", outcome=outcome)
        for outcome in ("queued", "delivered", "absorbed", "deferred", "discarded", "moved")
    }
    # Two accepted; one absorbed; the open one triggers the follow-on run (deferred).
    assert counts == {
        "queued": 2,
        "delivered": 0,
        "absorbed": 1,
        "deferred": 1,
        "discarded": 0,
        "moved": 0,
    }
    assert samples.value("turnkeeper_runs_opened_total") == 2


async def test_http_requests_by_route_template_and_status(
    services: Services, world: DemoWorld
) -> None:
    thread = eskalation(world)
    async with client_of(services) as client:
        await client.get(f"/v1/threads/{thread}", headers=token_of(world, "alex"))
        await client.get(f"/v1/threads/{thread}", headers=token_of(world, "alex"))
        await client.get(f"/v1/threads/{thread}")
        await client.get("/v1/threads/01900000-0000-7000-8000-0000000fffff/nowhere")
        await client.request("DELETE", "/healthz")
        samples = await scrape(client)
    name = "turnkeeper_http_requests_total"
    assert samples.value(name, route="/v1/threads/{thread_id}", status="200") == 2
    assert samples.value(name, route="/v1/threads/{thread_id}", status="401") == 1
    assert samples.value(name, route="(unmatched)", status="404") == 1
    # A method no route has is refused before routing: no template, never the raw path.
    assert samples.value(name, route="(unmatched)", status="405") == 1
    assert (
        samples.value(
            "turnkeeper_http_request_duration_seconds_count", route="/v1/threads/{thread_id}"
        )
        == 3
    )


async def test_labels_carry_no_id_handle_key_or_token(services: Services, world: DemoWorld) -> None:
    thread = allgemein(world)
    async with client_of(services) as client:
        await post(client, world, "alex", thread, "t1", "Please help")
        run_id, token = await invocation(client, world)
        await start(client, world, run_id, token)
        await client.post(
            SEND, json=send_body(thread, "a1", 0, "Stale answer"), headers=token_of(world, "lotse")
        )
        await client.post(
            f"/v1/runs/{run_id}/finish",
            json={"state": "failed", "reason": "alex asked for robin"},
            headers=token_of(world, "lotse"),
        )
        samples = await scrape(client)
    handles = set(world.people) | set(world.agents)
    secrets = {p.token for p in (*world.people.values(), *world.agents.values())}
    values = list(samples.label_values())
    assert values, "the scenario produced labelled samples"
    for value in values:
        assert not UUID_PATTERN.search(value), value
        assert not any(handle in value for handle in handles), value
        assert "thread:" not in value
        assert value not in secrets


async def test_metrics_disabled_is_the_404_of_an_unknown_path(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services = build_services(
        uow_factory, Settings(metrics_enabled=False), clock, SequentialIds(), JwtSigner(TEST_KEY)
    )
    async with client_of(services) as client:
        metrics = await client.get("/metrics")
        unknown = await client.get("/nowhere")
    assert metrics.status_code == unknown.status_code == 404
    strip = {"correlation_id"}
    assert {k: v for k, v in metrics.json().items() if k not in strip} == {
        k: v for k, v in unknown.json().items() if k not in strip
    }
    assert services.telemetry.sinks == ()


@pytest.mark.parametrize("uow_factory", ["postgres"], indirect=True)
async def test_pool_connections_are_read_from_the_pool_at_scrape_time(
    services: Services, pg_pool: AsyncConnectionPool[Conn]
) -> None:
    attach_metrics(services.telemetry, pool_stats=pg_pool.get_stats)
    async with client_of(services) as client:
        idle = await scrape(client)
        async with pg_pool.connection():
            busy = await scrape(client)
    stats = pg_pool.get_stats()
    name = "turnkeeper_db_pool_connections"
    assert idle.value(name, state="max") == stats["pool_max"]
    assert busy.value(name, state="in_use") == idle.value(name, state="in_use") + 1
    assert idle.value(name, state="waiting") == 0
