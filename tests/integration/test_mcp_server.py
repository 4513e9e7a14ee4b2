"""``turnkeeper mcp`` with the MCP SDK's own client, against a served turnkeeper on PostgreSQL.

The runtime side of the freshness gate (seed message-freshness-gate 4.3 to 4.5, 6), each
scenario over stdio (the client spawns ``turnkeeper mcp``) and over streamable HTTP
(``turnkeeper mcp --http``): a send after read_history is sent; a newer unread message
holds it, with guidance free of seqs, keys and ids, and the next send is held without a
request until the thread is read; a long answer goes in parts, and a part held by a
person's post stops the rest (partial_held, counted on the metrics port) until a resend
of the same content replays the stored parts as already_sent; a run's invocation,
follow-up and cancel request reach wait_for_work, and await_input waits until a person's
answer resumes the run. Tool errors (no right on the target, an unknown target, rate
limited) carry the problem's title and code, never a token or a stack trace. A follow-up
the model answered is absorbed and opens no follow-on run; a new session that read after
a gap is told to read from the start, and doing so ends with a send. ``turnkeeper mcp
--http`` logs no content even at debug, and exits 0 on SIGTERM and SIGINT. The
transcript of one turn in docs/mcp.md is replayed and must be what the tools answer. The
server records the state of every agent send (`tests.support.mcp.SendRecorder`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
from mcp import Client
from psycopg_pool import AsyncConnectionPool

from tests.live_server import START_STOP_SECONDS, free_port
from tests.support.mcp import (
    CALL_TIMEOUT_SECONDS,
    READY_POLL_SECONDS,
    ROOT,
    TRANSPORTS,
    Served,
    mcp_client,
    mcp_environment,
    mcp_http_process,
    served_recorded,
    text_of,
)
from tests.support.services import services_over
from turnkeeper.adapters.postgres.uow import Conn, PostgresUnitOfWorkFactory
from turnkeeper.adapters.postgres.wakeup import PostgresEventWaker
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.settings import Settings
from turnkeeper.domain.messaging import Message, MessageDraft, Origin
from turnkeeper.domain.runs import RunState
from turnkeeper.domain.world import Level, ResourceKind

#: Small parts, so that a short answer goes in three messages.
CHUNK_BYTES = 20
LONG_ANSWER = "First part here. Second part here. Third part here."
PARTS = ("First part here. ", "Second part here. ", "Third part here.")
#: How long wait_for_work may wait for work that is already there.
WAIT_SECONDS = 10


@attrs.define
class Stage:
    """A served turnkeeper on PostgreSQL with the demo world."""

    services: Services
    world: DemoWorld
    served: Served

    @property
    def thread(self) -> uuid.UUID:
        thread_id = self.world.channels["eskalation"].main_thread_id
        assert thread_id is not None
        return thread_id

    @property
    def target(self) -> str:
        return str(self.thread)

    @property
    def token(self) -> str:
        return self.world.agents["lotse"].token

    def env(self, **extra: str) -> dict[str, str]:
        return mcp_environment(self.served.url, self.token, extra)

    async def post(self, content: str, cid: str, *, mention: bool = False) -> Message:
        mentions = (self.world.principal("lotse").id,) if mention else ()
        posted = await self.services.conversation.create_message(
            self.world.principal("alex"),
            self.thread,
            MessageDraft(client_msg_id=cid, content=content, mentions=mentions),
        )
        return posted.message

    async def agent_contents(self) -> list[str]:
        history = await self.services.conversation.list_messages(
            self.world.principal("alex"), self.thread
        )
        return [m.content for m in history.messages if m.origin is Origin.AGENT]


async def _stage(
    pg_pool: AsyncConnectionPool[Conn], pg_conninfo: str, settings: Settings
) -> AsyncIterator[Stage]:
    waker = PostgresEventWaker(pg_conninfo)
    await waker.start()
    try:
        services = services_over(PostgresUnitOfWorkFactory(pg_pool, waker=waker), settings)
        world = await build_demo_world(services)
        async with served_recorded(services) as served:
            yield Stage(services=services, world=world, served=served)
    finally:
        await waker.aclose()


@pytest.fixture
async def stage(pg_pool: AsyncConnectionPool[Conn], pg_conninfo: str) -> AsyncIterator[Stage]:
    async for made in _stage(pg_pool, pg_conninfo, Settings()):
        yield made


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def assert_guidance_only(text: str, stage: Stage) -> None:
    """Held guidance: the thread in words and what to do, no seq, key or id."""
    assert "read_history" in text
    assert not any(ch.isdigit() for ch in text), text
    for word in ("seq", "key", "chunk", "thread:", stage.target):
        assert word not in text.lower(), word


async def test_a_send_after_read_history_is_sent(stage: Stage, transport: str) -> None:
    await stage.post("Is the invoice paid?", "q-1")
    async with mcp_client(transport, stage.env()) as client:
        read = await client.call_tool("read_history", {"target": stage.target})
        assert not read.is_error
        assert "@alex" in text_of(read)
        assert "Is the invoice paid?" in text_of(read)
        assert isinstance(read.structured_content, dict)
        (message,) = read.structured_content["messages"]
        assert message["author"]["handle"] == "alex"
        assert message["seq"] == read.structured_content["covers_through_seq"]
        sent = await client.call_tool(
            "send_message", {"target": stage.target, "content": "Yes, Alex."}
        )
    assert not sent.is_error
    assert text_of(sent).startswith("Sent as message ")
    assert stage.served.recorder.states == ["sent"]
    assert await stage.agent_contents() == ["Yes, Alex."]


async def test_a_newer_unread_message_holds_the_send_until_it_is_read(
    stage: Stage, transport: str
) -> None:
    await stage.post("Is the invoice paid?", "q-1")
    async with mcp_client(transport, stage.env()) as client:
        await client.call_tool("read_history", {"target": stage.target})
        await stage.post("Never mind, it is.", "q-2")
        answer = {"target": stage.target, "content": "Not yet, Alex."}
        held = await client.call_tool("send_message", answer)
        assert not held.is_error
        assert held.structured_content is None
        assert text_of(held).startswith("Not sent:")
        assert 'the thread "Eskalation"' in text_of(held)
        assert_guidance_only(text_of(held), stage)
        # The session knows of the unread message: no request until it is read.
        again = await client.call_tool("send_message", answer)
        assert text_of(again) == text_of(held)
        assert stage.served.recorder.states == ["held"]
        read = await client.call_tool("read_history", {"target": stage.target, "after_seq": 1})
        assert "Never mind, it is." in text_of(read)
        sent = await client.call_tool(
            "send_message", {"target": stage.target, "content": "Good, thanks."}
        )
    assert text_of(sent).startswith("Sent as message ")
    assert stage.served.recorder.states == ["held", "sent"]
    assert await stage.agent_contents() == ["Good, thanks."]


async def test_a_new_session_that_read_after_a_gap_is_told_to_read_from_the_start(
    stage: Stage, transport: str
) -> None:
    # A page after a gap surfaces nothing (the freshness gate), so a send stays held; the
    # answers used to say "read through seq 3" and "read them", and a model doing as told
    # read after the gap again, for ever. Doing as these answers say ends with a send.
    for number in range(1, 4):
        await stage.post(f"Note {number} on the invoice.", f"q-{number}")
    async with mcp_client(transport, stage.env()) as client:
        gap = await client.call_tool("read_history", {"target": stage.target, "after_seq": 2})
        assert "Note 3 on the invoice." in text_of(gap)
        assert "not counted as read" in text_of(gap)
        assert "read through" not in text_of(gap)
        answer = {"target": stage.target, "content": "All three are noted, Alex."}
        held = await client.call_tool("send_message", answer)
        assert text_of(held).startswith(
            'Not sent: the thread "Eskalation" has messages you have not read in this session.'
        )
        assert "from its start" in text_of(held)
        assert_guidance_only(text_of(held), stage)

        told = re.search(r"call read_history with after_seq (\d+)", text_of(gap))
        assert told is not None
        pages = 0
        while told is not None:
            after = int(told.group(1))
            page = await client.call_tool(
                "read_history", {"target": stage.target, "after_seq": after, "limit": 2}
            )
            assert "not counted as read" not in text_of(page)
            pages += 1
            told = re.search(r"call read_history again with after_seq (\d+)", text_of(page))
        sent = await client.call_tool("send_message", answer)
    assert pages == 2
    assert text_of(sent).startswith("Sent as message ")
    assert stage.served.recorder.states == ["held", "sent"]
    assert await stage.agent_contents() == ["All three are noted, Alex."]


async def test_a_held_part_stops_a_long_answer_and_a_resend_replays_the_posted_parts(
    stage: Stage, transport: str
) -> None:
    metrics_port = free_port()

    async def person_writes_after_the_first_part(number: int, state: str) -> None:
        if number == 1:
            await stage.post("Wait, one more thing.", "q-2")

    await stage.post("Summarise the case, please.", "q-1")
    env = stage.env(TURNKEEPER_MCP__CHUNK_BYTES=str(CHUNK_BYTES))
    args = ("--metrics-port", str(metrics_port))
    answer = {"target": stage.target, "content": LONG_ANSWER}
    async with mcp_client(transport, env, args=args) as client:
        await client.call_tool("read_history", {"target": stage.target})
        stage.served.recorder.after_send = person_writes_after_the_first_part
        partial = await client.call_tool("send_message", answer)
        stage.served.recorder.after_send = None
        assert not partial.is_error
        assert partial.structured_content is None
        assert text_of(partial).startswith("Only part of your message was posted")
        assert_guidance_only(text_of(partial), stage)
        assert stage.served.recorder.states == ["sent", "held"]
        assert await stage.agent_contents() == [PARTS[0]]
        async with httpx.AsyncClient() as http:
            exposed = (await http.get(f"http://127.0.0.1:{metrics_port}/metrics")).text
        assert 'turnkeeper_agent_send_partial_held_total{target_type="thread"} 1.0' in exposed

        read = await client.call_tool("read_history", {"target": stage.target, "after_seq": 2})
        assert "Wait, one more thing." in text_of(read)
        resent = await client.call_tool("send_message", answer)
    assert not resent.is_error
    assert "the first 1 had been sent before" in text_of(resent)
    assert stage.served.recorder.states == ["sent", "held", "already_sent", "sent", "sent"]
    assert await stage.agent_contents() == list(PARTS)
    assert "".join(PARTS) == LONG_ANSWER


async def test_an_invocation_and_a_followup_of_the_run_reach_wait_for_work(
    stage: Stage, transport: str
) -> None:
    async with mcp_client(transport, stage.env()) as client:
        idle = await client.call_tool("wait_for_work", {"timeout_seconds": 0})
        assert text_of(idle).startswith("No work arrived")
        asked = await stage.post("Can you check the invoice?", "q-1", mention=True)
        work = await client.call_tool("wait_for_work", {"timeout_seconds": WAIT_SECONDS})
        assert isinstance(work.structured_content, dict)
        assert work.structured_content["event"] == "invocation"
        assert work.structured_content["thread_id"] == stage.target
        assert work.structured_content["message_id"] == str(asked.id)
        run_id = work.structured_content["run_id"]
        assert run_id in text_of(work)
        alex = stage.world.principal("alex")
        view = await stage.services.runs.get(alex, uuid.UUID(run_id))
        assert view.run.state is RunState.RUNNING

        await client.call_tool("read_history", {"target": stage.target})
        await client.call_tool("send_message", {"target": stage.target, "content": "Checking."})
        assert stage.served.recorder.run_ids == [run_id]

        followup = await stage.post("It is invoice seven.", "q-2", mention=True)
        more = await client.call_tool("wait_for_work", {"timeout_seconds": WAIT_SECONDS})
        assert isinstance(more.structured_content, dict)
        assert more.structured_content == {
            "event": "followup",
            "run_id": run_id,
            "thread_id": stage.target,
            "message_id": str(followup.id),
        }
        view = await stage.services.runs.get(alex, uuid.UUID(run_id))
        assert view.followups == {followup.id: "delivered"}

        finished = await client.call_tool("finish_run", {"run_id": run_id, "state": "completed"})
    assert text_of(finished) == f"Run {run_id} ended: completed."
    view = await stage.services.runs.get(alex, uuid.UUID(run_id))
    assert view.run.state is RunState.COMPLETED


async def test_a_cancel_request_reaches_wait_for_work_and_the_run_ends_cancelled(
    stage: Stage, transport: str
) -> None:
    async with mcp_client(transport, stage.env()) as client:
        await stage.post("Can you check the invoice?", "q-1", mention=True)
        work = await client.call_tool("wait_for_work", {"timeout_seconds": WAIT_SECONDS})
        assert isinstance(work.structured_content, dict)
        run_id = work.structured_content["run_id"]
        alex = stage.world.principal("alex")
        await stage.services.runs.cancel(alex, uuid.UUID(run_id))
        stop = await client.call_tool("wait_for_work", {"timeout_seconds": WAIT_SECONDS})
        assert stop.structured_content == {
            "event": "cancel_requested",
            "run_id": run_id,
            "thread_id": stage.target,
        }
        assert f'finish_run with run_id "{run_id}" and state "cancelled"' in text_of(stop)
        ended = await client.call_tool(
            "finish_run", {"run_id": run_id, "state": "cancelled", "reason": "Alex asked."}
        )
    assert text_of(ended) == f"Run {run_id} ended: cancelled."
    view = await stage.services.runs.get(alex, uuid.UUID(run_id))
    assert view.run.state is RunState.CANCELLED


async def test_await_input_waits_and_the_persons_answer_resumes_the_run(
    stage: Stage, transport: str
) -> None:
    async with mcp_client(transport, stage.env()) as client:
        await stage.post("Can you check the invoice?", "q-1", mention=True)
        work = await client.call_tool("wait_for_work", {"timeout_seconds": WAIT_SECONDS})
        assert isinstance(work.structured_content, dict)
        run_id = work.structured_content["run_id"]
        alex = stage.world.principal("alex")
        await client.call_tool("read_history", {"target": stage.target})
        asked = await client.call_tool(
            "send_message", {"target": stage.target, "content": "Which invoice, Alex?"}
        )
        assert text_of(asked).startswith("Sent as message ")
        waiting = await client.call_tool(
            "await_input", {"run_id": run_id, "question": "Which invoice?"}
        )
        assert not waiting.is_error
        assert text_of(waiting).startswith(f"Run {run_id} now waits for a person's answer.")
        view = await stage.services.runs.get(alex, uuid.UUID(run_id))
        assert view.run.state is RunState.WAITING_INPUT

        answer = await stage.post("Invoice seven.", "q-2", mention=True)
        more = await client.call_tool("wait_for_work", {"timeout_seconds": WAIT_SECONDS})
        assert isinstance(more.structured_content, dict)
        assert more.structured_content["event"] == "followup"
        assert more.structured_content["message_id"] == str(answer.id)
        assert "which is running" in text_of(more)
    view = await stage.services.runs.get(alex, uuid.UUID(run_id))
    assert view.run.state is RunState.RUNNING
    assert view.followups == {answer.id: "delivered"}


async def test_a_followup_the_model_answered_is_absorbed_and_opens_no_follow_on_run(
    stage: Stage, transport: str
) -> None:
    # The seed (followups-steer-and-queue): the adapter acknowledges delivered, then
    # absorbed. A follow-up left delivered is deferred at the end of the run and opens a
    # follow-on run: the agent would be asked again to answer what it answered.
    alex = stage.world.principal("alex")
    async with mcp_client(transport, stage.env()) as client:
        await stage.post("Can you check the invoice?", "q-1", mention=True)
        work = await client.call_tool("wait_for_work", {"timeout_seconds": WAIT_SECONDS})
        assert isinstance(work.structured_content, dict)
        run_id = work.structured_content["run_id"]
        read = await client.call_tool("read_history", {"target": stage.target})
        assert isinstance(read.structured_content, dict)
        await client.call_tool(
            "send_message", {"target": stage.target, "content": "Which invoice, Alex?"}
        )
        await client.call_tool("await_input", {"run_id": run_id, "question": "Which invoice?"})
        answer = await stage.post("Invoice seven.", "q-2", mention=True)
        more = await client.call_tool("wait_for_work", {"timeout_seconds": WAIT_SECONDS})
        assert isinstance(more.structured_content, dict)
        assert more.structured_content["event"] == "followup"
        view = await stage.services.runs.get(alex, uuid.UUID(run_id))
        assert view.followups == {answer.id: "delivered"}
        after = read.structured_content["covers_through_seq"]
        await client.call_tool("read_history", {"target": stage.target, "after_seq": after})
        sent = await client.call_tool(
            "send_message", {"target": stage.target, "content": "Invoice seven is paid."}
        )
        assert text_of(sent).startswith("Sent as message ")
        view = await stage.services.runs.get(alex, uuid.UUID(run_id))
        assert view.followups == {answer.id: "absorbed"}
        finished = await client.call_tool("finish_run", {"run_id": run_id, "state": "completed"})
        assert text_of(finished) == f"Run {run_id} ended: completed."
        idle = await client.call_tool("wait_for_work", {"timeout_seconds": 0})
        assert idle.structured_content == {"event": "none"}
    view = await stage.services.runs.get(alex, uuid.UUID(run_id))
    assert view.run.state is RunState.COMPLETED
    assert view.followups == {answer.id: "absorbed"}
    history = await stage.services.conversation.list_messages(alex, stage.thread)
    anchors = [m.run_id for m in history.messages if m.kind == "run"]
    assert anchors == [uuid.UUID(run_id)]
    assert stage.served.recorder.run_ids == [run_id, run_id]


async def test_tool_errors_carry_the_problem_title_and_code_and_no_token(
    stage: Stage, transport: str
) -> None:
    unknown = str(uuid.uuid4())
    async with mcp_client(transport, stage.env()) as client:
        missing = await client.call_tool("read_history", {"target": unknown})
        no_run = await client.call_tool("finish_run", {"run_id": unknown, "state": "failed"})
        bad = await client.call_tool("send_message", {"target": "general", "content": ""})
        nothing = await client.call_tool("hand_over", {})
    for result in (missing, no_run, bad, nothing):
        assert result.is_error
        assert stage.token not in text_of(result)
        assert "Traceback" not in text_of(result)
    assert text_of(missing).startswith("Not found (not_found).")
    assert text_of(no_run).startswith("Not found (not_found).")
    assert text_of(bad) == (
        "Invalid arguments (target: must be an id (a UUID); content: must not be empty)."
    )
    assert "send_message" in text_of(nothing)


async def test_no_right_on_the_target_is_a_tool_error_with_the_problem_title_and_code(
    stage: Stage, transport: str
) -> None:
    # Texter has no right in Eskalation: the thread is as unknown to it as a made-up id.
    texter = stage.world.agents["texter"].token
    env = mcp_environment(stage.served.url, texter)
    target = {"target": stage.target}
    async with mcp_client(transport, env) as client:
        unread = await client.call_tool("read_history", target)
        unsent = await client.call_tool("send_message", {**target, "content": "Hello."})
        # With read, and still no write: the refusal names the missing level.
        await stage.services.grants.set_grant(
            stage.world.principal("robin"),
            principal_id=stage.world.principal("texter").id,
            resource_kind=ResourceKind.CHANNEL,
            resource_id=stage.world.channels["eskalation"].id,
            level=Level.READ,
        )
        read = await client.call_tool("read_history", target)
        refused = await client.call_tool("send_message", {**target, "content": "Hello."})
    for result in (unread, unsent, refused):
        assert result.is_error
        assert result.structured_content is None
        for secret in (texter, stage.token, "Traceback", "Hello."):
            assert secret not in text_of(result)
    assert text_of(unread) == (
        "Not found (not_found). The thread or run does not exist, or you may not read it."
    )
    assert text_of(unsent) == text_of(unread)
    assert not read.is_error
    assert text_of(refused) == (
        "Forbidden (forbidden: level_insufficient). You have no right to do this there."
    )
    # The unreadable thread is refused at its first read, before any send is posted.
    assert stage.served.recorder.states == ["403"]
    assert await stage.agent_contents() == []


async def test_a_rate_limited_send_is_a_tool_error_with_the_wait(
    pg_pool: AsyncConnectionPool[Conn], pg_conninfo: str, transport: str
) -> None:
    # One message in the bucket and no refill: the agent's second message is refused.
    limited = Settings(rl_message_burst=1, rl_message_per_minute=0)
    async for stage in _stage(pg_pool, pg_conninfo, limited):
        async with mcp_client(transport, stage.env()) as client:
            await client.call_tool("read_history", {"target": stage.target})
            first = await client.call_tool(
                "send_message", {"target": stage.target, "content": "One."}
            )
            second = await client.call_tool(
                "send_message", {"target": stage.target, "content": "Two."}
            )
        assert not first.is_error
        assert second.is_error
        assert text_of(second).startswith("Too many requests (rate_limited). Wait ")
        assert text_of(second).endswith(" seconds, then try again.")
        assert stage.token not in text_of(second)
        assert "Traceback" not in text_of(second)
        assert stage.served.recorder.states == ["sent", "429"]
        assert await stage.agent_contents() == ["One."]


async def test_the_http_transport_names_no_server() -> None:
    # No turnkeeper is reached: the SDK answers a bare GET before any tool runs.
    env = mcp_environment("http://127.0.0.1:9", "tk-example-token")
    async with mcp_http_process(env) as url, httpx.AsyncClient() as http:
        answer = await http.get(url)
    assert answer.status_code >= 400
    assert "server" not in answer.headers, answer.headers
    assert answer.headers["date"]


@contextlib.asynccontextmanager
async def http_process_logging_to(
    env: Mapping[str, str], log: Path
) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    """``turnkeeper mcp --http`` on a free port, its standard error in `log`.

    Yields:
        The URL of its MCP endpoint, once it answers there, and the process (stopped
        with SIGKILL at the end if it still runs).
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    base = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "turnkeeper.adapters.cli", "mcp", "--http"),
            *("--port", str(port)),
            env={**base, **env},
            cwd=ROOT,
            stderr=stderr,
        )
    try:
        # Ready once it answers (the SDK refuses a bare GET): no fixed sleep.
        async with asyncio.timeout(START_STOP_SECONDS), httpx.AsyncClient() as http:
            while True:
                assert process.returncode is None, f"exited before it answered, see {log}"
                try:
                    await http.get(url)
                    break
                except httpx.TransportError:
                    await asyncio.sleep(READY_POLL_SECONDS)
        yield url, process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@pytest.mark.parametrize("stop", STOP_SIGNALS, ids=[s.name for s in STOP_SIGNALS])
async def test_a_stopped_http_server_exits_0(tmp_path: Path, stop: signal.Signals) -> None:
    # docs/mcp.md: exit 0 when the server was stopped (HTTP, SIGINT or SIGTERM). uvicorn
    # raises a signal it handled again once it stopped, and SIGTERM then killed the
    # process (-15) before it closed its sessions. A client is connected, as a host is.
    env = mcp_environment("http://127.0.0.1:9", "tk-example-token")
    log = tmp_path / "mcp.log"
    async with (
        http_process_logging_to(env, log) as (url, process),
        Client(url, mode="legacy", read_timeout_seconds=CALL_TIMEOUT_SECONDS) as host,
    ):
        listed = await host.list_tools()
        assert "wait_for_work" in [tool.name for tool in listed.tools]
        process.send_signal(stop)
        code = await asyncio.wait_for(process.wait(), START_STOP_SECONDS)
    assert code == 0, log.read_text()


#: The first request of an MCP host over stdio (the SDK answers it without the server).
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "stop-test", "version": "1"},
    },
}


@contextlib.asynccontextmanager
async def stdio_tool_server(url: str, log: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    """``turnkeeper mcp`` over stdio against `url`, past its handshake; killed if left running.

    Args:
        url: the turnkeeper server the tools talk to.
        log: where the command's standard error goes.

    Yields:
        The process, with its input and output pipes open.
    """
    env = mcp_environment(url, "tk-example-token")
    base = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "turnkeeper.adapters.cli", "mcp"),
            env={**base, **env},
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        process.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
        await process.stdin.drain()
        # Serving once it answered; the host keeps the input open, as hosts do.
        async with asyncio.timeout(START_STOP_SECONDS):
            answer = json.loads(await process.stdout.readline())
        assert answer["id"] == 1
        assert "result" in answer
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.mark.parametrize("stop", STOP_SIGNALS, ids=[s.name for s in STOP_SIGNALS])
async def test_a_stopped_stdio_server_exits_0_while_its_input_stays_open(
    tmp_path: Path, stop: signal.Signals
) -> None:
    # Found by an audit: over stdio the SDK reads standard input in a worker thread that
    # no cancellation reaches, so a stop waited until the host closed the input.
    log = tmp_path / "mcp.log"
    async with stdio_tool_server("http://127.0.0.1:9", log) as process:
        process.send_signal(stop)
        code = await asyncio.wait_for(process.wait(), START_STOP_SECONDS)
    assert code == 0, log.read_text()


async def test_a_host_that_closes_both_pipes_during_a_call_ends_the_stdio_server_with_0(
    tmp_path: Path,
) -> None:
    # Found by an audit: the host died with a wait_for_work pending; the SDK's answer to
    # it met the closed output pipe, and the command exited 1 with an ExceptionGroup line.
    silent = socket.socket()  # takes connections (its backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    silent.setblocking(False)
    log = tmp_path / "mcp.log"
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    with silent:
        async with stdio_tool_server(url, log) as process:
            assert process.stdin is not None
            for message in (INITIALIZED, WAIT_CALL):
                process.stdin.write(json.dumps(message).encode() + b"\n")
            await process.stdin.drain()
            # The call reached the silent server; accepted and left open, it hangs.
            async with asyncio.timeout(START_STOP_SECONDS):
                connection, _ = await asyncio.get_running_loop().sock_accept(silent)
            with connection:
                process.stdin.close()
                # The host's end of the output closed too (asyncio has no public call).
                process._transport.get_pipe_transport(1).close()  # type: ignore[attr-defined]
                code = await asyncio.wait_for(process.wait(), START_STOP_SECONDS)
    assert code == 0, log.read_text()


#: The notification that ends a handshake.
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
#: A wait_for_work that stays pending as long as the server does not answer.
WAIT_CALL = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "wait_for_work", "arguments": {"timeout_seconds": 60}},
}


async def test_a_tool_call_over_http_logs_no_content_at_debug(stage: Stage, tmp_path: Path) -> None:
    # sse_starlette writes every SSE chunk (a whole tool result) at debug, and the SDK
    # names session ids: "Logs go to standard error, never content or tokens."
    asked = "Is the invoice paid? Account 4711-SECRET."
    answered = "Yes, Alex, paid on the first."
    await stage.post(asked, "q-1")
    log = tmp_path / "mcp.log"
    env = stage.env(TURNKEEPER_LOG__LEVEL="debug", TURNKEEPER_LOG__FORMAT="json")
    async with http_process_logging_to(env, log) as (url, process):
        async with Client(url, mode="legacy", read_timeout_seconds=CALL_TIMEOUT_SECONDS) as client:
            read = await client.call_tool("read_history", {"target": stage.target})
            assert asked in text_of(read)
            sent = await client.call_tool(
                "send_message", {"target": stage.target, "content": answered}
            )
            assert text_of(sent).startswith("Sent as message ")
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), START_STOP_SECONDS)
    written = log.read_text(encoding="utf-8")
    records = [json.loads(line) for line in written.splitlines()]
    assert any(r["level"] == "debug" for r in records), written  # debug reached the log
    assert [r["tool"] for r in records if r["event"] == "mcp_tool"] == [
        "read_history",
        "send_message",
    ]
    for secret in ("4711-SECRET", "paid on the first", stage.token):
        assert secret not in written, secret
    # The SDK's lines naming a session id (Created ... with session ID, Terminating ...).
    assert not re.search(r"(?i)session id|terminating session", written), written


async def test_http_sessions_keep_their_own_frontiers(stage: Stage) -> None:
    await stage.post("Is the invoice paid?", "q-1")
    async with (
        mcp_http_process(stage.env()) as url,
        Client(url, mode="legacy", read_timeout_seconds=CALL_TIMEOUT_SECONDS) as reader,
        Client(url, mode="legacy", read_timeout_seconds=CALL_TIMEOUT_SECONDS) as other,
    ):
        await reader.call_tool("read_history", {"target": stage.target})
        unread = await other.call_tool("send_message", {"target": stage.target, "content": "Hm?"})
        read = await reader.call_tool("send_message", {"target": stage.target, "content": "Yes."})
    assert text_of(unread).startswith("Not sent:")
    assert text_of(read).startswith("Sent as message ")
    assert stage.served.recorder.states == ["held", "sent"]


# -- the transcript of docs/mcp.md ---------------------------------------------------------

#: The page whose transcript of one turn is replayed.
MCP_PAGE = ROOT / "docs" / "mcp.md"
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")


def transcript_steps() -> list[tuple[str, dict[str, Any], str]]:
    """The calls of the page's transcript: tool, arguments and answer text."""
    section = MCP_PAGE.read_text(encoding="utf-8").split("## One turn", 1)[1]
    block = section.split("```text\n", 1)[1].split("```", 1)[0]
    steps: list[tuple[str, dict[str, Any], str]] = []
    for chunk in block.split("\n> ")[0:]:
        call, _, answer = chunk.removeprefix("> ").partition("\n")
        name, _, arguments = call.partition(" ")
        steps.append((name, json.loads(arguments), answer))
    return steps


class Placeholders:
    """Ids named by their order of first appearance, and times made one word."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def text(self, text: str) -> str:
        def name(match: re.Match[str]) -> str:
            return self.names.setdefault(match.group(0), f"<id{len(self.names) + 1}>")

        return " ".join(_TIME.sub("<time>", _UUID.sub(name, text)).split())

    def real(self, other: Placeholders, value: str) -> str:
        """The id this side knows under the name `other` gave `value`."""
        wanted = other.names[value]
        return next(real for real, named in self.names.items() if named == wanted)


async def test_the_transcript_of_one_turn_is_what_the_tools_answer(stage: Stage) -> None:
    steps = transcript_steps()
    assert [name for name, _, _ in steps] == [
        "wait_for_work",
        "read_history",
        "send_message",
        "read_history",
        "send_message",
        "finish_run",
    ]
    page, served = Placeholders(), Placeholders()
    await stage.post("@lotse can you check invoice 4711?", "q-1", mention=True)
    async with mcp_client("stdio", stage.env()) as client:
        for number, (name, arguments, documented) in enumerate(steps):
            expected = page.text(documented)
            if number == 2:
                # Alex writes again while the model answers: the send is held.
                await stage.post("It is the one from November.", "q-2")
            real = {
                key: served.real(page, value) if _UUID.fullmatch(str(value)) else value
                for key, value in arguments.items()
            }
            result = await client.call_tool(name, real)
            assert not result.is_error
            assert served.text(text_of(result)) == expected, name
    assert stage.served.recorder.states == ["held", "sent"]
