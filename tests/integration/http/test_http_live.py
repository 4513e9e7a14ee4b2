"""Live delivery over HTTP: long-poll parameters, SSE framing, resume, limit, shutdown.

Streams never end by themselves, and an in-memory ASGI transport hands over an answer
only once it is complete, so the stream tests run the application in a real uvicorn
server on a loopback port (`StreamClosingServer`, as ``turnkeeper serve`` does) and read
it with httpx as it streams. Each ``data:`` line is checked against the published
schema of the page routes' documents (Event, AgentEvent).
"""

from __future__ import annotations

import asyncio
import gc
import io
import json
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import attrs
import httpx
import pytest
from jsonschema import Draft202012Validator, FormatChecker  # type: ignore[import-untyped]

from tests.live_server import Served, served_app
from tests.support.asgi import get_scope, local_waker
from tests.support.http import ContractClient, bearer
from tests.support.json_log import captured_json_log, json_records
from tests.support.openapi import assert_no_null
from turnkeeper.adapters.http.app import create_app
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.settings import Settings

#: Bound of a wait for something that must happen at once.
BOUND_SECONDS = 10.0
#: The shortest heartbeat the configuration allows (whole seconds).
HEARTBEAT_SECONDS = 1
MAX_STREAMS = 2
MAX_WAIT_SECONDS = 20


@pytest.fixture
def settings() -> Settings:
    return Settings(
        stream_heartbeat=timedelta(seconds=HEARTBEAT_SECONDS),
        stream_max_per_principal=MAX_STREAMS,
        stream_max_wait=timedelta(seconds=MAX_WAIT_SECONDS),
    )


@pytest.fixture
async def served(services: Services, world: DemoWorld) -> AsyncIterator[Served]:
    async with served_app(services) as app:
        yield app


@attrs.frozen
class Message:
    """One Server-Sent Events message: an event, or a comment."""

    id: str | None = None
    event: str | None = None
    data: str | None = None
    comment: str | None = None


async def messages(lines: AsyncIterator[str]) -> AsyncIterator[Message]:
    """The SSE messages of a stream's lines (fields joined per message)."""
    fields: dict[str, str] = {}
    async for line in lines:
        if line == "":
            if fields:
                yield Message(**fields)
            fields = {}
        elif line.startswith(":"):
            fields["comment"] = line[1:].strip()
        else:
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


def check_document(spec: dict[str, Any], component: str, body: Any) -> None:
    """Validate a ``data:`` document against a component schema of /openapi.json."""
    assert_no_null(body)
    schema = {"$ref": f"#/components/schemas/{component}", "components": spec["components"]}
    errors = list(Draft202012Validator(schema, format_checker=FormatChecker()).iter_errors(body))
    assert not errors, [e.message for e in errors]


async def post(client: ContractClient, token: str, thread: object, cid: str, **extra: Any) -> int:
    answer = await client.post(
        f"/v1/threads/{thread}/messages",
        json={"client_msg_id": cid, "content": f"Message {cid}", **extra},
        headers=bearer(token),
    )
    assert answer.status_code == 201
    return int(answer.json()["thread_seq"])


async def first_events(
    served: Served, path: str, token: str, count: int, headers: dict[str, str] | None = None
) -> list[Message]:
    """The first `count` event messages of a stream (comments skipped)."""
    found: list[Message] = []
    async with (
        httpx.AsyncClient(base_url=served.url, timeout=BOUND_SECONDS) as http,
        http.stream("GET", path, headers={**bearer(token), **(headers or {})}) as answer,
    ):
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        async with asyncio.timeout(BOUND_SECONDS):
            async for message in messages(answer.aiter_lines()):
                if message.comment is None:
                    found.append(message)
                if len(found) == count:
                    break
    return found


# -- long-poll -------------------------------------------------------------------------


async def test_a_long_poll_answers_when_a_message_is_posted(
    served: Served, world: DemoWorld
) -> None:
    sam = bearer(world.people["sam"].token)
    thread = world.channels["allgemein"].main_thread_id
    async with httpx.AsyncClient(base_url=served.url, timeout=BOUND_SECONDS * 3) as http:
        end = (await http.get("/v1/events?limit=500", headers=sam)).json()["next_after"]
        waiting = asyncio.create_task(
            http.get(f"/v1/events?after={end}&wait={MAX_WAIT_SECONDS}", headers=sam)
        )
        # (Whether the post lands before or during the wait, the answer holds it; that the
        # wait is cut short by the commit is proven in tests/integration/test_live_delivery.)
        await asyncio.sleep(0)
        posted = await http.post(
            f"/v1/threads/{thread}/messages",
            json={"client_msg_id": "lp", "content": "Long-poll, Sam."},
            headers=bearer(world.people["alex"].token),
        )
        assert posted.status_code == 201
        answer = await asyncio.wait_for(waiting, BOUND_SECONDS)
    assert answer.status_code == 200
    assert answer.json()["events"][0]["type"] == "message.created"


@pytest.mark.parametrize("path", ["/v1/events", "/v1/agent/events"])
@pytest.mark.parametrize("wait", ["-1", str(MAX_WAIT_SECONDS + 1), "nan", "soon"])
async def test_a_wait_out_of_bounds_is_400_with_its_pointer(
    client: ContractClient, world: DemoWorld, path: str, wait: str
) -> None:
    answer = await client.get(f"{path}?wait={wait}", headers=bearer(world.agents["lotse"].token))
    assert answer.status_code == 400
    assert answer.json()["errors"][0]["pointer"] == "/wait"


async def test_the_documented_wait_is_bounded_by_the_setting(client: ContractClient) -> None:
    for path in ("/v1/events", "/v1/agent/events"):
        parameters = client.spec["paths"][path]["get"]["parameters"]
        (wait,) = [p for p in parameters if p["name"] == "wait"]
        assert (wait["schema"]["minimum"], wait["schema"]["maximum"]) == (0, MAX_WAIT_SECONDS)


# -- streams ------------------------------------------------------------------------------


async def test_a_stream_frames_each_event_as_on_the_page(
    served: Served, client: ContractClient, world: DemoWorld
) -> None:
    alex = world.people["alex"].token
    await post(client, alex, world.channels["allgemein"].main_thread_id, "sse-1")
    page = (await client.get("/v1/events", headers=bearer(alex))).json()["events"]
    streamed = await first_events(served, "/v1/events/stream", alex, len(page))
    for message, document in zip(streamed, page, strict=True):
        assert message.id == str(document["seq"])
        assert message.event == document["type"]
        assert message.data is not None
        body = json.loads(message.data)
        assert body == document
        check_document(served.spec, "Event", body)


async def test_last_event_id_wins_over_after(
    served: Served, client: ContractClient, world: DemoWorld
) -> None:
    alex = world.people["alex"].token
    thread = world.channels["allgemein"].main_thread_id
    for cid in ("r1", "r2"):
        await post(client, alex, thread, cid)
    seqs = [
        e["seq"] for e in (await client.get("/v1/events", headers=bearer(alex))).json()["events"]
    ]
    resumed = await first_events(
        served, "/v1/events/stream?after=0", alex, 1, headers={"Last-Event-ID": str(seqs[1])}
    )
    assert resumed[0].id == str(seqs[2])


async def test_an_agent_stream_carries_the_invocation_with_a_token(
    served: Served, client: ContractClient, world: DemoWorld
) -> None:
    lotse = world.principal("lotse")
    await post(
        client,
        world.people["alex"].token,
        world.channels["eskalation"].main_thread_id,
        "inv-1",
        mentions=[str(lotse.id)],
    )
    (message,) = await first_events(
        served, "/v1/agent/events/stream", world.agents["lotse"].token, 1
    )
    assert message.event == "agent.invocation"
    assert message.data is not None
    body = json.loads(message.data)
    check_document(served.spec, "AgentEvent", body)
    assert body["invocation_token"]
    assert message.id == str(body["seq"])


async def test_an_idle_stream_sends_a_heartbeat_comment(served: Served, world: DemoWorld) -> None:
    async with (
        httpx.AsyncClient(base_url=served.url, timeout=BOUND_SECONDS) as http,
        http.stream(
            "GET", "/v1/events/stream?after=1000000", headers=bearer(world.people["sam"].token)
        ) as answer,
    ):
        async with asyncio.timeout(BOUND_SECONDS):
            first = await anext(messages(answer.aiter_lines()))
    assert first == Message(comment="heartbeat")


async def test_one_stream_too_many_is_429_rate_limited(served: Served, world: DemoWorld) -> None:
    headers = bearer(world.people["alex"].token)
    async with httpx.AsyncClient(base_url=served.url, timeout=BOUND_SECONDS) as http:
        async with (
            http.stream("GET", "/v1/events/stream", headers=headers) as one,
            http.stream("GET", "/v1/events/stream", headers=headers) as two,
        ):
            assert (one.status_code, two.status_code) == (200, 200)
            refused = await http.get("/v1/events/stream", headers=headers)
            assert refused.status_code == 429
            assert refused.headers["content-type"].startswith("application/problem+json")
            assert refused.json()["code"] == "rate_limited"
            assert int(refused.headers["Retry-After"]) >= 1
        # Closed streams free their places (the server sees the disconnect).
        async with asyncio.timeout(BOUND_SECONDS):
            while True:
                again = await http.get("/v1/events?limit=1", headers=headers)
                assert again.status_code == 200
                async with http.stream("GET", "/v1/events/stream", headers=headers) as three:
                    if three.status_code == 200:
                        break
                await asyncio.sleep(0.01)


@pytest.mark.parametrize(
    ("header", "pointer"),
    [("abc", "/Last-Event-ID"), ("-3", "/Last-Event-ID"), ("--5", "/Last-Event-ID")],
)
async def test_a_bad_last_event_id_is_400(
    client: ContractClient, world: DemoWorld, header: str, pointer: str
) -> None:
    answer = await client.get(
        "/v1/events/stream",
        headers={**bearer(world.people["alex"].token), "Last-Event-ID": header},
    )
    assert answer.status_code == 400
    assert answer.json()["errors"][0]["pointer"] == pointer


async def test_a_person_may_not_open_the_agent_stream(
    client: ContractClient, world: DemoWorld
) -> None:
    answer = await client.get("/v1/agent/events/stream", headers=bearer(world.people["alex"].token))
    assert answer.status_code == 403


async def test_server_shutdown_ends_open_streams_cleanly(
    served: Served, services: Services, world: DemoWorld
) -> None:
    ended = asyncio.Event()
    opened = asyncio.Event()
    services.live.stream_count_hooks.append(lambda count: opened.set() if count else None)
    received: list[Message] = []

    async def read() -> None:
        async with (
            httpx.AsyncClient(base_url=served.url, timeout=BOUND_SECONDS) as http,
            http.stream(
                "GET", "/v1/events/stream?after=1000000", headers=bearer(world.people["sam"].token)
            ) as answer,
        ):
            # The stream ends without a transport error: the chunked body is complete.
            received.extend([m async for m in messages(answer.aiter_lines())])
            ended.set()

    reader = asyncio.create_task(read())
    await asyncio.wait_for(opened.wait(), BOUND_SECONDS)
    served.server.should_exit = True
    await asyncio.wait_for(reader, BOUND_SECONDS)
    assert ended.is_set()
    assert all(m.comment == "heartbeat" for m in received)


async def test_the_stream_gauge_counts_the_open_streams(
    served: Served, services: Services, world: DemoWorld
) -> None:
    opened = asyncio.Event()
    closed = asyncio.Event()
    services.live.stream_count_hooks.append(lambda count: (opened if count else closed).set())
    gauge = "turnkeeper_event_stream_clients 1.0"
    async with (
        httpx.AsyncClient(base_url=served.url, timeout=BOUND_SECONDS) as http,
        http.stream(
            "GET", "/v1/events/stream?after=1000000", headers=bearer(world.people["sam"].token)
        ),
    ):
        await asyncio.wait_for(opened.wait(), BOUND_SECONDS)
        assert gauge in (await http.get("/metrics")).text
    await asyncio.wait_for(closed.wait(), BOUND_SECONDS)
    async with httpx.AsyncClient(base_url=served.url, timeout=BOUND_SECONDS) as http:
        assert "turnkeeper_event_stream_clients 0.0" in (await http.get("/metrics")).text


async def _left_at_once(app: Any, path: str, token: str) -> int:
    """One stream exchange whose client is gone before the answer starts; its status."""
    starts: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            starts.append(message["status"])

    await asyncio.wait_for(app(get_scope(path, token), receive, send), BOUND_SECONDS)
    return starts[0]


@pytest.mark.parametrize(
    ("path", "caller"),
    [("/v1/events/stream", "sam"), ("/v1/agent/events/stream", "lotse")],
)
async def test_a_client_gone_before_the_first_event_frees_its_place(
    services: Services, world: DemoWorld, path: str, caller: str
) -> None:
    # The messages' generator never starts when the disconnect comes first, so its own
    # close never runs: the answer must free the place itself, or the caller is refused
    # 429 once it has left stream.max_per_principal streams this way.
    token = (world.people.get(caller) or world.agents[caller]).token
    counts: list[int] = []
    services.live.stream_count_hooks.append(counts.append)
    app = create_app(services, services.settings)
    statuses = [await _left_at_once(app, path, token) for _ in range(MAX_STREAMS + 1)]
    assert statuses == [200] * (MAX_STREAMS + 1)
    assert counts == [1, 0] * (MAX_STREAMS + 1)


class _SendFailed(OSError):
    """The server's send failed (a server that raises where uvicorn drops the data)."""


@pytest.mark.parametrize("failing", ["http.response.start", "http.response.body"])
@pytest.mark.parametrize(
    ("path", "caller"),
    [("/v1/events/stream", "sam"), ("/v1/agent/events/stream", "lotse")],
)
async def test_a_stream_whose_send_fails_frees_its_place_at_once(
    services: Services, world: DemoWorld, path: str, caller: str, failing: str
) -> None:
    # The messages' generator is then unstarted (at the start) or suspended at a yield
    # (at a body), and only the collector would close it: the answer must free the
    # place itself. The collector stays off, so that it cannot do it for the answer.
    token = (world.people.get(caller) or world.agents[caller]).token
    app = create_app(services, services.settings)
    asked = False

    async def receive() -> dict[str, Any]:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # the client stays until the send fails
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        # The first body is a heartbeat or the backlog: either fails when asked to.
        if message["type"] == failing:
            raise _SendFailed("connection reset by peer")

    collecting = gc.isenabled()
    gc.disable()
    try:
        with pytest.raises(Exception):  # noqa: B017, PT011 - whatever Litestar makes of it
            await asyncio.wait_for(app(get_scope(path, token), receive, send), BOUND_SECONDS)
        assert (services.live.open_streams, local_waker(services).listeners) == (0, 0)
    finally:
        if collecting:
            gc.enable()


# -- logging ------------------------------------------------------------------------------


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """The JSON log lines of the test."""
    with captured_json_log() as stream:
        yield stream


async def test_polls_and_heartbeats_log_at_debug_not_info(
    client: ContractClient, world: DemoWorld, log_lines: io.StringIO
) -> None:
    lotse = bearer(world.agents["lotse"].token)
    await client.get("/v1/events", headers=lotse)
    await client.get("/v1/agent/events", headers=lotse)
    await client.put("/v1/agent/heartbeat", json={"capabilities": {}}, headers=lotse)
    await client.get("/v1/agent/events?limit=0", headers=lotse)  # an error stays at info
    requests = [r for r in json_records(log_lines) if r.get("event") == "http_request"]
    assert [(r["route"], r["status"]) for r in requests] == [("/v1/agent/events", 400)]
