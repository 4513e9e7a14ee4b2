"""``turnkeeper mcp`` as a subprocess, reached with the MCP SDK's own client.

`served_recorded` serves the application on a loopback port (as ``turnkeeper serve``
does) behind `SendRecorder`, which notes the state of every ``POST /v1/agent/send``
answer and may run a hook (a person's post, say) before the agent sees that answer.
`mcp_client` starts ``turnkeeper mcp`` with this checkout on ``PYTHONPATH``, over stdio
or with ``--http``, and yields an SDK `Client` connected to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

import attrs
import httpx
import uvicorn
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from tests.live_server import START_STOP_SECONDS, free_port
from turnkeeper.adapters.http import create_app
from turnkeeper.adapters.http.shutdown import StreamClosingServer
from turnkeeper.application.bootstrap import Services

#: The checkout, put on the subprocess's PYTHONPATH.
ROOT = Path(__file__).resolve().parents[2]
#: The transports `turnkeeper mcp` serves.
TRANSPORTS = ("stdio", "http")
#: Seconds between two readiness checks of a starting server.
READY_POLL_SECONDS = 0.05
#: Seconds one tool call may take (wait_for_work calls wait less).
CALL_TIMEOUT_SECONDS = 30.0

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]
AfterSend = Callable[[int, str], Awaitable[None]]


class SendRecorder:
    """Wraps the application: records every agent send, may act before it is answered.

    Attributes:
        states: the ``state`` of each ``POST /v1/agent/send`` answer (or its status).
        run_ids: the ``run_id`` each send carried (None when it carried none).
        after_send: called with the send's number (from 1) and state before the answer
            is passed on, so a hook's post lands before the agent's next chunk.
    """

    def __init__(self, app: Asgi) -> None:
        self._app = app
        self.states: list[str] = []
        self.run_ids: list[str | None] = []
        self.after_send: AfterSend | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/agent/send":
            await self._app(scope, receive, send)
            return
        request = bytearray()

        async def read() -> Message:
            message = await receive()
            request.extend(message.get("body", b""))
            return message

        answer: list[Message] = []

        async def keep(message: Message) -> None:
            answer.append(message)

        await self._app(scope, read, keep)
        body = b"".join(m.get("body", b"") for m in answer if m["type"] == "http.response.body")
        start = next(m for m in answer if m["type"] == "http.response.start")
        state = json.loads(body)["state"] if start["status"] == 200 else str(start["status"])
        self.states.append(state)
        self.run_ids.append(json.loads(request).get("run_id"))
        if self.after_send is not None:
            await self.after_send(len(self.states), state)
        for message in answer:
            await send(message)


@attrs.define
class Served:
    """The application on a loopback port, behind a `SendRecorder`."""

    url: str
    recorder: SendRecorder


@contextlib.asynccontextmanager
async def served_recorded(services: Services) -> AsyncIterator[Served]:
    """Serve the application over `services` behind a `SendRecorder` until the block ends.

    Yields:
        Its URL and recorder.
    """
    port = free_port()
    recorder = SendRecorder(create_app(services, services.settings))
    config = uvicorn.Config(recorder, host="127.0.0.1", port=port, log_config=None)
    server = StreamClosingServer(
        config, services.live, shutdown_timeout=services.settings.shutdown_timeout.total_seconds()
    )
    task = asyncio.create_task(server.serve())
    url = f"http://127.0.0.1:{port}"
    await _until_up(f"{url}/healthz")
    try:
        yield Served(url=url, recorder=recorder)
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, START_STOP_SECONDS)


def mcp_environment(url: str, token: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a ``turnkeeper mcp`` subprocess.

    Args:
        url: the turnkeeper server.
        token: the agent's token.
        extra: more variables (``TURNKEEPER_MCP__CHUNK_BYTES`` ...).

    Returns:
        The variables: this checkout on PYTHONPATH, the URL, the token, quiet logs.
    """
    env = {
        "PYTHONPATH": str(ROOT),
        "TURNKEEPER_URL": url,
        "TURNKEEPER_AGENT_TOKEN": token,
        "TURNKEEPER_LOG__LEVEL": "warning",
    }
    env.update(extra or {})
    return env


@contextlib.asynccontextmanager
async def mcp_client(
    transport: str,
    env: Mapping[str, str],
    *,
    args: tuple[str, ...] = (),
    mode: str = "auto",
) -> AsyncIterator[Client]:
    """Start ``turnkeeper mcp`` and connect the SDK's client to it.

    Args:
        transport: ``stdio`` (the client spawns it) or ``http`` (``--http`` on a free port).
        env: its environment (`mcp_environment`).
        args: more command line arguments (``--metrics-port`` ...).
        mode: the client's protocol negotiation (``legacy`` forces sessions with ids).

    Yields:
        The connected client.
    """
    command = [sys.executable, "-m", "turnkeeper.adapters.cli", "mcp", *args]
    if transport == "stdio":
        params = StdioServerParameters(command=command[0], args=command[1:], env=dict(env))
        async with Client(params, read_timeout_seconds=CALL_TIMEOUT_SECONDS) as client:
            yield client
        return
    async with (
        mcp_http_process(env, args=args) as url,
        Client(url, mode=mode, read_timeout_seconds=CALL_TIMEOUT_SECONDS) as client,
    ):
        yield client


@contextlib.asynccontextmanager
async def mcp_http_process(
    env: Mapping[str, str], *, args: tuple[str, ...] = ()
) -> AsyncIterator[str]:
    """Run ``turnkeeper mcp --http`` on a free port until the block ends.

    Args:
        env: its environment.
        args: more command line arguments.

    Yields:
        The URL of its MCP endpoint.
    """
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "turnkeeper.adapters.cli",
        "mcp",
        "--http",
        "--port",
        str(port),
        *args,
        env={**_base_environment(), **env},
        cwd=ROOT,
    )
    try:
        await _until_up(f"http://127.0.0.1:{port}/mcp", process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), START_STOP_SECONDS)


def text_of(result: CallToolResult) -> str:
    """The text of a tool result (its one text block).

    Args:
        result: the result.

    Returns:
        The text.
    """
    (block,) = result.content
    assert isinstance(block, TextContent)
    return block.text


def _base_environment() -> dict[str, str]:
    # What a process needs to start, nothing of this one's TURNKEEPER_* configuration.
    return {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}


async def _until_up(url: str, process: asyncio.subprocess.Process | None = None) -> None:
    async with asyncio.timeout(START_STOP_SECONDS), httpx.AsyncClient() as http:
        while True:
            if process is not None and process.returncode is not None:
                raise RuntimeError(f"the server exited with {process.returncode}")
            try:
                await http.get(url)
                return
            except httpx.TransportError:
                await asyncio.sleep(READY_POLL_SECONDS)
