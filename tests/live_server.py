"""The application served on a loopback port by uvicorn, as ``turnkeeper serve`` does.

Streams never end by themselves, and an in-memory ASGI transport hands an answer over
only once it is complete, so tests that read streams serve the application for real
(`StreamClosingServer`) and read it with httpx as it streams.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx
import uvicorn

from turnkeeper.adapters.http import create_app
from turnkeeper.adapters.http.shutdown import StreamClosingServer
from turnkeeper.application.bootstrap import Services

#: Seconds the server may take to answer, and to stop.
START_STOP_SECONDS = 10.0
#: Seconds between two readiness polls.
READY_POLL_SECONDS = 0.01


@attrs.define
class Served:
    """The application served on a loopback port."""

    url: str
    server: StreamClosingServer
    spec: dict[str, Any]


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def served_app(services: Services) -> AsyncIterator[Served]:
    """Serve the application over `services` until the block ends.

    Yields:
        Its URL, the server (``should_exit`` stops it) and its OpenAPI document.
    """
    port = free_port()
    config = uvicorn.Config(
        create_app(services, services.settings),
        host="127.0.0.1",
        port=port,
        log_config=None,
        lifespan="on",
    )
    server = StreamClosingServer(
        config, services.live, shutdown_timeout=services.settings.shutdown_timeout.total_seconds()
    )
    task = asyncio.create_task(server.serve())
    url = f"http://127.0.0.1:{port}"
    async with asyncio.timeout(START_STOP_SECONDS), httpx.AsyncClient() as http:
        while True:
            try:
                spec = (await http.get(f"{url}/openapi.json")).json()
                break
            except httpx.TransportError:
                await asyncio.sleep(READY_POLL_SECONDS)
    try:
        yield Served(url=url, server=server, spec=spec)
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, START_STOP_SECONDS)
