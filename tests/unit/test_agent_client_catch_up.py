"""The agent client catching up: feed cursor, long threads, retries of chunked sends.

Against the in-test fake of the HTTP contract of `tests.unit.test_agent_client`:

- a poll without a cursor sends none, so the server reads from the acknowledged
  position instead of redelivering what was acknowledged;
- `read_history_to_latest` pages through a thread longer than one page until it covers
  the latest seq, which is what ends a freshness hold (one page never does);
- a retry of a chunked send made before the refresh replays the chunks the server
  holds and reports them (partial_held or already_sent), instead of a local ``held``
  that claims nothing was stored.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.unit.test_agent_client import BASE_URL, KEY, SAM, THREAD, TOKEN, FakeServer
from turnkeeper.adapters.client import AgentRuntimeClient
from turnkeeper.adapters.client.sends import StoredSends
from turnkeeper.adapters.observability.client import ClientMetrics
from turnkeeper.domain.freshness import SendState
from turnkeeper.domain.logical_sends import LogicalSendState

#: The fake's page size when a read names no limit (its ``page.default_limit``).
FAKE_DEFAULT_LIMIT = 50
#: A thread one and a half pages long.
LONG_THREAD = FAKE_DEFAULT_LIMIT + FAKE_DEFAULT_LIMIT // 2
#: Chunks of the logical sends below: three chunks for `REPORT`.
CHUNK_BYTES = 28
REPORT = "Alex asked for the report. Robin approved it. Sam will send it today."


@pytest.fixture
def server() -> FakeServer:
    fake = FakeServer()
    fake.add_thread()
    return fake


@pytest.fixture
async def client(server: FakeServer) -> AsyncIterator[AgentRuntimeClient]:
    async with AgentRuntimeClient(
        BASE_URL, TOKEN, transport=httpx.MockTransport(server.handle)
    ) as agent:
        yield agent


def _history_cursors(server: FakeServer) -> list[str | None]:
    return [
        r.url.params.get("after_seq")
        for r in server.requests
        if r.url.path == f"/v1/threads/{THREAD}/messages"
    ]


def _fill(server: FakeServer, count: int) -> None:
    for number in range(count):
        author = "Alex" if number % 2 else "Robin"
        server.post(THREAD, SAM, f"{author} adds note {number} on example.com")


# -- the feed cursor ------------------------------------------------------------------------


async def test_a_poll_without_a_cursor_sends_none_so_acked_events_stay_acked(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    await client.poll_events()
    await client.poll_events(limit=10)
    await client.poll_events(after=4, limit=10)
    polls = [dict(r.url.params) for r in server.requests if r.url.path == "/v1/agent/events"]
    assert polls == [{}, {"limit": "10"}, {"after": "4", "limit": "10"}]


# -- long threads ---------------------------------------------------------------------------


async def test_reading_to_the_latest_pages_through_a_thread_longer_than_a_page(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    _fill(server, LONG_THREAD)
    page = await client.read_history_to_latest(THREAD)
    assert page.covers_through_seq == LONG_THREAD
    assert [m.thread_seq for m in page.messages] == list(range(1, LONG_THREAD + 1))
    assert page.target_key == KEY
    assert _history_cursors(server) == ["0", str(FAKE_DEFAULT_LIMIT)]
    assert client.freshness.frontier(KEY).observed_seq == LONG_THREAD


async def test_reading_to_the_latest_ends_a_hold_that_one_page_never_ends(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    _fill(server, LONG_THREAD)
    first_page = await client.read_history(THREAD)
    assert first_page.covers_through_seq == FAKE_DEFAULT_LIMIT
    held = await client.send(THREAD, "Done, Alex.", "reply-1")
    assert (held.state, held.latest_seq) == (SendState.HELD, LONG_THREAD)
    # The first page again covers no more: the session still holds the send locally.
    await client.read_history(THREAD)
    again = await client.send(THREAD, "Done, Alex.", "reply-1")
    assert (again.state, again.held_locally) == (SendState.HELD, True)

    caught_up = await client.read_history_to_latest(THREAD)
    assert caught_up.covers_through_seq == LONG_THREAD
    sent = await client.send(THREAD, "Done, Alex.", "reply-1")
    assert (sent.state, sent.seen_up_to_seq, sent.accepted_seq) == (
        SendState.SENT,
        LONG_THREAD,
        LONG_THREAD + 1,
    )


async def test_reading_to_the_latest_from_a_cursor_reads_only_what_is_new(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    _fill(server, LONG_THREAD)
    page = await client.read_history_to_latest(THREAD, after_seq=FAKE_DEFAULT_LIMIT)
    assert [m.thread_seq for m in page.messages] == list(
        range(FAKE_DEFAULT_LIMIT + 1, LONG_THREAD + 1)
    )
    assert page.covers_through_seq == LONG_THREAD
    assert _history_cursors(server) == [str(FAKE_DEFAULT_LIMIT)]


async def test_reading_to_the_latest_stops_at_its_page_bound_and_goes_on_when_called_again(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    limit, max_pages = 4, 2
    _fill(server, limit * max_pages + 2)
    bounded = await client.read_history_to_latest(THREAD, limit=limit, max_pages=max_pages)
    assert bounded.covers_through_seq == limit * max_pages
    assert len(_history_cursors(server)) == max_pages
    rest = await client.read_history_to_latest(
        THREAD, after_seq=bounded.covers_through_seq, limit=limit, max_pages=max_pages
    )
    assert rest.covers_through_seq == limit * max_pages + 2
    assert [m.thread_seq for m in rest.messages] == [limit * max_pages + 1, limit * max_pages + 2]


async def test_reading_to_the_latest_refuses_a_bound_below_one_page(
    client: AgentRuntimeClient,
) -> None:
    with pytest.raises(ValueError, match="max_pages"):
        await client.read_history_to_latest(THREAD, max_pages=0)


# -- retries of chunked sends ----------------------------------------------------------------


async def test_a_retry_before_the_refresh_reports_the_stored_chunks_as_partial_held(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    def alex_writes_after_the_first_chunk(client_id: str) -> None:
        if client_id == "report-1:0":
            server.post(THREAD, SAM, "Alex: hold on, Robin changed it.")

    server.after_accept = alex_writes_after_the_first_chunk
    first = await client.send_logical(THREAD, "report-1", REPORT, chunk_size=CHUNK_BYTES)
    server.after_accept = None
    assert first.state is LogicalSendState.PARTIAL_HELD

    retry = await client.send_logical(THREAD, "report-1", REPORT, chunk_size=CHUNK_BYTES)
    assert retry.state is LogicalSendState.PARTIAL_HELD
    assert [(c.index, c.message_id, c.replayed) for c in retry.accepted] == [
        (0, first.accepted[0].message_id, True)
    ]
    assert (retry.held_chunk_index, retry.held_locally, retry.latest_seq) == (1, True, 2)
    assert retry.guidance == first.guidance
    # The stored chunk was replayed by the server; nothing new was stored.
    assert [m.client_message_id for m in server.threads[THREAD].messages] == ["report-1:0", None]


async def test_a_whole_retry_after_news_is_already_sent_not_held(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    done = await client.send_logical(THREAD, "report-2", REPORT, chunk_size=CHUNK_BYTES)
    assert done.state is LogicalSendState.SENT
    newer = server.post(THREAD, SAM, "Robin: thanks, Alex.")
    client.freshness.mark_pending(KEY, newer.seq)

    again = await client.send_logical(THREAD, "report-2", REPORT, chunk_size=CHUNK_BYTES)
    assert again.state is LogicalSendState.ALREADY_SENT
    assert [c.accepted_seq for c in again.accepted] == [c.accepted_seq for c in done.accepted]
    assert all(c.replayed for c in again.accepted)


async def test_a_logical_send_with_no_stored_chunk_is_still_held_locally(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    await client.send_logical(THREAD, "report-3", REPORT, chunk_size=CHUNK_BYTES)
    newer = server.post(THREAD, SAM, "Alex: one more thing.")
    client.freshness.mark_pending(KEY, newer.seq)
    before = len(server.requests)

    other = await client.send_logical(THREAD, "report-4", REPORT, chunk_size=CHUNK_BYTES)
    assert (other.state, other.held_locally, other.accepted) == (LogicalSendState.HELD, True, ())
    assert len(server.requests) == before


def test_the_stored_sends_forget_the_least_recently_used_beyond_their_bound() -> None:
    stored = StoredSends(limit=2)
    stored.remember(KEY, "a")
    stored.remember(KEY, "b")
    assert stored.known(KEY, "a")  # a is now the most recently used
    stored.remember(KEY, "c")
    assert not stored.known(KEY, "b")
    assert stored.known(KEY, "a")
    assert stored.known(KEY, "c")
    assert not stored.known("thread:other", "a")
    with pytest.raises(ValueError, match="limit"):
        StoredSends(limit=0)


async def test_a_retry_of_a_stored_single_send_is_already_sent_after_a_hold(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    # Seed section 8: "Idempotent retry returns already_sent with the persisted message id
    # and seq." A held answer for another message moves the session's latest seq ahead;
    # a retry of the message stored before must still reach the server, not be held.
    first = await client.send(THREAD, "Alex: the report is ready.", "answer-1")
    assert first.state is SendState.SENT
    server.post(THREAD, SAM, "Robin: one more thing.")
    other = await client.send(THREAD, "Alex: see the report.", "answer-2")
    assert (other.state, other.held_locally) == (SendState.HELD, False)

    retry = await client.send(THREAD, "Alex: the report is ready.", "answer-1")
    assert (retry.state, retry.held_locally) == (SendState.ALREADY_SENT, False)
    assert (retry.message_id, retry.accepted_seq) == (first.message_id, first.accepted_seq)
    never_stored = await client.send(THREAD, "Alex: see the report.", "answer-2")
    assert (never_stored.state, never_stored.held_locally) == (SendState.HELD, True)


async def test_a_logical_send_stopped_once_counts_once(server: FakeServer) -> None:
    # Seed section 7: "Count of multi-row logical sends that stop at a held chunk". A
    # retry held in the session without a request is the same stop, not a new one.
    metrics = ClientMetrics()
    async with AgentRuntimeClient(
        BASE_URL, TOKEN, transport=httpx.MockTransport(server.handle), metrics=metrics
    ) as client:

        def alex_writes_after_the_first_chunk(client_id: str) -> None:
            if client_id == "report-5:0":
                server.post(THREAD, SAM, "Alex: wait, there is news.")

        server.after_accept = alex_writes_after_the_first_chunk
        first = await client.send_logical(THREAD, "report-5", REPORT, chunk_size=CHUNK_BYTES)
        server.after_accept = None
        retry = await client.send_logical(THREAD, "report-5", REPORT, chunk_size=CHUNK_BYTES)
    assert (first.state, retry.state, retry.held_locally) == (
        LogicalSendState.PARTIAL_HELD,
        LogicalSendState.PARTIAL_HELD,
        True,
    )
    counted = metrics.registry.get_sample_value(
        "turnkeeper_agent_send_partial_held_total", {"target_type": "thread"}
    )
    assert counted == 1
