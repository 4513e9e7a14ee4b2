"""The agent runtime client (adapters.client) against the real HTTP application.

`AgentRuntimeClient` speaks to the Litestar app over httpx's ASGI transport, on the memory
adapter and on PostgreSQL: its frontiers follow the server's answers, a held answer holds
the next send locally until the runtime refreshes, and a chunked send that meets a human
message in between stops with partial_held and resumes on retry without repeating a chunk.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from turnkeeper.adapters.client import AgentRuntimeClient, ClientUnavailable
from turnkeeper.adapters.http import create_app
from turnkeeper.adapters.observability.client import ClientMetrics
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.domain.freshness import SendState
from turnkeeper.domain.logical_sends import LogicalSendState
from turnkeeper.domain.messaging import MessageDraft

BASE_URL = "http://turnkeeper.example.com"
#: Small chunks so that a short text makes a logical send of three messages.
CHUNK_BYTES = 8

AfterSend = Callable[[int], Awaitable[None]]


class CountingTransport(httpx.AsyncBaseTransport):
    """The app's ASGI transport, counting sends and running a hook after each one."""

    def __init__(self, services: Services) -> None:
        self._inner = httpx.ASGITransport(app=create_app(services, services.settings))
        self.sends = 0
        self.after_send: AfterSend | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        if request.url.path == "/v1/agent/send":
            self.sends += 1
            await response.aread()
            if self.after_send is not None:
                try:
                    await self.after_send(self.sends)
                except BaseException:
                    await response.aclose()  # a lost answer: nobody reads it
                    raise
        return response


@pytest.fixture
def transport(services: Services) -> CountingTransport:
    return CountingTransport(services)


@pytest.fixture
async def lotse(
    transport: CountingTransport, world: DemoWorld
) -> AsyncIterator[AgentRuntimeClient]:
    async with AgentRuntimeClient(
        BASE_URL, world.agents["lotse"].token, transport=transport
    ) as client:
        yield client


def eskalation(world: DemoWorld) -> uuid.UUID:
    thread_id = world.channels["eskalation"].main_thread_id
    assert thread_id is not None
    return thread_id


async def human_post(services: Services, world: DemoWorld, thread_id: uuid.UUID, cid: str) -> int:
    posted = await services.conversation.create_message(
        world.principal("alex"), thread_id, MessageDraft(client_msg_id=cid, content="Any news?")
    )
    return posted.message.thread_seq


async def test_send_held_refresh_and_send_again(
    services: Services,
    world: DemoWorld,
    lotse: AgentRuntimeClient,
    transport: CountingTransport,
) -> None:
    thread_id = eskalation(world)
    first = await human_post(services, world, thread_id, "a1")
    page = await lotse.read_history(thread_id)
    assert page.covers_through_seq == first
    sent = await lotse.send(thread_id, "On it, Alex.", "reply-1")
    assert (sent.state, sent.accepted_seq, sent.seen_up_to_seq) == (SendState.SENT, 2, 1)
    key = sent.target_key
    assert lotse.freshness.frontier(key).observed_seq == 2

    newer = await human_post(services, world, thread_id, "a2")
    held = await lotse.send(thread_id, "Done.", "reply-2")
    assert (held.state, held.held_locally, held.latest_seq) == (SendState.HELD, False, newer)
    assert held.guidance is not None
    frontier = lotse.freshness.frontier(key)
    assert (frontier.observed_seq, frontier.latest_known_seq) == (2, newer)

    # The session knows of an unread message: the next send is held without a request.
    sends = transport.sends
    local = await lotse.send(thread_id, "Done.", "reply-3")
    assert (local.state, local.held_locally) == (SendState.HELD, True)
    assert transport.sends == sends

    await lotse.read_history(thread_id, after_seq=2)
    again = await lotse.send(thread_id, "Done.", "reply-2")
    assert (again.state, again.accepted_seq) == (SendState.SENT, newer + 1)
    # A retry of an accepted send replays it.
    replay = await lotse.send(thread_id, "Done.", "reply-2")
    assert (replay.state, replay.message_id) == (SendState.ALREADY_SENT, again.message_id)


async def test_chunked_send_stops_at_a_human_message_and_the_retry_resumes(
    services: Services,
    world: DemoWorld,
    lotse: AgentRuntimeClient,
    transport: CountingTransport,
) -> None:
    thread_id = eskalation(world)
    content = "alpha12 bravo34 charlie"
    await lotse.read_history(thread_id)
    interleaved: list[int] = []

    async def alex_writes_after_the_first_chunk(sends: int) -> None:
        if sends == 1:
            interleaved.append(await human_post(services, world, thread_id, "between"))

    transport.after_send = alex_writes_after_the_first_chunk
    first = await lotse.send_logical(thread_id, "answer-1", content, CHUNK_BYTES)
    transport.after_send = None
    assert first.state is LogicalSendState.PARTIAL_HELD
    assert first.chunk_count == 3
    assert [c.accepted_seq for c in first.accepted] == [1]
    assert (first.held_chunk_index, first.latest_seq) == (1, interleaved[0])
    assert first.guidance is not None

    # Without a refresh the retry replays the stored chunk (one request) and is held
    # locally at the next one: partial_held with the chunk the server holds.
    sends = transport.sends
    early = await lotse.send_logical(thread_id, "answer-1", content, CHUNK_BYTES)
    assert (early.state, early.held_locally, early.held_chunk_index) == (
        LogicalSendState.PARTIAL_HELD,
        True,
        1,
    )
    assert [(c.accepted_seq, c.replayed) for c in early.accepted] == [(1, True)]
    assert early.accepted[0].message_id == first.accepted[0].message_id
    assert transport.sends == sends + 1

    await lotse.read_history(thread_id)
    retry = await lotse.send_logical(thread_id, "answer-1", content, CHUNK_BYTES)
    assert retry.state is LogicalSendState.SENT
    assert [(c.index, c.replayed) for c in retry.accepted] == [(0, True), (1, False), (2, False)]
    assert [c.accepted_seq for c in retry.accepted] == [1, 3, 4]
    assert retry.accepted[0].message_id == first.accepted[0].message_id

    page = await lotse.read_history(thread_id)
    assert [(m.thread_seq, m.origin) for m in page.messages] == [
        (1, "agent"),
        (2, "human"),
        (3, "agent"),
        (4, "agent"),
    ]
    assert "".join(m.content for m in page.messages if m.origin == "agent") == content

    # The whole logical send again: every chunk replays.
    again = await lotse.send_logical(thread_id, "answer-1", content, CHUNK_BYTES)
    assert again.state is LogicalSendState.ALREADY_SENT
    assert [c.accepted_seq for c in again.accepted] == [1, 3, 4]


def lose_the_answer_of(send: int) -> AfterSend:
    """A hook that loses the answer of the n-th send: stored by the server, never read."""

    async def lose(sends: int) -> None:
        if sends == send:
            raise httpx.ReadError("the connection closed before the answer")

    return lose


async def test_a_retry_after_a_lost_answer_is_asked_of_the_server_not_held_locally(
    services: Services,
    world: DemoWorld,
    lotse: AgentRuntimeClient,
    transport: CountingTransport,
) -> None:
    thread_id = eskalation(world)
    await human_post(services, world, thread_id, "a1")
    await lotse.read_history(thread_id)
    transport.after_send = lose_the_answer_of(1)
    with pytest.raises(ClientUnavailable):
        await lotse.send(thread_id, "Answer A", "reply-a")
    transport.after_send = None
    # The server stored A (seq 2); the session does not know: B is held at A's seq.
    held = await lotse.send(thread_id, "Note B", "reply-b")
    assert (held.state, held.held_locally, held.latest_seq) == (SendState.HELD, False, 2)

    # The retry of A, before any refresh: its outcome was unknown, so it is asked of the
    # server, which replays it (held locally, it was told "not sent" although stored).
    retry = await lotse.send(thread_id, "Answer A", "reply-a")
    assert (retry.state, retry.held_locally, retry.accepted_seq) == (
        SendState.ALREADY_SENT,
        False,
        2,
    )
    page = await lotse.read_history(thread_id)
    assert [m.content for m in page.messages].count("Answer A") == 1


async def test_a_logical_retry_after_a_lost_chunk_answer_replays_the_stored_chunk(
    services: Services,
    world: DemoWorld,
    lotse: AgentRuntimeClient,
    transport: CountingTransport,
) -> None:
    thread_id = eskalation(world)
    content = "alpha12 bravo34 charlie"
    await lotse.read_history(thread_id)
    transport.after_send = lose_the_answer_of(1)
    with pytest.raises(ClientUnavailable):
        await lotse.send_logical(thread_id, "answer-1", content, CHUNK_BYTES)
    transport.after_send = None
    held = await lotse.send(thread_id, "Note B", "reply-b")
    assert (held.state, held.latest_seq) == (SendState.HELD, 1)

    # The newest message is the stored chunk 0 itself: the retry replays it and sends the
    # rest after it (held locally, it reported nothing stored and never went on).
    retry = await lotse.send_logical(thread_id, "answer-1", content, CHUNK_BYTES)
    assert retry.state is LogicalSendState.SENT
    assert [(c.index, c.accepted_seq, c.replayed) for c in retry.accepted] == [
        (0, 1, True),
        (1, 2, False),
        (2, 3, False),
    ]
    page = await lotse.read_history(thread_id)
    assert "".join(m.content for m in page.messages) == content


async def test_a_partial_held_logical_send_is_counted_by_the_client(
    services: Services, world: DemoWorld, transport: CountingTransport
) -> None:
    metrics = ClientMetrics()
    thread_id = eskalation(world)

    async def alex_writes_after_the_first_chunk(sends: int) -> None:
        if sends == 1:
            await human_post(services, world, thread_id, "between")

    async with AgentRuntimeClient(
        BASE_URL, world.agents["lotse"].token, transport=transport, metrics=metrics
    ) as lotse:
        await lotse.read_history(thread_id)
        transport.after_send = alex_writes_after_the_first_chunk
        first = await lotse.send_logical(thread_id, "answer-1", "alpha12 bravo34", CHUNK_BYTES)
        transport.after_send = None
        assert first.state is LogicalSendState.PARTIAL_HELD
        await lotse.read_history(thread_id)
        retry = await lotse.send_logical(thread_id, "answer-1", "alpha12 bravo34", CHUNK_BYTES)
        assert retry.state is LogicalSendState.SENT
    counted = metrics.registry.get_sample_value(
        "turnkeeper_agent_send_partial_held_total", {"target_type": "thread"}
    )
    assert counted == 1
