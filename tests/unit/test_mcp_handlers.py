"""The tool handlers of ``turnkeeper mcp`` against an in-test fake of the HTTP contract.

`FakeTurnkeeper` answers the routes the handlers reach (thread reads, agent sends, the
agent feed and its ack, run reads and starts) and can stall, fail or refuse any of
them. A send keeps its logical id until its outcome is known, whatever ends the tool
call; wait_for_work acknowledges an invocation only when it was started or refused for
good, and a cancel request only reaches the model for a run that can still end; a
follow-up whose run is out of sight (or whose resume or acknowledgement is refused for
good) is acknowledged and skipped; a follow-up handed to the model is acknowledged
absorbed at its next act in the run (a send that is posted, await_input, finish_run);
ids in any spelling find the session's runs and pending sends.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import httpx
import pytest
from structlog.testing import capture_logs

from turnkeeper.adapters.client import AgentRuntimeClient
from turnkeeper.adapters.client.session import ApiSession
from turnkeeper.adapters.mcp.handlers import ToolAnswer, ToolHandlers
from turnkeeper.adapters.mcp.session import McpSession
from turnkeeper.application.settings import Settings

BASE_URL = "https://turnkeeper.example.com"
TOKEN = "tk_lotse_example"
THREAD = "01900000-0000-7000-8000-00000000000d"
RUN = "01900000-0000-7000-8000-00000000001b"
ASKING_MESSAGE = "01900000-0000-7000-8000-00000000001a"
LOTSE = "01900000-0000-7000-8000-00000000000a"
ALEX = "01900000-0000-7000-8000-000000000001"
#: Alex's answer to the run's question: a follow-up of RUN.
ANSWER = "01900000-0000-7000-8000-00000000001c"
KEY = f"thr:{THREAD}"
CREATED = "2026-11-30T09:00:00Z"
#: The other spellings of THREAD that `uuid.UUID` reads.
THREAD_SPELLINGS = (
    THREAD.upper(),
    "{" + THREAD + "}",
    f"urn:uuid:{THREAD}",
    THREAD.replace("-", ""),
)

SendHook = Callable[[httpx.Request], Awaitable[httpx.Response | None]]


def problem(status: int, code: str, *, retry_after: int | None = None) -> httpx.Response:
    """A problem+json answer."""
    body = {"title": code.replace("_", " ").capitalize(), "status": status, "code": code}
    headers = {"Content-Type": "application/problem+json"}
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    return httpx.Response(status, content=json.dumps(body), headers=headers)


@attrs.define
class FakeTurnkeeper:
    """The routes of the tool handlers, in memory; hooks stand in for the server."""

    #: The bodies of POST /v1/agent/send, in order.
    sends: list[dict[str, Any]] = attrs.Factory(list)
    #: Runs by id (state and thread).
    runs: dict[str, dict[str, Any]] = attrs.Factory(dict)
    #: The agent feed.
    events: list[dict[str, Any]] = attrs.Factory(list)
    #: The ``through_seq`` of every ack.
    acked: list[int] = attrs.Factory(list)
    #: Answers of POST /v1/runs/{id}/start, taken one per call; a start then succeeds.
    start_answers: list[httpx.Response | Exception] = attrs.Factory(list)
    #: Starts that commit and then lose their answer, taken one per call.
    lost_start_answers: list[Exception] = attrs.Factory(list)
    #: await_input calls that commit and then lose their answer, taken one per call.
    lost_await_answers: list[Exception] = attrs.Factory(list)
    #: Starts that another session wins first (the run is running, this one answers 409).
    starts_won_elsewhere: int = 0
    #: Answers of POST /v1/agent/events/ack, taken one per call; an ack then succeeds.
    ack_answers: list[httpx.Response | Exception] = attrs.Factory(list)
    #: Answers of POST /v1/runs/{id}/resume, taken one per call; a resume then succeeds.
    resume_answers: list[httpx.Response] = attrs.Factory(list)
    #: Answers of PATCH /v1/runs/{id}, taken one per call; a patch then succeeds.
    patch_answers: list[httpx.Response] = attrs.Factory(list)
    #: The run calls that changed something, in order: ``patch <message> <state>``,
    #: ``await_input``, ``finish <state>``.
    run_calls: list[str] = attrs.Factory(list)
    #: Called before a send is stored; its answer (if any) is the send's answer.
    send_hook: SendHook | None = None
    #: A call (``start``, ``ack``) whose change is stored and whose answer never comes.
    stalled: str | None = None
    #: Set when the stalled call reached the server.
    reached: asyncio.Event = attrs.Factory(asyncio.Event)
    latest_seq: int = 0

    def session(self) -> McpSession:
        transport = httpx.MockTransport(self.handle)
        return McpSession(
            AgentRuntimeClient(BASE_URL, TOKEN, transport=transport),
            ApiSession(BASE_URL, TOKEN, transport=transport),
        )

    def client_message_ids(self) -> list[str]:
        return [body["client_message_id"] for body in self.sends]

    def add_run(self, state: str) -> None:
        self.runs[RUN] = {
            "id": RUN,
            "thread_id": THREAD,
            "agent_id": LOTSE,
            "state": state,
            "version": 1,
            "triggering_message_id": ASKING_MESSAGE,
            "triggered_by": ALEX,
            "created_at": CREATED,
            "updated_at": CREATED,
            "followups": {},
        }

    def add_event(self, kind: str, message_id: str = ASKING_MESSAGE) -> None:
        self.events.append(
            {
                "seq": len(self.events) + 1,
                "type": kind,
                "actor": {"id": ALEX, "kind": "person"},
                "created_at": CREATED,
                "scope": {"thread_id": THREAD},
                "payload": {"run_id": RUN, "message_id": message_id},
                "invocation_token": "inv_example",
            }
        )

    def add_followup(self) -> None:
        """Alex's answer, a follow-up of RUN, as its agent.followup event."""
        self.runs[RUN]["followups"][ANSWER] = {"state": "queued"}
        self.add_event("agent.followup", ANSWER)

    def followup_state(self) -> str:
        state: str = self.runs[RUN]["followups"][ANSWER]["state"]
        return state

    async def handle(self, request: httpx.Request) -> httpx.Response:
        path, method = request.url.path, request.method
        if method == "GET" and path == f"/v1/threads/{THREAD}":
            document = {"id": THREAD, "latest_seq": self.latest_seq, "target_key": KEY}
            return httpx.Response(200, json=document | {"title": "Eskalation"})
        if method == "POST" and path == "/v1/agent/send":
            return await self.send(request)
        if method == "PUT" and path == "/v1/agent/heartbeat":
            return httpx.Response(204)
        if method == "GET" and path == "/v1/agent/events":
            through = max(self.acked, default=0)
            # As the server: the invocation of a run no longer queued is skipped.
            events = [e for e in self.events if e["seq"] > through and self._deliverable(e)][:1]
            next_after = events[-1]["seq"] if events else through
            return httpx.Response(200, json={"events": events, "next_after": next_after})
        if method == "POST" and path == "/v1/agent/events/ack":
            if self.ack_answers:
                answer = self.ack_answers.pop(0)
                if isinstance(answer, Exception):
                    raise answer
                return answer
            self.acked.append(json.loads(request.content)["through_seq"])
            await self._stall("ack")
            return httpx.Response(204)
        if method == "POST" and path == f"/v1/runs/{RUN}/start":
            started = self.start(request)
            await self._stall("start")
            return started
        if method == "GET" and path == f"/v1/runs/{RUN}" and RUN in self.runs:
            return httpx.Response(200, json=self.runs[RUN])
        if path.startswith(f"/v1/runs/{RUN}") and RUN in self.runs:
            return self.change_run(method, path.removeprefix(f"/v1/runs/{RUN}"), request)
        return problem(404, "not_found")

    def change_run(self, method: str, action: str, request: httpx.Request) -> httpx.Response:
        run = self.runs[RUN]
        if method == "POST" and action == "/resume":
            if self.resume_answers:
                return self.resume_answers.pop(0)
            run["state"] = "running"
        elif method == "PATCH" and action == "":
            if self.patch_answers:
                return self.patch_answers.pop(0)
            for op in json.loads(request.content)["ops"]:
                message_id = op["path"].split("/")[2]
                run["followups"][message_id] = {"state": op["value"]}
                self.run_calls.append(f"patch {message_id} {op['value']}")
        elif method == "POST" and action == "/await-input":
            if run["state"] != "running":
                return problem(409, "invalid_state_transition")
            run["state"] = "waiting_input"
            self.run_calls.append("await_input")
            if self.lost_await_answers:
                raise self.lost_await_answers.pop(0)
        elif method == "POST" and action == "/finish":
            run["state"] = json.loads(request.content)["state"]
            self.run_calls.append(f"finish {run['state']}")
        else:
            return problem(404, "not_found")
        run["version"] += 1
        return httpx.Response(200, json=run)

    async def send(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.sends.append(body)
        if self.send_hook is not None:
            answer = await self.send_hook(request)
            if answer is not None:
                return answer
        self.latest_seq += 1
        return httpx.Response(
            200,
            json={
                "state": "sent",
                "target_key": KEY,
                "client_message_id": body["client_message_id"],
                "message_id": f"01900000-0000-7000-8000-0000000001{self.latest_seq:02d}",
                "seen_up_to_seq": body["freshness"]["seen_up_to_seq"],
                "accepted_seq": self.latest_seq,
                "latest_seq": self.latest_seq,
            },
        )

    async def _stall(self, call: str) -> None:
        if self.stalled == call:
            self.reached.set()
            await asyncio.Event().wait()

    def _deliverable(self, event: dict[str, Any]) -> bool:
        if event["type"] != "agent.invocation" or RUN not in self.runs:
            return True
        return bool(self.runs[RUN]["state"] == "queued")

    def start(self, request: httpx.Request) -> httpx.Response:
        if self.start_answers:
            answer = self.start_answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer
        if self.starts_won_elsewhere:
            self.starts_won_elsewhere -= 1
            self.add_run("running")
        if RUN in self.runs and self.runs[RUN]["state"] != "queued":
            return problem(409, "invalid_state_transition")
        self.add_run("running")
        if self.lost_start_answers:
            raise self.lost_start_answers.pop(0)
        return httpx.Response(200, json=self.runs[RUN])


@pytest.fixture
def server() -> FakeTurnkeeper:
    return FakeTurnkeeper()


@pytest.fixture
def handlers() -> ToolHandlers:
    return ToolHandlers(Settings())


async def send(
    handlers: ToolHandlers, session: McpSession, content: str, target: str = THREAD
) -> ToolAnswer:
    return await handlers.call(session, "send_message", {"target": target, "content": content})


async def wait(handlers: ToolHandlers, session: McpSession) -> ToolAnswer:
    # 0 seconds: one look at the feed, so the test never waits for time to pass.
    return await handlers.call(session, "wait_for_work", {"timeout_seconds": 0})


def logical_id(client_message_id: str) -> str:
    return client_message_id.rpartition(":")[0]


# -- send_message keeps its logical id until the outcome is known --------------------------


async def test_a_cancelled_send_keeps_its_logical_id_for_the_resend(
    server: FakeTurnkeeper, handlers: ToolHandlers
) -> None:
    reached = asyncio.Event()

    async def stall(request: httpx.Request) -> httpx.Response | None:
        # The request reached the server (it may store the part) but no answer comes.
        reached.set()
        await asyncio.Event().wait()
        return None

    server.send_hook = stall
    session = server.session()
    call = asyncio.create_task(send(handlers, session, "The invoice is paid, Alex."))
    await reached.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    server.send_hook = None

    answer = await send(handlers, session, "The invoice is paid, Alex.")

    assert answer.outcome == "sent"
    first, resent = server.client_message_ids()
    assert first == resent
    assert all(thread != THREAD for thread, _digest in session.pending)


async def _raise_unforeseen(request: httpx.Request) -> httpx.Response | None:
    raise RuntimeError("the connection broke in an unforeseen way")


async def _answer_garbled(request: httpx.Request) -> httpx.Response | None:
    return httpx.Response(200, json={"state": "sent"})


@pytest.mark.parametrize(
    ("hook", "outcome"),
    [(_raise_unforeseen, "internal"), (_answer_garbled, "answer_invalid")],
    ids=["unforeseen failure", "answer breaks the contract"],
)
async def test_a_send_that_failed_otherwise_keeps_its_logical_id_for_the_resend(
    server: FakeTurnkeeper, handlers: ToolHandlers, hook: SendHook, outcome: str
) -> None:
    server.send_hook = hook
    session = server.session()
    failed = await send(handlers, session, "Sam, the report is ready.")
    server.send_hook = None

    resent = await send(handlers, session, "Sam, the report is ready.")

    assert (failed.is_error, failed.outcome) == (True, outcome)
    assert resent.outcome == "sent"
    first, second = server.client_message_ids()
    assert first == second


async def test_a_sent_send_forgets_its_logical_id(
    server: FakeTurnkeeper, handlers: ToolHandlers
) -> None:
    session = server.session()
    await send(handlers, session, "Robin, done.")
    await send(handlers, session, "Robin, done.")
    first, second = server.client_message_ids()
    assert logical_id(first) != logical_id(second)


async def test_an_idempotency_conflict_ends_the_logical_send(
    server: FakeTurnkeeper, handlers: ToolHandlers
) -> None:
    async def conflict(request: httpx.Request) -> httpx.Response | None:
        return problem(409, "idempotency_conflict")

    server.send_hook = conflict
    session = server.session()
    refused = await send(handlers, session, "Alex, see above.")
    server.send_hook = None
    resent = await send(handlers, session, "Alex, see above.")

    assert (refused.is_error, refused.outcome) == (True, "idempotency_conflict")
    assert resent.outcome == "sent"
    first, second = server.client_message_ids()
    assert logical_id(first) != logical_id(second)


# -- wait_for_work acknowledges an invocation only once it is settled ------------------------


@pytest.mark.parametrize(
    ("refusal", "words"),
    [
        (problem(429, "rate_limited", retry_after=12), "(rate_limited). Wait 12 seconds"),
        (problem(503, "unavailable", retry_after=3), "(unavailable). Wait 3 seconds"),
        (problem(500, "internal"), "(internal). Wait a moment"),
        (httpx.ConnectError("connection refused"), "(unavailable). Wait a moment"),
    ],
    ids=["429", "503", "500", "unreachable"],
)
async def test_a_start_refused_for_now_leaves_the_invocation_for_the_next_wait(
    server: FakeTurnkeeper,
    handlers: ToolHandlers,
    refusal: httpx.Response | Exception,
    words: str,
) -> None:
    server.add_event("agent.invocation")
    server.start_answers.append(refusal)
    session = server.session()

    deferred = await wait(handlers, session)

    assert deferred.is_error
    assert words in deferred.text
    assert "call wait_for_work again" in deferred.text
    assert server.acked == []

    started = await wait(handlers, session)

    assert started.outcome == "invocation"
    assert started.structured == {
        "event": "invocation",
        "run_id": RUN,
        "thread_id": THREAD,
        "message_id": ASKING_MESSAGE,
    }
    assert server.acked == [1]
    assert session.runs == {THREAD: RUN}


@pytest.mark.parametrize(
    "refusal",
    [problem(503, "unavailable"), httpx.ConnectError("connection refused")],
    ids=["503", "unreachable"],
)
async def test_a_started_run_whose_ack_fails_is_handed_over_at_once(
    server: FakeTurnkeeper, handlers: ToolHandlers, refusal: httpx.Response | Exception
) -> None:
    # The server never delivers the invocation of a started run again: the work is the
    # model's now, and a later ack covers the event.
    server.add_event("agent.invocation")
    server.ack_answers.append(refusal)
    session = server.session()

    started = await wait(handlers, session)

    assert started.outcome == "invocation"
    assert session.runs == {THREAD: RUN}


async def test_a_start_whose_answer_is_lost_is_handed_over_at_the_next_wait(
    server: FakeTurnkeeper, handlers: ToolHandlers
) -> None:
    # The start committed, its answer never came: the server skips the invocation from
    # now on, so the session keeps it and hands the running run over next time.
    server.add_event("agent.invocation")
    server.lost_start_answers.append(httpx.ReadError("connection lost"))
    session = server.session()

    deferred = await wait(handlers, session)
    assert deferred.is_error
    assert "call wait_for_work again" in deferred.text

    started = await wait(handlers, session)

    assert started.outcome == "invocation"
    assert started.structured is not None
    assert started.structured["run_id"] == RUN
    assert session.runs == {THREAD: RUN}
    assert server.acked == [1]
    assert await wait(handlers, session) == await wait(handlers, session)  # nothing more


@pytest.mark.parametrize("stalled", ["start", "ack"])
async def test_a_wait_cancelled_while_it_starts_a_run_hands_it_over_at_the_next_wait(
    server: FakeTurnkeeper, handlers: ToolHandlers, stalled: str
) -> None:
    # Found by a black-box audit: a host's read timeout cancelled the call after the
    # start committed (or its ack), and the server never delivers a started run's
    # invocation again: the run stayed running with nobody told of it.
    server.add_event("agent.invocation")
    server.stalled = stalled
    session = server.session()
    call = asyncio.create_task(wait(handlers, session))
    await server.reached.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    server.stalled = None

    started = await wait(handlers, session)

    assert started.outcome == "invocation"
    assert started.structured is not None
    assert started.structured["run_id"] == RUN
    assert session.runs == {THREAD: RUN}
    assert await wait(handlers, session) == await wait(handlers, session)  # nothing more


async def test_an_invocation_another_session_started_is_acknowledged_and_skipped(
    server: FakeTurnkeeper, handlers: ToolHandlers
) -> None:
    # Found by a black-box audit: two sessions (or two parallel waits of one) both got the
    # invocation, and the one whose start lost took the running run over too, so one
    # question got two answers in one run.
    server.add_event("agent.invocation")
    server.starts_won_elsewhere = 1
    session = server.session()

    answer = await wait(handlers, session)

    assert (answer.is_error, answer.outcome) == (False, "idle")
    assert server.acked == [1]
    assert session.runs == {}


@pytest.mark.parametrize(
    "refusal",
    [problem(403, "invocation_token_invalid"), problem(404, "not_found")],
    ids=["403 invocation_token_invalid", "404 not_found"],
)
async def test_a_start_refused_for_good_skips_the_invocation(
    server: FakeTurnkeeper, handlers: ToolHandlers, refusal: httpx.Response
) -> None:
    server.add_event("agent.invocation")
    server.start_answers.append(refusal)
    session = server.session()

    answer = await wait(handlers, session)

    assert (answer.is_error, answer.outcome) == (False, "idle")
    assert server.acked == [1]
    assert session.runs == {}


async def test_a_start_refused_otherwise_is_a_tool_error_and_not_acknowledged(
    server: FakeTurnkeeper, handlers: ToolHandlers
) -> None:
    server.add_event("agent.invocation")
    server.start_answers.append(problem(401, "unauthenticated"))

    answer = await wait(handlers, server.session())

    assert (answer.is_error, answer.outcome) == (True, "unauthenticated")
    assert server.acked == []


# -- a cancel request reaches the model only for a run that can still end -------------------


async def test_a_cancel_request_of_an_ended_run_is_acknowledged_and_skipped(
    server: FakeTurnkeeper, handlers: ToolHandlers
) -> None:
    server.add_run("completed")
    server.add_event("run.cancel_requested")
    session = server.session()
    session.take_run(THREAD, RUN)

    answer = await wait(handlers, session)

    assert (answer.is_error, answer.outcome) == (False, "idle")
    assert "finish_run" not in answer.text
    assert server.acked == [1]
    assert session.runs == {}


async def test_a_cancel_request_of_a_running_run_asks_to_finish_it_cancelled(
    server: FakeTurnkeeper, handlers: ToolHandlers
) -> None:
    server.add_run("running")
    server.add_event("run.cancel_requested")

    answer = await wait(handlers, server.session())

    assert answer.outcome == "cancel_requested"
    assert f'finish_run with run_id "{RUN}" and state "cancelled"' in answer.text
    assert answer.structured == {"event": "cancel_requested", "run_id": RUN, "thread_id": THREAD}
    assert server.acked == [1]


async def test_a_cancel_request_of_an_unknown_run_is_acknowledged_and_skipped(
    server: FakeTurnkeeper, handlers: ToolHandlers
) -> None:
    server.add_event("run.cancel_requested")

    answer = await wait(handlers, server.session())

    assert answer.outcome == "idle"
    assert server.acked == [1]


# -- ids in any spelling find the session's runs and pending sends ---------------------------


@pytest.mark.parametrize("spelling", THREAD_SPELLINGS)
async def test_a_target_in_another_spelling_carries_the_run_of_its_thread(
    server: FakeTurnkeeper, handlers: ToolHandlers, spelling: str
) -> None:
    session = server.session()
    session.take_run(THREAD, RUN)  # as wait_for_work notes it: the server's spelling

    answer = await send(handlers, session, "Checking invoice 4711 now.", target=spelling)

    assert answer.outcome == "sent"
    (body,) = server.sends
    assert (body["target"], body.get("run_id")) == (THREAD, RUN)


@pytest.mark.parametrize("spelling", THREAD_SPELLINGS)
async def test_a_resend_in_another_spelling_reuses_the_pending_logical_id(
    server: FakeTurnkeeper, handlers: ToolHandlers, spelling: str
) -> None:
    async def unavailable(request: httpx.Request) -> httpx.Response | None:
        return problem(503, "unavailable")

    server.send_hook = unavailable
    session = server.session()
    await send(handlers, session, "Sam, the report is ready.")
    server.send_hook = None

    answer = await send(handlers, session, "Sam, the report is ready.", target=spelling)

    assert answer.outcome == "sent"
    first, resent = server.client_message_ids()
    assert first == resent
    assert session.pending == {}


# -- a follow-up out of reach is acknowledged and skipped -----------------------------------


async def test_a_followup_of_a_run_out_of_sight_is_acknowledged_and_skipped(
    server: FakeTurnkeeper, handlers: ToolHandlers
) -> None:
    # The agent can no longer read the run (its right on the thread was taken away):
    # GET /v1/runs/{id} answers 404 on every delivery, so the event must not stay.
    server.add_event("agent.followup", ANSWER)
    session = server.session()

    skipped = await wait(handlers, session)

    assert (skipped.is_error, skipped.outcome) == (False, "idle")
    assert server.acked == [1]
    assert session.runs == {}

    server.add_event("agent.invocation")
    started = await wait(handlers, session)

    assert started.outcome == "invocation"
    assert server.acked == [1, 2]


@pytest.mark.parametrize(
    "refusal",
    [problem(403, "invocation_token_invalid"), problem(404, "not_found")],
    ids=["403 invocation_token_invalid", "404 not_found"],
)
async def test_a_followup_whose_resume_is_refused_for_good_is_acknowledged_and_skipped(
    server: FakeTurnkeeper, handlers: ToolHandlers, refusal: httpx.Response
) -> None:
    server.add_run("waiting_input")
    server.add_followup()
    server.resume_answers.append(refusal)
    session = server.session()

    answer = await wait(handlers, session)

    assert (answer.is_error, answer.outcome) == (False, "idle")
    assert server.acked == [1]
    assert session.runs == {}
    assert session.handed == {}


@pytest.mark.parametrize(
    "refusal",
    [problem(403, "forbidden"), problem(404, "not_found")],
    ids=["403 forbidden", "404 not_found"],
)
async def test_a_followup_whose_acknowledgement_is_refused_for_good_is_skipped(
    server: FakeTurnkeeper, handlers: ToolHandlers, refusal: httpx.Response
) -> None:
    server.add_run("running")
    server.add_followup()
    server.patch_answers.append(refusal)
    session = server.session()

    answer = await wait(handlers, session)

    assert (answer.is_error, answer.outcome) == (False, "idle")
    assert server.acked == [1]
    assert session.handed == {}


@pytest.mark.parametrize(
    "passing",
    [problem(429, "rate_limited"), problem(503, "unavailable")],
    ids=["429 rate_limited", "503 unavailable"],
)
async def test_a_followup_whose_acknowledgement_passes_is_handed_over_at_the_next_wait(
    server: FakeTurnkeeper, handlers: ToolHandlers, passing: httpx.Response
) -> None:
    # Found by an audit: a 429 or 5xx of the `delivered` acknowledgement was logged as a
    # redelivery and the follow-up handed over unacknowledged (it stayed queued).
    server.add_run("running")
    server.add_followup()
    server.patch_answers.append(passing)
    session = server.session()

    refused = await wait(handlers, session)

    assert refused.is_error, refused.text
    assert server.acked == []
    assert session.handed == {}
    assert server.followup_state() == "queued"

    answer = await wait(handlers, session)

    assert (answer.is_error, answer.outcome) == (False, "followup")
    assert server.followup_state() == "delivered"
    assert server.acked == [1]
    assert session.handed == {RUN: [ANSWER]}


# -- a follow-up handed to the model is absorbed at its next act in the run ----------------


async def _handed_over(server: FakeTurnkeeper, handlers: ToolHandlers) -> McpSession:
    """A session whose model was handed Alex's answer to the waiting run RUN."""
    server.add_run("waiting_input")
    server.add_followup()
    session = server.session()
    session.take_run(THREAD, RUN)
    answer = await wait(handlers, session)
    assert answer.structured == {
        "event": "followup",
        "run_id": RUN,
        "thread_id": THREAD,
        "message_id": ANSWER,
    }
    assert server.followup_state() == "delivered"
    assert server.run_calls == [f"patch {ANSWER} delivered"]
    server.run_calls.clear()
    return session


ACTS = {
    "send_message": ("send_message", {"target": THREAD, "content": "Invoice 7 is paid."}),
    "await_input": ("await_input", {"run_id": RUN, "question": "Anything else?"}),
    "finish_run": ("finish_run", {"run_id": RUN, "state": "completed"}),
}
#: What the server records of each act after the absorb (a send is no run call).
ACT_CALLS = {"send_message": [], "await_input": ["await_input"], "finish_run": ["finish completed"]}


@pytest.mark.parametrize("act", ACTS)
async def test_the_next_act_in_the_run_acknowledges_the_handed_followup_absorbed(
    server: FakeTurnkeeper, handlers: ToolHandlers, act: str
) -> None:
    session = await _handed_over(server, handlers)
    name, arguments = ACTS[act]

    answer = await handlers.call(session, name, arguments)

    assert not answer.is_error, answer.text
    # Before the act itself: a finished run must not defer what the model answered.
    assert server.run_calls == [f"patch {ANSWER} absorbed", *ACT_CALLS[act]]
    assert server.followup_state() == "absorbed"
    assert session.handed == {}


async def test_a_held_send_absorbs_nothing(server: FakeTurnkeeper, handlers: ToolHandlers) -> None:
    session = await _handed_over(server, handlers)

    async def held(request: httpx.Request) -> httpx.Response | None:
        return httpx.Response(200, json={"state": "held", "target_key": KEY, "latest_seq": 9})

    server.send_hook = held
    answer = await send(handlers, session, "Invoice 7 is paid.")

    assert answer.outcome == "held"
    assert server.run_calls == []
    assert session.handed == {RUN: [ANSWER]}


async def test_an_ended_run_refusing_the_absorb_is_logged_and_the_finish_goes_on(
    server: FakeTurnkeeper, handlers: ToolHandlers
) -> None:
    session = await _handed_over(server, handlers)
    ended = httpx.Response(
        409,
        json={"title": "Conflict", "status": 409, "code": "conflict", "reason": "run_not_active"},
        headers={"Content-Type": "application/problem+json"},
    )
    server.patch_answers.append(ended)

    with capture_logs() as records:
        answer = await handlers.call(session, "finish_run", {"run_id": RUN, "state": "completed"})

    assert not answer.is_error, answer.text
    assert server.run_calls == ["finish completed"]
    skipped = [r for r in records if r["event"] == "mcp_followup_ack_skipped"]
    assert [(r["run_id"], r["code"]) for r in skipped] == [(RUN, "conflict")]
    assert session.handed == {}


async def test_a_passing_failure_of_the_absorb_leaves_the_finish_for_the_next_call(
    server: FakeTurnkeeper, handlers: ToolHandlers
) -> None:
    session = await _handed_over(server, handlers)
    server.patch_answers.append(problem(503, "unavailable"))
    finish = {"run_id": RUN, "state": "completed"}

    refused = await handlers.call(session, "finish_run", finish)

    assert (refused.is_error, refused.outcome) == (True, "unavailable")
    assert server.run_calls == []
    finished = await handlers.call(session, "finish_run", finish)
    assert not finished.is_error
    assert server.run_calls == [f"patch {ANSWER} absorbed", "finish completed"]


async def test_a_posted_send_stays_posted_when_the_absorb_fails_for_now(
    server: FakeTurnkeeper, handlers: ToolHandlers
) -> None:
    session = await _handed_over(server, handlers)
    server.patch_answers.append(problem(503, "unavailable"))

    answer = await send(handlers, session, "Invoice 7 is paid.")

    assert (answer.is_error, answer.outcome) == (False, "sent")
    assert session.handed == {RUN: [ANSWER]}
    assert session.pending == {}
    await handlers.call(session, "finish_run", {"run_id": RUN, "state": "completed"})
    assert server.run_calls == [f"patch {ANSWER} absorbed", "finish completed"]


async def test_a_retried_await_input_whose_answer_was_lost_confirms_the_wait(
    server: FakeTurnkeeper, handlers: ToolHandlers
) -> None:
    # Found by a black-box audit: told "try the same call again", the model got "not in a
    # state that allows this" for a run that waited as it had asked.
    server.add_run("running")
    server.lost_await_answers.append(httpx.ReadError("connection lost"))
    session = server.session()
    arguments = {"run_id": RUN, "question": "Which invoice, Alex?"}

    lost = await handlers.call(session, "await_input", arguments)
    assert lost.is_error
    assert "again" in lost.text

    again = await handlers.call(session, "await_input", arguments)

    assert not again.is_error
    assert again.outcome == "waiting_input"
    assert server.run_calls == ["await_input"]


async def test_await_input_of_a_run_that_does_not_wait_stays_refused(
    server: FakeTurnkeeper, handlers: ToolHandlers
) -> None:
    server.add_run("completed")
    answer = await handlers.call(
        server.session(), "await_input", {"run_id": RUN, "question": "Which invoice, Alex?"}
    )
    assert answer.is_error
    assert "invalid_state_transition" in answer.text
