"""The session registry of ``turnkeeper mcp`` against the MCP SDK's own streamable HTTP.

The SDK's session manager is served in-process by uvicorn, with a tool that takes its
session from a `SessionRegistry` the way the tool server does (the request's
``Mcp-Session-Id`` and `connection_teardown`), and the SDK's own client opens and ends
sessions. A session the client ends (DELETE) is dropped from the registry once the SDK
tears its connection down; the open sessions keep their state when a new one takes the
room, even when the closed one was the most recently used.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import mcp.types as types
import pytest
import uvicorn
from mcp import Client
from mcp.server import Server, ServerRequestContext

from tests.live_server import START_STOP_SECONDS
from tests.support.mcp import CALL_TIMEOUT_SECONDS, text_of
from turnkeeper.adapters.client import AgentRuntimeClient
from turnkeeper.adapters.client.session import ApiSession
from turnkeeper.adapters.mcp.handlers import ToolHandlers
from turnkeeper.adapters.mcp.server import build_server, session_key
from turnkeeper.adapters.mcp.session import McpSession, SessionRegistry, connection_teardown
from turnkeeper.application.settings import Settings

BASE_URL = "https://turnkeeper.example.com"
#: Sessions the SDK and the registry keep open at once.
MAX_SESSIONS = 2
#: The one tool: answers the number of the registry's session of the caller.
WHO = "who_am_i"


class RecordedSession(McpSession):
    """A session that never reaches turnkeeper and tells when it was closed."""

    def __init__(self, number: int) -> None:
        def refuse(request: httpx.Request) -> httpx.Response:
            raise AssertionError("no request expected")

        transport = httpx.MockTransport(refuse)
        super().__init__(
            AgentRuntimeClient(BASE_URL, "tk_example", transport=transport),
            ApiSession(BASE_URL, "tk_example", transport=transport),
        )
        self.number = number
        self.closed = asyncio.Event()

    async def aclose(self) -> None:
        self.closed.set()
        await super().aclose()


class Stage:
    """The registry and the sessions it made, in order."""

    def __init__(self) -> None:
        self.made: list[RecordedSession] = []
        self.registry = SessionRegistry(self._new, MAX_SESSIONS)

    def _new(self) -> McpSession:
        self.made.append(RecordedSession(len(self.made)))
        return self.made[-1]

    def server(self) -> Server[Any]:
        async def list_tools(
            ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
        ) -> types.ListToolsResult:
            schema = {"type": "object", "properties": {}, "additionalProperties": False}
            return types.ListToolsResult(tools=[types.Tool(name=WHO, input_schema=schema)])

        async def call_tool(
            ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
        ) -> types.CallToolResult:
            session = await self.registry.session(
                session_key(ctx), teardown=connection_teardown(ctx)
            )
            assert isinstance(session, RecordedSession)
            text = types.TextContent(type="text", text=str(session.number))
            return types.CallToolResult(content=[text], is_error=False)

        return Server("turnkeeper-sessions", on_list_tools=list_tools, on_call_tool=call_tool)


@contextlib.asynccontextmanager
async def served(stage: Stage, mcp_server: Server[Any] | None = None) -> AsyncIterator[str]:
    """The SDK's streamable HTTP app on a loopback port until the block ends.

    Args:
        stage: the registry and its sessions.
        mcp_server: the server to serve; the stage's own (`Stage.server`) when None.
    """
    app = (mcp_server or stage.server()).streamable_http_app(
        streamable_http_path="/mcp", host="127.0.0.1", max_sessions=MAX_SESSIONS
    )
    # Bound and listening before serving: requests wait in the backlog, no polling.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_config=None, lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, START_STOP_SECONDS)
        sock.close()


def client(url: str) -> Client:
    return Client(url, mode="legacy", read_timeout_seconds=CALL_TIMEOUT_SECONDS)


async def who(caller: Client) -> int:
    return int(text_of(await caller.call_tool(WHO, {})))


@pytest.fixture
def stage() -> Stage:
    return Stage()


async def test_a_session_the_client_ended_is_dropped_from_the_registry(stage: Stage) -> None:
    async with served(stage) as url:
        async with client(url) as alex:
            number = await who(alex)
        ended = stage.made[number]
        await asyncio.wait_for(ended.closed.wait(), START_STOP_SECONDS)
        assert len(stage.registry) == 0


async def test_open_sessions_keep_their_state_when_a_new_one_takes_the_room(
    stage: Stage,
) -> None:
    async with served(stage) as url, client(url) as sam:
        sams = await who(sam)
        async with client(url) as alex:
            alexs = await who(alex)
            assert await who(alex) == alexs  # alex used last: sam is the least recent
        await asyncio.wait_for(stage.made[alexs].closed.wait(), START_STOP_SECONDS)

        async with client(url) as robin:
            robins = await who(robin)
            assert await who(sam) == sams

        assert len({sams, alexs, robins}) == 3
        assert not stage.made[sams].closed.is_set()


async def test_the_tool_server_drops_a_session_its_client_ended(stage: Stage) -> None:
    # The server of `turnkeeper mcp` itself: a tool call that the tool refuses before
    # any request (a target that is no thread id) makes the session, the DELETE ends it.
    tool_server = build_server(ToolHandlers(Settings()), stage.registry, "0")
    async with served(stage, tool_server) as url:
        async with client(url) as alex:
            refused = await alex.call_tool("read_history", {"target": "not-a-thread"})
            assert refused.is_error
            assert len(stage.registry) == 1
        (ended,) = stage.made
        await asyncio.wait_for(ended.closed.wait(), START_STOP_SECONDS)
        assert len(stage.registry) == 0
