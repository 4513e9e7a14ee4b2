"""The agent stream's pauses and retries, with the client's sleep injected (no waiting).

A fake server answers the stream and ack routes from scripts. The client must treat a
retriable answer of an ack (429, 503) like one of the stream: pause at least its
``Retry-After``, send the ack again and reopen the stream after the acknowledged event;
and it must pause, with a growing delay, before reopening a stream that the server ended
without an event (a shutdown answers 200 with an empty body), never in a tight loop.
"""

from __future__ import annotations

import json

import attrs
import httpx
import pytest

from tests.support.agent_stream import BASE_URL, sse_body
from tests.support.agent_stream import problem_response as _problem
from turnkeeper.adapters.client import AgentEvent, AgentRuntimeClient, ClientProblem
from turnkeeper.adapters.client import stream as client_stream

STREAM = "/v1/agent/events/stream"
ACK = "/v1/agent/events/ack"
#: A Retry-After far above the first reconnect delay, so that honouring it shows.
RETRY_AFTER_SECONDS = 7


def _sse(*seqs: int) -> httpx.Response:
    return httpx.Response(
        200, content=sse_body(*seqs, newline="\n"), headers={"content-type": "text/event-stream"}
    )


def _ended() -> httpx.Response:
    """A stream the server ends at once (it shuts down): 200 with an empty body."""
    return httpx.Response(200, content=b"", headers={"content-type": "text/event-stream"})


@attrs.define
class ScriptedServer:
    """Stream and ack answers from scripts; 403 once a stream script is used up."""

    streams: list[httpx.Response]
    acks: list[httpx.Response] = attrs.Factory(list)
    requests: list[httpx.Request] = attrs.Factory(list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path == STREAM:
            return self.streams.pop(0) if self.streams else _problem(403, "forbidden")
        if request.url.path == ACK:
            return self.acks.pop(0) if self.acks else httpx.Response(204)
        return _problem(404, "not_found")

    def sent(self, path: str) -> list[httpx.Request]:
        return [r for r in self.requests if r.url.path == path]

    def acked(self) -> list[int]:
        return [json.loads(r.content)["through_seq"] for r in self.sent(ACK)]

    def resumed_after(self) -> list[str | None]:
        return [r.headers.get("Last-Event-ID") for r in self.sent(STREAM)]


@attrs.define
class RecordedSleep:
    """The client's pause between reconnects: records the delays, waits for nothing."""

    delays: list[float] = attrs.Factory(list)

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def _client(server: ScriptedServer, sleep: RecordedSleep) -> AgentRuntimeClient:
    return AgentRuntimeClient(
        BASE_URL, "tok-lotse", transport=httpx.MockTransport(server), sleep=sleep
    )


async def _take(client: AgentRuntimeClient, count: int) -> list[AgentEvent]:
    taken: list[AgentEvent] = []
    async for event in client.events():
        taken.append(event)
        if len(taken) == count:
            break
    return taken


@pytest.mark.parametrize(("status", "code"), [(503, "unavailable"), (429, "rate_limited")])
async def test_a_retriable_ack_answer_is_retried_after_retry_after_and_the_loop_goes_on(
    status: int, code: str
) -> None:
    server = ScriptedServer(
        streams=[_sse(1), _sse(2)],
        acks=[_problem(status, code, **{"Retry-After": str(RETRY_AFTER_SECONDS)})],
    )
    sleep = RecordedSleep()
    async with _client(server, sleep) as client:
        events = await _take(client, 2)
    assert [e.seq for e in events] == [1, 2]
    # The refused ack is sent again (after the pause) before the stream is reopened
    # after the handled event.
    assert server.acked() == [1, 1]
    assert sleep.delays == [float(RETRY_AFTER_SECONDS)]
    assert server.resumed_after() == [None, "1"]


async def test_an_ack_refused_for_good_ends_the_loop() -> None:
    server = ScriptedServer(streams=[_sse(1, 2)], acks=[_problem(401, "unauthenticated")])
    sleep = RecordedSleep()
    async with _client(server, sleep) as client:
        with pytest.raises(ClientProblem) as refused:
            await _take(client, 2)
    assert (refused.value.status, refused.value.code) == (401, "unauthenticated")
    assert sleep.delays == []


async def test_a_stream_ended_without_events_is_reopened_after_a_growing_pause() -> None:
    server = ScriptedServer(streams=[_ended(), _ended(), _ended(), _sse(1)])
    sleep = RecordedSleep()
    async with _client(server, sleep) as client:
        events = await _take(client, 1)
    assert [e.seq for e in events] == [1]
    first = client_stream.RECONNECT_DELAY_SECONDS
    assert sleep.delays == [first, first * 2, first * 4]
    assert len(server.sent(STREAM)) == 4


async def test_the_pause_starts_over_only_after_an_event_was_read() -> None:
    server = ScriptedServer(streams=[_ended(), _ended(), _sse(1), _ended(), _sse(2)])
    sleep = RecordedSleep()
    async with _client(server, sleep) as client:
        events = await _take(client, 2)
    assert [e.seq for e in events] == [1, 2]
    first = client_stream.RECONNECT_DELAY_SECONDS
    # A stream that delivered an event is reopened at once; the empty one after it
    # pauses again from the first delay.
    assert sleep.delays == [first, first * 2, first]
    assert server.resumed_after() == [None, None, None, "1", "1"]


async def test_the_pause_never_exceeds_its_maximum() -> None:
    ended = [_ended() for _ in range(8)]
    server = ScriptedServer(streams=[*ended, _sse(1)])
    sleep = RecordedSleep()
    async with _client(server, sleep) as client:
        await _take(client, 1)
    assert len(sleep.delays) == len(ended)
    assert max(sleep.delays) == client_stream.RECONNECT_MAX_DELAY_SECONDS
    assert sleep.delays == sorted(sleep.delays)
