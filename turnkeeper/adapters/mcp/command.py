"""``turnkeeper mcp``: the MCP tool server of an agent runtime, as a command.

It talks to a turnkeeper server (``TURNKEEPER_URL``) with an agent's token
(``TURNKEEPER_AGENT_TOKEN``) through `turnkeeper.adapters.client.AgentRuntimeClient`, one
client per MCP session, and serves the tools over stdio (the default: an MCP host starts
it as a subprocess) or streamable HTTP (``--http``). ``--metrics-port`` serves the runtime
client's metrics (``turnkeeper_agent_send_partial_held_total``) in the Prometheus text
format. This module imports the SDK only when the command runs, so that the command
line works without the ``mcp`` extra and says how to get it.
"""

from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import logging
import os
import re
import sys
from collections.abc import Mapping
from typing import Any

import httpx
from prometheus_client import start_http_server

from turnkeeper.adapters.client import AgentRuntimeClient
from turnkeeper.adapters.client.session import ApiSession
from turnkeeper.adapters.config import Config, decimal
from turnkeeper.adapters.http.server import ACCEPT_BACKLOG
from turnkeeper.adapters.http.workers import ListenFailed, listening_socket
from turnkeeper.adapters.mcp.handlers import ToolHandlers
from turnkeeper.adapters.mcp.session import McpSession, SessionRegistry
from turnkeeper.adapters.observability.client import ClientMetrics
from turnkeeper.adapters.system import package_version
from turnkeeper.application.settings import Settings

#: The turnkeeper server the tools talk to.
ENV_URL = "TURNKEEPER_URL"
#: The agent's API token the tools act with (never printed or logged).
ENV_AGENT_TOKEN = "TURNKEEPER_AGENT_TOKEN"  # noqa: S105 (a variable name, not a secret)
#: The line printed (exit 2) when the SDK is not installed.
MISSING_EXTRA = "turnkeeper mcp needs the MCP SDK: pip install 'turnkeeper[mcp]'"
#: Where ``--http`` listens unless told otherwise.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765

#: The largest TCP port number.
MAX_PORT = 65535
#: Loggers of the stack below the tools, kept at warning whatever ``log.level`` says
#: (docs/mcp.md: logs never hold content or tokens). httpx and httpcore write every
#: request, long-polls included (the client logs what matters); sse_starlette writes
#: every SSE chunk at debug, that is every tool result of streamable HTTP, whole; the
#: MCP SDK names session ids (the key to a session) at info and can write messages at
#: debug.
QUIET_LOGGERS = ("httpx", "httpcore", "sse_starlette", "mcp")
#: A host name as the URL of the server may hold it (IDNA-encoded; IP literals apart).
_HOST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")

EXIT_OK = 0
EXIT_USAGE = 2


def port_number(text: str) -> int:
    """The argparse type of a TCP port: a whole number from 0 to `MAX_PORT`.

    Raises:
        argparse.ArgumentTypeError: for anything else (the command exits 2).
    """
    value = decimal(text, MAX_PORT)
    if value is None or not 0 <= value <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"expected a port from 0 to {MAX_PORT}, got {text!r}")
    return value


def server_url(text: str) -> str | None:
    """The server URL of ``TURNKEEPER_URL``, or None when it is not one.

    Checked when the command starts, so that a typo is one line and exit 2, not a
    failure of every later tool call.

    Args:
        text: the variable's value.

    Returns:
        The stripped URL when it is http or https with a well-formed host and port.
    """
    text = text.strip()
    try:
        url = httpx.URL(text)
    except httpx.InvalidURL:
        return None
    if url.scheme not in ("http", "https") or not _valid_host(url.raw_host):
        return None
    if url.port is not None and not 0 < url.port <= MAX_PORT:
        return None
    return text


def _valid_host(raw: bytes) -> bool:
    try:
        host = raw.decode("ascii")
    except UnicodeDecodeError:
        return False
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return _HOST_NAME.fullmatch(host) is not None
    return True


def add_command(commands: Any) -> None:
    """Add ``mcp`` to the sub-commands of ``turnkeeper``.

    Args:
        commands: the ``add_subparsers`` object of the command line.
    """
    parser: argparse.ArgumentParser = commands.add_parser(
        "mcp",
        help="serve the MCP tools of an agent runtime (stdio, or --http)",
        description=(
            f"Serve send_message, read_history, wait_for_work, await_input and finish_run "
            f"as MCP tools, for the agent whose token is in {ENV_AGENT_TOKEN}, against the "
            f"server in {ENV_URL}."
        ),
    )
    parser.add_argument(
        "--http", action="store_true", help="serve streamable HTTP at /mcp instead of stdio"
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help="address for --http")
    parser.add_argument("--port", type=port_number, default=DEFAULT_PORT, help="port for --http")
    parser.add_argument(
        "--metrics-port",
        type=port_number,
        default=None,
        help="serve the client's Prometheus metrics on this port (at --host)",
    )


def mcp_available() -> bool:
    """Whether the ``turnkeeper[mcp]`` extra (the ``mcp`` SDK) is installed."""
    return importlib.util.find_spec("mcp") is not None


async def run_mcp(
    args: argparse.Namespace, config: Config, environ: Mapping[str, str] | None = None
) -> int:
    """Run ``turnkeeper mcp`` until its input ends (stdio) or it is stopped (HTTP).

    Args:
        args: the parsed command line (``--http``, ``--host``, ``--port``,
            ``--metrics-port``).
        config: the process configuration (``mcp.*``, ``page.*``, ``stream.*``).
        environ: the environment (``os.environ`` when None).

    Returns:
        0 when served to the end, 2 without the extra, without the token or without a
        well-formed URL (one line on standard error).

    Raises:
        ListenFailed: ``--http`` or ``--metrics-port`` cannot listen on its address
            (bound before anything is served).
    """
    env = os.environ if environ is None else environ
    if not mcp_available():
        return _usage(MISSING_EXTRA)
    url = server_url(env.get(ENV_URL, ""))
    token = env.get(ENV_AGENT_TOKEN, "").strip()
    if url is None:
        return _usage(
            f"turnkeeper mcp needs {ENV_URL}, the server's http:// or https:// URL "
            f"with a valid host"
        )
    if not token:
        return _usage(f"turnkeeper mcp needs {ENV_AGENT_TOKEN}, the agent's API token")
    conflict = limits_conflict(config.settings)
    if conflict is not None:
        return _usage(f"turnkeeper: invalid configuration: {conflict}")
    # Imported here: the SDK is an extra.
    from turnkeeper.adapters.mcp.server import build_server, serve_http, serve_stdio

    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    # Bound before anything is served: a taken port is one line, not uvicorn's exit 3.
    sock = listening_socket(args.host, args.port, ACCEPT_BACKLOG) if args.http else None
    metrics = ClientMetrics()
    if args.metrics_port is not None:
        try:
            start_http_server(args.metrics_port, addr=args.host, registry=metrics.registry)
        except OSError as exc:
            if sock is not None:
                sock.close()
            # The line of a taken --http port too (docs/mcp.md): an address is an address.
            raise ListenFailed("listen", args.host, args.metrics_port, exc) from exc

    settings = config.settings

    def new_session() -> McpSession:
        return McpSession(
            AgentRuntimeClient(url, token, metrics=metrics),
            ApiSession(url, token),
            max_pending=settings.mcp_max_pending_sends,
        )

    sessions = SessionRegistry(new_session, settings.mcp_max_sessions)
    server = build_server(ToolHandlers(settings), sessions, package_version())
    try:
        if sock is not None:
            with sock:
                await serve_http(
                    server,
                    host=args.host,
                    port=args.port,
                    max_sessions=settings.mcp_max_sessions,
                    sock=sock,
                )
        else:
            await serve_stdio(server)
    finally:
        await sessions.aclose()
    return EXIT_OK


def limits_conflict(settings: Settings) -> str | None:
    """What in the settings ``turnkeeper mcp`` cannot work with, though each key is in range.

    A part of a long send larger than ``message.max_content_bytes`` would be refused by
    the server (413 or 400) at every attempt, and a default wait above the longest one
    allowed would make every ``wait_for_work`` call without a timeout a tool error.

    Args:
        settings: the process's settings.

    Returns:
        The key, the bound and the value, or None when they agree.
    """
    if settings.mcp_chunk_bytes > settings.max_content_bytes:
        return (
            f"mcp.chunk_bytes must not exceed message.max_content_bytes "
            f"({settings.max_content_bytes}), got {settings.mcp_chunk_bytes}"
        )
    if settings.mcp_wait > settings.mcp_max_wait:
        bound, wait = settings.mcp_max_wait.total_seconds(), settings.mcp_wait.total_seconds()
        return f"mcp.wait_seconds must not exceed mcp.max_wait_seconds ({bound:g}), got {wait:g}"
    return None


def _usage(line: str) -> int:
    print(line, file=sys.stderr)
    return EXIT_USAGE


__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "ENV_AGENT_TOKEN",
    "ENV_URL",
    "MAX_PORT",
    "MISSING_EXTRA",
    "QUIET_LOGGERS",
    "add_command",
    "limits_conflict",
    "mcp_available",
    "port_number",
    "run_mcp",
    "server_url",
]
