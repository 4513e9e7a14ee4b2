"""The MCP server of ``turnkeeper mcp``, on the low-level `Server` of the official SDK.

The low-level server (not the decorator-based ``MCPServer``) because the tools' schemas
and descriptions are written for the model by hand (`turnkeeper.adapters.mcp.tools`) and
every answer, errors included, is our own text: no argument dump of a validation library
and no prefix reaches the model (ADR 0018). This is the only module that imports the SDK
(extra ``turnkeeper[mcp]``).

Transports: stdio (`serve_stdio`, one session per process) and streamable HTTP
(`serve_http`, on uvicorn, one session per ``Mcp-Session-Id``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import sys
import threading
from typing import IO, Any

import anyio
import mcp.types as types
import uvicorn
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER

from turnkeeper.adapters.http.shutdown import StoppingServer
from turnkeeper.adapters.mcp.handlers import ToolHandlers
from turnkeeper.adapters.mcp.session import (
    SessionLimitReached,
    SessionRegistry,
    connection_teardown,
)
from turnkeeper.adapters.mcp.tools import INSTRUCTIONS

#: The server's name in the MCP handshake.
SERVER_NAME = "turnkeeper"
#: The path of the streamable HTTP endpoint.
HTTP_PATH = "/mcp"


def session_key(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The session a request belongs to: its ``Mcp-Session-Id``, when it has one.

    Args:
        ctx: the request's context (``request`` is the HTTP request on streamable HTTP).

    Returns:
        The header's value; None over stdio and for requests without one.
    """
    headers = getattr(ctx.request, "headers", None)
    if headers is None:
        return None
    value = headers.get(MCP_SESSION_ID_HEADER)
    return value if isinstance(value, str) and value else None


def build_server(handlers: ToolHandlers, sessions: SessionRegistry, version: str) -> Server[Any]:
    """The MCP server with the five tools.

    Args:
        handlers: runs the tool calls.
        sessions: the sessions' states.
        version: the server's version in the handshake.

    Returns:
        The low-level SDK server (serve it with `serve_stdio` or `serve_http`).
    """
    tools = [
        types.Tool(
            name=str(spec.name),
            title=spec.title,
            description=spec.description,
            input_schema=dict(spec.input_schema),
            annotations=types.ToolAnnotations(
                title=spec.title, read_only_hint=spec.read_only, open_world_hint=False
            ),
        )
        for spec in handlers.specs
    ]

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            # The session is dropped when the SDK closes its connection (its teardown).
            session = await sessions.session(session_key(ctx), teardown=connection_teardown(ctx))
        except SessionLimitReached as refused:
            # A tool error the model can read, not a protocol error with a stack in the log.
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=str(refused))], is_error=True
            )
        answer = await handlers.call(session, params.name, params.arguments or {})
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=answer.text)],
            is_error=answer.is_error,
            structured_content=dict(answer.structured) if answer.structured else None,
        )

    return Server(
        SERVER_NAME,
        version=version,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


#: Lines read ahead of the session: one, as the SDK's own reader (the host's pipe holds
#: the rest, so a host that writes faster than the tools answer is held back there).
_LINES_AHEAD = 1


class StdinLines(anyio.AsyncFile[str]):
    """Standard input's lines, read by a daemon thread, so that a stop never waits on it.

    The SDK reads standard input in anyio's worker threads: no cancellation reaches a
    read in progress, and the interpreter joins them at exit, so a SIGTERM or Ctrl-C
    waited until the host closed the input. Here a daemon thread hands each line to the
    loop; awaiting the next one is cancellable, and the thread is left behind at exit.

    Args:
        source: the binary stream to read (standard input's buffer).
        loop: the running loop the lines are handed to.
    """

    def __init__(self, source: IO[bytes], loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(sys.stdin)
        self._lines: asyncio.Queue[str] = asyncio.Queue(maxsize=_LINES_AHEAD)
        self._loop = loop
        threading.Thread(
            target=self._read, args=(source,), name="turnkeeper-mcp-stdin", daemon=True
        ).start()

    def _read(self, source: IO[bytes]) -> None:
        try:
            for raw in iter(source.readline, b""):
                if not self._hand(raw.decode("utf-8", errors="replace")):
                    return
        except (OSError, ValueError):
            pass  # a broken or closed input ends the session as its end does
        self._hand("")

    def _hand(self, line: str) -> bool:
        """Queue one line ("" for the end); False once the loop is gone (a stop)."""
        try:
            asyncio.run_coroutine_threadsafe(self._lines.put(line), self._loop).result()
        except (RuntimeError, asyncio.CancelledError, concurrent.futures.CancelledError):
            # The loop closed, or cancelled the put as it stopped.
            return False
        return True

    async def readline(self) -> str:
        """The next line with its newline; "" at the end of the input."""
        return await self._lines.get()


async def serve_stdio(server: Server[Any]) -> None:
    """Serve one session over standard input and output until the input ends.

    Args:
        server: the MCP server.
    """
    stdin = StdinLines(sys.stdin.buffer, asyncio.get_running_loop())
    try:
        async with stdio_server(stdin=stdin) as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    except* BrokenPipeError:
        # The host closed its end of the output (it died, or closed both pipes) while an
        # answer was on its way: the session ended as at the end of the input.
        pass


async def serve_http(
    server: Server[Any],
    *,
    host: str,
    port: int,
    max_sessions: int,
    sock: socket.socket | None = None,
) -> None:
    """Serve streamable HTTP at ``http://<host>:<port>/mcp`` until stopped (SIGINT, SIGTERM).

    A stop returns (as ``turnkeeper serve``'s does, `StoppingServer`): uvicorn
    would raise the signal again once it stopped, and SIGTERM would then kill the
    process (exit -15) before the command closed its sessions.

    Args:
        server: the MCP server.
        host: the address to listen on (on a loopback address the SDK refuses other
            ``Host`` and ``Origin`` headers, against DNS rebinding).
        port: the port.
        max_sessions: sessions the SDK keeps open at once (``mcp.max_sessions``).
        sock: a socket bound to `host` and `port` already (``turnkeeper mcp`` binds
            first); None: uvicorn binds its own.
    """
    app = server.streamable_http_app(
        streamable_http_path=HTTP_PATH, host=host, max_sessions=max_sessions
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,  # adapters.logging owns the format
        access_log=False,
        server_header=False,  # as ``turnkeeper serve``: the stack is not named to clients
        lifespan="on",
    )
    await StoppingServer(config).serve(sockets=None if sock is None else [sock])


__all__ = [
    "HTTP_PATH",
    "SERVER_NAME",
    "StdinLines",
    "build_server",
    "serve_http",
    "serve_stdio",
    "session_key",
]
