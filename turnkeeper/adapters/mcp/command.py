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
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

from prometheus_client import start_http_server

from turnkeeper.adapters.client import AgentRuntimeClient
from turnkeeper.adapters.client.session import ApiSession
from turnkeeper.adapters.config import Config
from turnkeeper.adapters.mcp.handlers import ToolHandlers
from turnkeeper.adapters.mcp.session import McpSession, SessionRegistry
from turnkeeper.adapters.observability.client import ClientMetrics

#: The turnkeeper server the tools talk to.
ENV_URL = "TURNKEEPER_URL"
#: The agent's API token the tools act with (never printed or logged).
ENV_AGENT_TOKEN = "TURNKEEPER_AGENT_TOKEN"  # noqa: S105 (a variable name, not a secret)
#: The line printed (exit 2) when the SDK is not installed.
MISSING_EXTRA = "turnkeeper mcp needs the MCP SDK: pip install 'turnkeeper[mcp]'"
#: Where ``--http`` listens unless told otherwise.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765

EXIT_OK = 0
EXIT_USAGE = 2


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
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port for --http")
    parser.add_argument(
        "--metrics-port",
        type=int,
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
        0 when served to the end, 2 without the extra or without the URL or token (one
        line on standard error).
    """
    env = os.environ if environ is None else environ
    if not mcp_available():
        return _usage(MISSING_EXTRA)
    url = env.get(ENV_URL, "").strip()
    token = env.get(ENV_AGENT_TOKEN, "").strip()
    if not url.startswith(("http://", "https://")):
        return _usage(f"turnkeeper mcp needs {ENV_URL}, the server's http:// or https:// URL")
    if not token:
        return _usage(f"turnkeeper mcp needs {ENV_AGENT_TOKEN}, the agent's API token")
    # Imported here: the SDK is an extra.
    from turnkeeper import __version__
    from turnkeeper.adapters.mcp.server import build_server, serve_http, serve_stdio

    # httpx logs every request at info, long-polls included; the client logs what matters.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    metrics = ClientMetrics()
    if args.metrics_port is not None:
        start_http_server(args.metrics_port, addr=args.host, registry=metrics.registry)

    def new_session() -> McpSession:
        return McpSession(AgentRuntimeClient(url, token, metrics=metrics), ApiSession(url, token))

    settings = config.settings
    sessions = SessionRegistry(new_session, settings.mcp_max_sessions)
    server = build_server(ToolHandlers(settings), sessions, __version__)
    try:
        if args.http:
            await serve_http(
                server, host=args.host, port=args.port, max_sessions=settings.mcp_max_sessions
            )
        else:
            await serve_stdio(server)
    finally:
        await sessions.aclose()
    return EXIT_OK


def _usage(line: str) -> int:
    print(line, file=sys.stderr)
    return EXIT_USAGE


__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "ENV_AGENT_TOKEN",
    "ENV_URL",
    "MISSING_EXTRA",
    "add_command",
    "mcp_available",
    "run_mcp",
]
