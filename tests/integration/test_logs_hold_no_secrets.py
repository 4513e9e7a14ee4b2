"""Every log line of a full scenario over HTTP, at ``log.level = debug``, on both adapters.

The captured output is searched for every message content and every token the scenario
used (API tokens, invocation tokens, a made-up bad token): none may appear. The lines
themselves are JSON (``log.format = json``); each request line carries its correlation id
and each answered send has one line with the seed's fields.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from tests.integration.observability_support import (
    SEND,
    allgemein,
    client_of,
    eskalation,
    post,
    send_body,
    start,
    token_of,
)
from tests.support.http import bearer
from turnkeeper.adapters.logging import configure_from_settings
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.settings import Settings

#: The seed's fields (section 7) on the line of an answered gated send.
SEND_FIELDS = {
    "agent_id",
    "space_id",
    "target_key",
    "state",
    "seen_up_to_seq",
    "latest_seq",
    "client_message_id",
    "target_key_valid",
}


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    stream = io.StringIO()
    configure_from_settings(Settings(log_level="debug", log_format="json"), stream=stream)
    yield stream
    structlog.reset_defaults()
    root.handlers[:], root.level = saved


def records(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


async def test_a_full_scenario_logs_no_content_and_no_token(
    services: Services, world: DemoWorld, captured: io.StringIO
) -> None:
    contents: list[str] = []
    tokens = [p.token for p in (*world.people.values(), *world.agents.values())]

    def say(text: str) -> str:
        contents.append(text)
        return text

    robin, lotse = token_of(world, "robin"), token_of(world, "lotse")
    async with client_of(services) as client:
        created = await client.post(
            "/v1/principals", json={"kind": "person", "handle": "quinn"}, headers=robin
        )
        assert created.status_code == 201, created.json()
        tokens.append(created.json()["token"])
        thread = allgemein(world)
        asked = await post(client, world, "alex", thread, "q1", say("Secret question one"))
        assert asked.status_code == 201
        page = (await client.get("/v1/agent/events", headers=lotse)).json()
        (event,) = [e for e in page["events"] if e["type"] == "agent.invocation"]
        run_id, invocation_token = str(event["payload"]["run_id"]), event["invocation_token"]
        tokens.append(invocation_token)
        await start(client, world, run_id, invocation_token)
        latest = (await client.get(f"/v1/threads/{thread}", headers=lotse)).json()["latest_seq"]
        sent = await client.post(
            SEND, json=send_body(thread, "a1", latest, say("Secret answer one")), headers=lotse
        )
        assert sent.json()["state"] == "sent"
        await post(client, world, "alex", thread, "q2", say("Secret follow-up two"))
        held = await client.post(
            SEND, json=send_body(thread, "a2", latest + 1, say("Secret answer two")), headers=lotse
        )
        assert held.json()["state"] == "held"
        # Refused requests: their bodies and credentials must not reach the log either.
        too_long = "x" * (services.settings.max_content_bytes + 1)
        await post(client, world, "alex", eskalation(world), "q3", say(too_long))
        await client.post(
            f"/v1/threads/{thread}/messages",
            json={"client_msg_id": "q4", "content": say("Secret with extra"), "origin": "x"},
            headers=token_of(world, "alex"),
        )
        bad = "tk_made_up_token_for_the_log_test"
        tokens.append(bad)
        await client.get("/v1/me", headers=bearer(bad))
        await client.post(
            f"/v1/runs/{run_id}/resume", json={"invocation_token": "not.a.jwt"}, headers=lotse
        )
        tokens.append("not.a.jwt")
        channel = world.channels["reports"].id
        report = await client.post(
            f"/v1/channels/{channel}/threads",
            json={
                "title": "Weekly",
                "first_message": {"client_msg_id": "r1", "content": say("Secret report")},
            },
            headers=lotse,
        )
        assert report.status_code == 201
        finished = await client.post(
            f"/v1/runs/{run_id}/finish",
            json={"state": "failed", "reason": say("Secret reason: card of Sam declined")},
            headers=lotse,
        )
        assert finished.status_code == 200, finished.json()
    text = captured.getvalue()
    assert text, "the scenario wrote log lines"
    for content in contents:
        assert content not in text, content[:40]
    for token in tokens:
        assert token not in text, "a token reached the log"
    lines = records(captured)
    requests = [r for r in lines if r.get("event") == "http_request"]
    assert requests
    assert all(r.get("correlation_id") for r in requests)
    answered = [r for r in lines if r.get("event") == "agent_send" and r["gated"]]
    assert [r["state"] for r in answered] == ["sent", "held"]
    # The report thread is Lotse's ungated createThread: its compatibility line.
    ungated = [r for r in lines if r.get("event") == "agent_send" and not r["gated"]]
    assert [(r["state"], r["path"]) for r in ungated] == [("sent", "compat")]
    assert ungated[0]["correlation_id"]
    for line in answered:
        assert set(line) >= SEND_FIELDS, SEND_FIELDS - set(line)
        assert line["correlation_id"]
    # The agent's own end reason is free text: the line names only that it gave one.
    ended = [r for r in lines if r.get("event") == "run_ended"]
    assert [(r["state"], r["reason"]) for r in ended] == [("failed", "agent")]
    assert answered[0]["accepted_seq"] == latest + 1
    assert answered[1]["needs_refresh_until_seq"] == latest + 2
