"""The agent runtime client against an in-test fake of the HTTP contract (API.md).

`FakeServer` implements just enough of the Agent runtime routes to exercise the client:
the send contract of DESIGN section 9 (idempotency lookup, then the CAS on the thread's
latest seq, held with the latest seq on a miss), thread reads, history pages with
``covers_through_seq``, the event feed, ack and heartbeat, and problem+json errors.
The real server's tests come with the server route.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
import httpx
import pytest
from structlog.testing import capture_logs

from turnkeeper.adapters.client import (
    UNEXPECTED_ANSWER,
    AgentRuntimeClient,
    AnswerInvalid,
    Capabilities,
    ClientProblem,
    ClientUnavailable,
    FollowupMode,
)
from turnkeeper.domain.freshness import HELD_GUIDANCE, SendState
from turnkeeper.domain.logical_sends import PARTIAL_HELD_GUIDANCE, LogicalSendState

BASE_URL = "https://turnkeeper.example.com"
TOKEN = "tok-lotse-secret"
LOTSE = "0190a000-0000-7000-8000-00000000a001"
SAM = "0190a000-0000-7000-8000-000000000003"
THREAD = "0190a000-0000-7000-8000-0000000000f1"
KEY = "thr:0190a000-0000-7000-8000-0000000000f1"
CREATED = "2025-03-01T09:00:00Z"


@attrs.define
class StoredMessage:
    id: str
    seq: int
    author_id: str
    content: str
    client_message_id: str | None = None


@attrs.define
class FakeThread:
    id: str
    target_key: str
    messages: list[StoredMessage] = attrs.Factory(list)

    @property
    def latest_seq(self) -> int:
        return len(self.messages)


def problem(
    status: int, code: str, *, reason: str | None = None, errors: list[dict[str, str]] | None = None
) -> httpx.Response:
    body: dict[str, Any] = {
        "type": f"https://turnkeeper.example.com/problems/{code}",
        "title": code.replace("_", " "),
        "status": status,
        "code": code,
        "correlation_id": "corr-1",
    }
    if reason:
        body["reason"] = reason
    if errors:
        body["errors"] = errors
    return httpx.Response(
        status, content=json.dumps(body), headers={"Content-Type": "application/problem+json"}
    )


@attrs.define
class FakeServer:
    """The send contract and the reads the client uses, in memory."""

    threads: dict[str, FakeThread] = attrs.Factory(dict)
    requests: list[httpx.Request] = attrs.Factory(list)
    # (author, client_message_id) -> (thread, content, message)
    by_client_id: dict[tuple[str, str], tuple[str, str, StoredMessage]] = attrs.Factory(dict)
    events: list[dict[str, Any]] = attrs.Factory(list)
    acked: list[int] = attrs.Factory(list)
    heartbeats: list[dict[str, Any]] = attrs.Factory(list)
    #: Called after a send is accepted, with the client message id (to interleave writes).
    after_accept: Callable[[str], None] | None = None

    def add_thread(self, thread_id: str = THREAD, target_key: str = KEY) -> FakeThread:
        thread = FakeThread(id=thread_id, target_key=target_key)
        self.threads[thread_id] = thread
        return thread

    def post(self, thread_id: str, author_id: str, content: str) -> StoredMessage:
        thread = self.threads[thread_id]
        message = StoredMessage(
            id=f"msg-{thread.latest_seq + 1}",
            seq=thread.latest_seq + 1,
            author_id=author_id,
            content=content,
        )
        thread.messages.append(message)
        return message

    def sends(self) -> list[dict[str, Any]]:
        """The bodies of the send requests, in order."""
        return [json.loads(r.content) for r in self.requests if r.url.path == "/v1/agent/send"]

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return problem(401, "unauthenticated")
        path, method = request.url.path, request.method
        parts = path.strip("/").split("/")
        if method == "GET" and parts[:2] == ["v1", "threads"]:
            thread = self.threads.get(parts[2])
            if thread is None:
                return problem(404, "not_found")
            if len(parts) == 3:
                return httpx.Response(200, json=self.thread_doc(thread))
            return self.history(thread, request)
        if method == "POST" and path == "/v1/agent/send":
            return self.send(json.loads(request.content))
        if method == "GET" and path == "/v1/agent/events":
            after = int(request.url.params.get("after", "0"))
            events = [e for e in self.events if e["seq"] > after]
            next_after = events[-1]["seq"] if events else after
            return httpx.Response(200, json={"events": events, "next_after": next_after})
        if method == "POST" and path == "/v1/agent/events/ack":
            self.acked.append(json.loads(request.content)["through_seq"])
            return httpx.Response(204)
        if method == "PUT" and path == "/v1/agent/heartbeat":
            self.heartbeats.append(json.loads(request.content))
            return httpx.Response(204)
        return problem(404, "not_found")

    def thread_doc(self, thread: FakeThread) -> dict[str, Any]:
        return {
            "id": thread.id,
            "channel_id": "0190a000-0000-7000-8000-0000000000c1",
            "title_source": "human",
            "state": "open",
            "latest_seq": thread.latest_seq,
            "target_key": thread.target_key,
            "created_by": SAM,
            "created_at": CREATED,
        }

    def history(self, thread: FakeThread, request: httpx.Request) -> httpx.Response:
        after = int(request.url.params.get("after_seq", "0"))
        limit = int(request.url.params.get("limit", "50"))
        page = [m for m in thread.messages if m.seq > after][:limit]
        covers = page[-1].seq if len(page) == limit else thread.latest_seq
        docs = [
            {
                "id": m.id,
                "thread_id": thread.id,
                "thread_seq": m.seq,
                "author": {"id": m.author_id, "kind": "person", "handle": "sam"},
                "origin": "human",
                "kind": "text",
                "content": m.content,
                "mentions": [],
                "created_at": CREATED,
                "version": 1,
            }
            for m in page
        ]
        return httpx.Response(200, json={"messages": docs, "covers_through_seq": covers})

    def send(self, body: dict[str, Any]) -> httpx.Response:
        thread = self.threads.get(body["target"])
        if thread is None:
            return problem(404, "not_found")
        freshness = body.get("freshness")
        if not body.get("client_message_id"):
            errors = [{"pointer": "/client_message_id", "code": "client_message_id_required"}]
            return problem(400, "validation_failed", errors=errors)
        if freshness is None:
            errors = [{"pointer": "/freshness", "code": "freshness_required"}]
            return problem(400, "validation_failed", errors=errors)
        if freshness["target_key"] != thread.target_key:
            errors = [{"pointer": "/freshness/target_key", "code": "target_key_mismatch"}]
            return problem(400, "validation_failed", errors=errors)
        seen = freshness["seen_up_to_seq"]
        client_id = body["client_message_id"]
        answer: dict[str, Any] = {
            "target_key": thread.target_key,
            "client_message_id": client_id,
            "seen_up_to_seq": seen,
        }
        # 1. Idempotency lookup before the CAS.
        stored = self.by_client_id.get((LOTSE, client_id))
        if stored is not None:
            if stored[:2] != (thread.id, body["content"]):
                return problem(409, "idempotency_conflict")
            message = stored[2]
            answer |= {
                "state": "already_sent",
                "message_id": message.id,
                "accepted_seq": message.seq,
                "latest_seq": thread.latest_seq,
            }
            return httpx.Response(200, json=answer, headers={"Idempotent-Replay": "true"})
        # 2. CAS on the thread's latest seq.
        if thread.latest_seq != seen:
            answer |= {
                "state": "held",
                "latest_seq": thread.latest_seq,
                "needs_refresh_until_seq": thread.latest_seq,
            }
            return httpx.Response(200, json=answer)
        message = self.post(thread.id, LOTSE, body["content"])
        message.client_message_id = client_id
        self.by_client_id[(LOTSE, client_id)] = (thread.id, body["content"], message)
        answer |= {
            "state": "sent",
            "message_id": message.id,
            "accepted_seq": message.seq,
            "latest_seq": message.seq,
        }
        if self.after_accept is not None:
            self.after_accept(client_id)
        return httpx.Response(200, json=answer)


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


def seqs(agent: AgentRuntimeClient, key: str = KEY) -> tuple[int, int, int]:
    f = agent.freshness.frontier(key)
    return (f.observed_seq, f.latest_known_seq, f.needs_refresh_until_seq)


# -- single sends -------------------------------------------------------------------------


async def test_a_fresh_send_is_sent_and_advances_the_observed_frontier(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    server.post(THREAD, SAM, "Can you check the invoice, Lotse?")
    page = await client.read_history(THREAD)
    assert page.covers_through_seq == 1
    assert [m.content for m in page.messages] == ["Can you check the invoice, Lotse?"]

    result = await client.send(THREAD, "Checked, Sam: it is paid.", "reply-1", run_id="run-1")

    assert result.state is SendState.SENT
    assert (result.message_id, result.accepted_seq, result.seen_up_to_seq) == ("msg-2", 2, 1)
    assert result.held_locally is False
    assert result.guidance is None
    assert seqs(client) == (2, 2, 0)
    assert server.sends() == [
        {
            "target": THREAD,
            "content": "Checked, Sam: it is paid.",
            "client_message_id": "reply-1",
            "run_id": "run-1",
            "freshness": {"target_key": KEY, "seen_up_to_seq": 1, "source_message_ids": ["msg-1"]},
        }
    ]


async def test_the_target_key_is_resolved_once_and_get_thread_moves_no_frontier(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    server.post(THREAD, SAM, "Hello")
    target = await client.get_thread(THREAD)
    assert (target.target_key, target.latest_seq) == (KEY, 1)
    assert seqs(client) == (0, 0, 0)
    assert await client.target_key(THREAD) == KEY
    assert [r.url.path for r in server.requests] == [f"/v1/threads/{THREAD}"]


async def test_a_retry_with_the_same_client_id_is_already_sent(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    first = await client.send(THREAD, "Hi Sam", "hello-1")
    again = await client.send(THREAD, "Hi Sam", "hello-1")
    assert (first.state, again.state) == (SendState.SENT, SendState.ALREADY_SENT)
    assert (again.message_id, again.accepted_seq) == (first.message_id, first.accepted_seq)
    assert len(server.threads[THREAD].messages) == 1


async def test_a_held_answer_records_latest_known_without_moving_observed(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    await client.read_history(THREAD)
    server.post(THREAD, SAM, "Wait, the amount changed.")

    held = await client.send(THREAD, "All good!", "reply-1")

    assert held.state is SendState.HELD
    assert held.held_locally is False
    assert (held.seen_up_to_seq, held.latest_seq, held.needs_refresh_until_seq) == (0, 1, 1)
    assert held.guidance == HELD_GUIDANCE
    assert seqs(client) == (0, 1, 1)
    assert len(server.sends()) == 1


async def test_a_send_behind_the_latest_known_is_held_locally_without_a_request(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    await client.read_history(THREAD)
    server.post(THREAD, SAM, "Wait, the amount changed.")
    await client.send(THREAD, "All good!", "reply-1")
    before = len(server.requests)

    again = await client.send(THREAD, "All good, really!", "reply-2")

    assert again.state is SendState.HELD
    assert again.held_locally is True
    assert (again.seen_up_to_seq, again.latest_seq, again.needs_refresh_until_seq) == (0, 1, 1)
    assert len(server.requests) == before

    await client.read_history(THREAD)
    assert seqs(client) == (1, 1, 0)
    after_refresh = await client.send(THREAD, "Thanks Sam, noted.", "reply-3")
    assert after_refresh.state is SendState.SENT
    assert after_refresh.seen_up_to_seq == 1
    assert server.sends()[-1]["freshness"]["seen_up_to_seq"] == 1


#: How a first attempt ends after the server stored it, and whether its retry is asked of
#: the server (True: outcome unknown) or may be held locally (False: a refusal).
LOST_OUTCOMES: dict[str, tuple[Callable[[httpx.Response], httpx.Response] | None, bool]] = {
    "server error": (lambda stored: problem(500, "internal"), True),
    "broken answer": (lambda stored: httpx.Response(200, json={"state": "sent"}), True),
    "no answer": (None, True),
    "refused": (lambda stored: problem(400, "validation_failed"), False),
}


@pytest.mark.parametrize("outcome", list(LOST_OUTCOMES))
async def test_a_retry_whose_first_attempt_ended_unclear_is_never_held_locally(
    server: FakeServer, outcome: str
) -> None:
    answer, asked = LOST_OUTCOMES[outcome]
    attempts: list[str] = []

    def first_send_unclear(request: httpx.Request) -> httpx.Response:
        stored = server.handle(request)
        if request.url.path != "/v1/agent/send" or attempts:
            return stored
        attempts.append(outcome)
        if answer is None:
            raise httpx.ReadError("closed before the answer", request=request)
        return answer(stored)

    async with AgentRuntimeClient(
        BASE_URL, TOKEN, transport=httpx.MockTransport(first_send_unclear)
    ) as agent:
        await agent.read_history(THREAD)
        with pytest.raises((ClientProblem, ClientUnavailable, AnswerInvalid)):
            await agent.send(THREAD, "All good!", "reply-1")
        server.post(THREAD, SAM, "Wait, the amount changed.")
        held = await agent.send(THREAD, "Noted.", "reply-2")
        assert (held.state, held.held_locally) == (SendState.HELD, False)
        before = len(server.requests)

        retry = await agent.send(THREAD, "All good!", "reply-1")

    if asked:
        # The server stored it: its retry is replayed, not reported as not sent.
        assert (retry.state, retry.held_locally) == (SendState.ALREADY_SENT, False)
        assert len(server.requests) == before + 1
    else:
        assert (retry.state, retry.held_locally) == (SendState.HELD, True)
        assert len(server.requests) == before


async def test_a_pending_delivery_holds_a_send_locally(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    await client.get_thread(THREAD)
    client.freshness.mark_pending(KEY, 3)
    result = await client.send(THREAD, "Hi", "reply-1")
    assert (result.state, result.held_locally) == (SendState.HELD, True)
    assert server.sends() == []


async def test_history_pages_surface_only_what_they_cover(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    for text in ("one", "two", "three"):
        server.post(THREAD, SAM, text)
    page = await client.read_history(THREAD, after_seq=0, limit=2)
    assert [m.thread_seq for m in page.messages] == [1, 2]
    assert page.covers_through_seq == 2
    assert seqs(client) == (2, 2, 0)
    assert client.freshness.frontier(KEY).source_message_id == "msg-2"
    page = await client.read_history(THREAD, after_seq=2, limit=2)
    assert page.covers_through_seq == 3
    assert seqs(client) == (3, 3, 0)
    assert "three" not in repr(page)


async def test_a_page_after_a_gap_surfaces_nothing(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    # Seed 4.4: the frontier moves once the covered messages are in the tool result; a
    # page read after seq 2 does not cover seq 2, which was never shown.
    for text in ("one", "two", "three"):
        server.post(THREAD, SAM, text)
    await client.read_history(THREAD, after_seq=0, limit=1)
    assert seqs(client)[0] == 1
    page = await client.read_history(THREAD, after_seq=2)
    assert [m.thread_seq for m in page.messages] == [3]
    assert seqs(client)[0] == 1, "message 2 was never surfaced"
    # Read on from the frontier, the page joins what was read: surfaced through 3.
    await client.read_history(THREAD, after_seq=1)
    assert seqs(client)[0] == 3


# -- chunked logical sends ----------------------------------------------------------------

CONTENT = "Alex asked for the report. Robin approved it. Sam will send it today."


async def test_an_intervening_message_stops_a_logical_send_and_a_retry_resumes(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    def sam_writes_after_first_chunk(client_id: str) -> None:
        if client_id == "report-1:0":
            server.post(THREAD, SAM, "Hold on, Robin changed it.")

    server.after_accept = sam_writes_after_first_chunk

    first = await client.send_logical(THREAD, "report-1", CONTENT, chunk_size=28)

    assert first.chunk_count == 3
    assert first.state is LogicalSendState.PARTIAL_HELD
    assert [(c.index, c.client_message_id, c.accepted_seq) for c in first.accepted] == [
        (0, "report-1:0", 1)
    ]
    assert (first.held_chunk_index, first.latest_seq, first.held_locally) == (1, 2, False)
    assert first.guidance == PARTIAL_HELD_GUIDANCE
    sends = server.sends()
    assert [s["client_message_id"] for s in sends] == ["report-1:0", "report-1:1"]
    assert [s["freshness"]["seen_up_to_seq"] for s in sends] == [0, 1]
    assert seqs(client) == (1, 2, 2)

    # Without a refresh the retry replays the stored chunk and is held locally after it:
    # partial_held with the chunk the server holds, one request (the replay).
    server.after_accept = None
    before = len(server.requests)
    stale = await client.send_logical(THREAD, "report-1", CONTENT, chunk_size=28)
    assert (stale.state, stale.held_locally, stale.held_chunk_index) == (
        LogicalSendState.PARTIAL_HELD,
        True,
        1,
    )
    assert [(c.index, c.accepted_seq, c.replayed) for c in stale.accepted] == [(0, 1, True)]
    assert [s["client_message_id"] for s in server.sends()[len(sends) :]] == ["report-1:0"]
    assert len(server.requests) == before + 1

    # After the refresh the stored chunk is replayed and the rest resumes.
    await client.read_history(THREAD)
    assert seqs(client) == (2, 2, 0)
    retry = await client.send_logical(THREAD, "report-1", CONTENT, chunk_size=28)

    assert retry.state is LogicalSendState.SENT
    assert [(c.index, c.accepted_seq, c.replayed) for c in retry.accepted] == [
        (0, 1, True),
        (1, 3, False),
        (2, 4, False),
    ]
    resumed = server.sends()[-3:]
    assert [s["client_message_id"] for s in resumed] == [
        "report-1:0",
        "report-1:1",
        "report-1:2",
    ]
    # chunk 1 resumes with max(refreshed observed 2, last accepted 1); chunk 2 follows it.
    assert [s["freshness"]["seen_up_to_seq"] for s in resumed] == [2, 2, 3]
    stored = [m.content for m in server.threads[THREAD].messages]
    assert "".join(stored[:1] + stored[2:]) == CONTENT
    assert seqs(client) == (4, 4, 0)

    replay = await client.send_logical(THREAD, "report-1", CONTENT, chunk_size=28)
    assert replay.state is LogicalSendState.ALREADY_SENT
    assert len(server.threads[THREAD].messages) == 4


async def test_a_logical_send_without_interruption_chains_accepted_seqs(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    server.post(THREAD, SAM, "Please write the summary.")
    await client.read_history(THREAD)
    result = await client.send_logical(THREAD, "summary-1", CONTENT, chunk_size=28)
    assert result.state is LogicalSendState.SENT
    assert result.guidance is None
    assert [s["freshness"]["seen_up_to_seq"] for s in server.sends()] == [1, 2, 3]
    assert [c.accepted_seq for c in result.accepted] == [2, 3, 4]


async def test_a_logical_send_held_at_the_first_chunk_is_held(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    server.post(THREAD, SAM, "New question")
    result = await client.send_logical(THREAD, "l-1", CONTENT, chunk_size=28)
    assert (result.state, result.accepted, result.held_chunk_index) == (
        LogicalSendState.HELD,
        (),
        0,
    )
    assert result.guidance == HELD_GUIDANCE


async def test_a_logical_send_refuses_empty_content(client: AgentRuntimeClient) -> None:
    with pytest.raises(ValueError, match="empty"):
        await client.send_logical(THREAD, "l-1", "", chunk_size=28)


async def test_a_retry_with_changed_content_is_an_idempotency_conflict(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    await client.send(THREAD, "Hi Sam", "hello-1")
    with pytest.raises(ClientProblem) as caught:
        await client.send(THREAD, "Hi Robin", "hello-1")
    assert (caught.value.status, caught.value.code) == (409, "idempotency_conflict")


# -- problems and transport ---------------------------------------------------------------


async def test_a_target_key_mismatch_is_a_problem_and_the_key_is_resolved_again(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    await client.get_thread(THREAD)
    server.threads[THREAD].target_key = "thr:rekeyed"
    with pytest.raises(ClientProblem) as caught:
        await client.send(THREAD, "Hi", "reply-1")
    problem_ = caught.value
    assert (problem_.status, problem_.code) == (400, "validation_failed")
    assert problem_.has_error("/freshness/target_key", "target_key_mismatch")
    assert problem_.correlation_id == "corr-1"

    result = await client.send(THREAD, "Hi", "reply-1")
    assert (result.state, result.target_key) == (SendState.SENT, "thr:rekeyed")


async def test_a_bad_token_is_unauthenticated(server: FakeServer) -> None:
    async with AgentRuntimeClient(
        BASE_URL, "tok-wrong", transport=httpx.MockTransport(server.handle)
    ) as agent:
        with pytest.raises(ClientProblem) as caught:
            await agent.poll_events()
    assert (caught.value.status, caught.value.code, caught.value.errors) == (
        401,
        "unauthenticated",
        (),
    )


async def test_an_error_answer_that_is_not_a_problem_keeps_its_status() -> None:
    def gateway(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text="<html>bad gateway</html>", headers={"Retry-After": "3"})

    async with AgentRuntimeClient(BASE_URL, TOKEN, transport=httpx.MockTransport(gateway)) as agent:
        with pytest.raises(ClientProblem) as caught:
            await agent.get_thread(THREAD)
    assert (caught.value.status, caught.value.code, caught.value.retry_after) == (
        502,
        UNEXPECTED_ANSWER,
        3,
    )


async def test_a_transport_failure_is_client_unavailable() -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async with AgentRuntimeClient(BASE_URL, TOKEN, transport=httpx.MockTransport(down)) as agent:
        with pytest.raises(ClientUnavailable):
            await agent.ack(3)


async def test_a_send_answer_that_breaks_the_contract_is_answer_invalid(
    server: FakeServer,
) -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/agent/send":
            return httpx.Response(200, json={"state": "sent", "target_key": KEY, "latest_seq": 1})
        return server.handle(request)

    async with AgentRuntimeClient(BASE_URL, TOKEN, transport=httpx.MockTransport(broken)) as agent:
        with pytest.raises(AnswerInvalid):
            await agent.send(THREAD, "Hi", "reply-1")


SENT = {
    "state": "sent",
    "target_key": KEY,
    "client_message_id": "reply-1",
    "message_id": "msg-2",
    "seen_up_to_seq": 1,
    "accepted_seq": 2,
    "latest_seq": 2,
}
HELD = {
    "state": "held",
    "target_key": KEY,
    "client_message_id": "reply-1",
    "seen_up_to_seq": 1,
    "latest_seq": 3,
    "needs_refresh_until_seq": 3,
}
FORGED_ANSWERS = [
    ("a negative seq", {**SENT, "accepted_seq": -5}),
    ("a null member", {**SENT, "needs_refresh_until_seq": None}),
    ("another target key", {**SENT, "target_key": "thr:0190a000-0000-7000-8000-0000000000f2"}),
    ("another client message id", {**SENT, "client_message_id": "reply-9"}),
    ("another claimed frontier", {**SENT, "seen_up_to_seq": 0}),
    ("sent at the claimed frontier", {**SENT, "accepted_seq": 1}),
    ("accepted past the latest", {**SENT, "accepted_seq": 3}),
    ("held below the claimed frontier", {**HELD, "latest_seq": 0}),
    ("held at the claimed frontier", {**HELD, "latest_seq": 1}),
]


def answering(server: FakeServer, answer: dict[str, Any]) -> httpx.MockTransport:
    """The fake server, with every send answered by `answer` (after one message of Sam)."""

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/agent/send":
            return httpx.Response(200, json=answer)
        return server.handle(request)

    server.post(THREAD, SAM, "Can you check the invoice?")
    return httpx.MockTransport(handle)


@pytest.mark.parametrize(
    "answer", [case[1] for case in FORGED_ANSWERS], ids=[case[0] for case in FORGED_ANSWERS]
)
async def test_a_send_answer_contradicting_its_request_changes_no_frontier(
    server: FakeServer, answer: dict[str, Any]
) -> None:
    async with AgentRuntimeClient(BASE_URL, TOKEN, transport=answering(server, answer)) as agent:
        await agent.read_history(THREAD)
        before = seqs(agent)
        with pytest.raises(AnswerInvalid):
            await agent.send(THREAD, "Checked, Sam: it is paid.", "reply-1")
        assert seqs(agent) == before


@pytest.mark.parametrize("answer", [SENT, HELD], ids=["sent", "held"])
async def test_the_unforged_answers_are_accepted(
    server: FakeServer, answer: dict[str, Any]
) -> None:
    async with AgentRuntimeClient(BASE_URL, TOKEN, transport=answering(server, answer)) as agent:
        await agent.read_history(THREAD)
        result = await agent.send(THREAD, "Checked, Sam: it is paid.", "reply-1")
    assert result.state.value == answer["state"]


# -- events and heartbeat -----------------------------------------------------------------


def agent_event(seq: int, kind: str, *, redelivered: bool = False) -> dict[str, Any]:
    event: dict[str, Any] = {
        "seq": seq,
        "type": kind,
        "actor": {"id": SAM, "kind": "person"},
        "scope": {
            "space_id": "0190a000-0000-7000-8000-0000000000b1",
            "channel_id": "0190a000-0000-7000-8000-0000000000c1",
            "thread_id": THREAD,
        },
        "resource": {"kind": "run", "id": "run-1"},
        "payload": {"run_id": "run-1", "thread_id": THREAD, "message_id": "msg-1"},
        "created_at": CREATED,
        "redelivered": redelivered,
    }
    if kind != "run.cancel_requested":
        event["invocation_token"] = f"inv-secret-{seq}"
    else:
        event["payload"] = {"run_id": "run-1"}
    return event


async def test_events_are_typed_and_acked_by_event_seq(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    server.events = [
        agent_event(7, "agent.invocation", redelivered=True),
        agent_event(8, "agent.followup"),
        agent_event(9, "run.cancel_requested"),
    ]
    page = await client.poll_events(after=0, limit=10)
    assert page.next_after == 9
    first, second, third = page.events
    assert (first.type, first.invocation_token, first.redelivered) == (
        "agent.invocation",
        "inv-secret-7",
        True,
    )
    assert (first.run_id, first.thread_id, first.message_id) == ("run-1", THREAD, "msg-1")
    assert (second.invocation_token, second.redelivered) == ("inv-secret-8", False)
    assert (third.invocation_token, third.run_id, third.thread_id) == (None, "run-1", THREAD)
    assert "inv-secret" not in repr(page)
    assert server.requests[-1].url.params["limit"] == "10"

    await client.ack(page.next_after)
    assert server.acked == [9]
    assert list(client.freshness) == []


async def test_the_heartbeat_announces_capabilities(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    await client.heartbeat(Capabilities(followups=FollowupMode.STEER))
    await client.heartbeat(Capabilities())
    assert server.heartbeats == [{"capabilities": {"followups": "steer"}}, {"capabilities": {}}]


# -- logs ---------------------------------------------------------------------------------


async def test_every_send_outcome_is_logged_without_content_or_tokens(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    with capture_logs() as records:
        await client.send(THREAD, "Secret plan for Alex", "reply-1")
        server.post(THREAD, SAM, "Update")
        await client.send(THREAD, "Secret plan, again", "reply-2")
        await client.send(THREAD, "Secret plan, third", "reply-3")
        await client.read_history(THREAD)
        await client.send_logical(THREAD, "plan-1", "Secret plan in two parts", chunk_size=16)
    sends = [r for r in records if r["event"] in ("agent_send", "agent_send_failed")][:3]
    assert [(r["event"], r.get("state"), r.get("held_locally")) for r in sends] == [
        ("agent_send", "sent", False),
        ("agent_send", "held", False),
        ("agent_send", "held", True),
    ]
    assert {k: sends[1][k] for k in ("target_key", "seen_up_to_seq", "latest_seq")} == {
        "target_key": KEY,
        "seen_up_to_seq": 1,
        "latest_seq": 2,
    }
    assert sends[0]["accepted_seq"] == 1
    logical = [r for r in records if r["event"] == "agent_logical_send"]
    assert [(r["state"], r["chunk_count"], r["accepted_count"]) for r in logical] == [
        ("sent", 2, 2)
    ]
    text = repr(records)
    assert "Secret" not in text
    assert TOKEN not in text


async def test_a_failed_send_is_logged_with_its_code(
    server: FakeServer, client: AgentRuntimeClient
) -> None:
    await client.send(THREAD, "Hi Sam", "hello-1")
    with capture_logs() as records, pytest.raises(ClientProblem):
        await client.send(THREAD, "Hi Robin", "hello-1")
    failed = [r for r in records if r["event"] == "agent_send_failed"]
    assert [(r["status"], r["code"], r["seen_up_to_seq"]) for r in failed] == [
        (409, "idempotency_conflict", 1)
    ]
    assert "Robin" not in repr(records)


def test_the_client_repr_shows_no_token() -> None:
    agent = AgentRuntimeClient(BASE_URL, TOKEN, transport=httpx.MockTransport(FakeServer().handle))
    assert TOKEN not in repr(agent)
    assert BASE_URL in repr(agent)
