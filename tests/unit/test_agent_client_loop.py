"""The agent client's live loop against a scripted fake server (httpx.MockTransport).

The fake answers the stream route with scripted ``text/event-stream`` bodies that end
(as a server shutting down ends them), records every request, and answers the run and
ack routes. The client must reconnect with ``Last-Event-ID``, acknowledge each event
after the loop body handled it, retry a 429 and give up on a 403, and move runs with
the documented bodies.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import httpx
import pytest

from tests.support.agent_stream import (
    BASE_URL,
    CREATED,
    LOTSE,
    MESSAGE,
    RUN,
    THREAD,
)
from tests.support.agent_stream import agent_event as _event
from tests.support.agent_stream import problem_response as _problem
from tests.support.agent_stream import sse_body as _sse
from turnkeeper.adapters.client import (
    AgentEvent,
    AgentRuntimeClient,
    ClientProblem,
    RunState,
)
from turnkeeper.adapters.client import stream as client_stream


def _run(version: int = 1, state: str = "running") -> dict[str, Any]:
    return {
        "id": RUN,
        "thread_id": THREAD,
        "agent_id": LOTSE,
        "state": state,
        "trigger_kind": "message",
        "triggering_message_id": MESSAGE,
        "triggered_by": LOTSE,
        "version": version,
        "followups": {MESSAGE: {"state": "queued"}},
        "created_at": CREATED,
        "updated_at": CREATED,
    }


@attrs.define
class FakeServer:
    """Scripted answers of the stream route; the run and ack routes as the contract says."""

    streams: list[httpx.Response]
    requests: list[httpx.Request] = attrs.Factory(list)
    run_version: int = 1
    conflicts: int = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path
        if path == "/v1/agent/events/stream":
            return self.streams.pop(0) if self.streams else _problem(403, "forbidden")
        if path == "/v1/agent/events/ack":
            return httpx.Response(204)
        if path == "/v1/agent/events":
            return httpx.Response(200, json={"events": [_event(9)], "next_after": 9})
        if path == f"/v1/runs/{RUN}" and request.method == "PATCH":
            if self.conflicts:
                self.conflicts -= 1
                self.run_version += 1
                return _problem(409, "base_version_conflict")
            self.run_version += 1
            return httpx.Response(200, json=_run(self.run_version))
        if path == f"/v1/runs/{RUN}":
            return httpx.Response(200, json=_run(self.run_version))
        if path.startswith(f"/v1/runs/{RUN}/"):
            state = "completed" if path.endswith("/finish") else "running"
            return httpx.Response(200, json=_run(self.run_version, state))
        return _problem(404, "not_found")

    def sent(self, path: str) -> list[httpx.Request]:
        return [r for r in self.requests if r.url.path == path]


def _client(server: FakeServer) -> AgentRuntimeClient:
    return AgentRuntimeClient(BASE_URL, "tok-lotse", transport=httpx.MockTransport(server))


@pytest.fixture(autouse=True)
def no_reconnect_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    # The reconnect pause is production behaviour; these tests count reconnects.
    monkeypatch.setattr(client_stream, "RECONNECT_DELAY_SECONDS", 0.0)


async def _take(client: AgentRuntimeClient, count: int) -> list[AgentEvent]:
    taken: list[AgentEvent] = []
    async for event in client.events():
        taken.append(event)
        if len(taken) == count:
            break
    return taken


async def test_the_stream_reconnects_with_last_event_id_and_acks_handled_events() -> None:
    server = FakeServer(
        streams=[httpx.Response(200, content=_sse(1, 2)), httpx.Response(200, content=_sse(3))]
    )
    async with _client(server) as client:
        events = await _take(client, 3)
    assert [e.seq for e in events] == [1, 2, 3]
    assert [e.invocation_token for e in events] == ["token-1", "token-2", "token-3"]
    assert events[0].run_id == RUN
    opened = server.sent("/v1/agent/events/stream")
    assert [r.headers.get("Last-Event-ID") for r in opened] == [None, "2"]
    # Each event is acknowledged once the loop asked for the next one; the third was
    # not (the loop left before it was handled to the end).
    acks = [json.loads(r.content)["through_seq"] for r in server.sent("/v1/agent/events/ack")]
    assert acks == [1, 2]


async def test_a_429_is_retried_and_a_403_is_raised() -> None:
    server = FakeServer(
        streams=[
            _problem(429, "rate_limited", **{"Retry-After": "0"}),
            httpx.Response(200, content=_sse(5)),
        ]
    )
    async with _client(server) as client:
        assert [e.seq for e in await _take(client, 1)] == [5]
        with pytest.raises(ClientProblem) as refused:
            await _take(client, 1)
    assert refused.value.status == 403


async def test_a_long_poll_sends_its_wait_and_answers_the_page() -> None:
    server = FakeServer(streams=[])
    async with _client(server) as client:
        page = await client.wait_events(after=4, wait=2.5)
    assert [e.seq for e in page.events] == [9]
    (request,) = server.sent("/v1/agent/events")
    assert dict(request.url.params) == {"wait": "2.5", "after": "4"}


async def test_the_run_calls_send_the_documented_bodies() -> None:
    server = FakeServer(streams=[])
    async with _client(server) as client:
        started = await client.start(RUN, "token-1")
        await client.await_input(RUN, "Which account, Alex?")
        await client.resume(RUN, "token-2")
        finished = await client.finish(RUN, "completed")
    assert started.state is RunState.RUNNING
    assert finished.state is RunState.COMPLETED
    assert not finished.active
    bodies = [
        (r.url.path.rsplit("/", 1)[-1], json.loads(r.content))
        for r in server.requests
        if r.method == "POST"
    ]
    assert bodies == [
        ("start", {"invocation_token": "token-1"}),
        ("await-input", {"question": "Which account, Alex?"}),
        ("resume", {"invocation_token": "token-2"}),
        ("finish", {"state": "completed"}),
    ]


async def test_a_followup_patch_overtaken_by_another_change_is_read_again_and_sent() -> None:
    server = FakeServer(streams=[], conflicts=1)
    async with _client(server) as client:
        run = await client.patch_followups(RUN, {MESSAGE: "absorbed"})
    patches = [json.loads(r.content) for r in server.requests if r.method == "PATCH"]
    assert [p["base_version"] for p in patches] == [1, 2]
    assert patches[1]["ops"] == [
        {"op": "replace", "path": f"/followups/{MESSAGE}/state", "value": "absorbed"}
    ]
    assert run.version == 3


async def test_a_followup_patch_with_a_base_version_is_sent_once() -> None:
    server = FakeServer(streams=[], conflicts=1)
    async with _client(server) as client:
        with pytest.raises(ClientProblem) as refused:
            await client.patch_followups(RUN, {MESSAGE: "delivered"}, base_version=1)
    assert refused.value.code == "base_version_conflict"
    assert len([r for r in server.requests if r.method == "PATCH"]) == 1
