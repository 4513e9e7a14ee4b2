"""A stopping server ends within ``http.shutdown_timeout``, even when a client stopped reading.

At shutdown `StreamClosingServer` ends every event stream first, but a stream whose
answer waits in uvicorn's flow control (the client's receive window is full, so the
transport paused writing) never gets to end: the server waited for its connection for
as long as the client kept it open. These tests serve the application as
``turnkeeper serve`` does (`guarded_server`, both parsers of ``http.parser``) on a
loopback port, open a stream with a raw socket whose receive buffer is tiny and that
never reads, post large messages until the server's transport pauses writing, and then
stop the server: it must finish within the configured timeout plus `SLACK_SECONDS`, and
leave no connection and no stream behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

import pytest

from tests.live_server import free_port
from turnkeeper.adapters.http.app import create_app
from turnkeeper.adapters.http.server import guarded_server
from turnkeeper.adapters.http.shutdown import StreamClosingServer
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.settings import Settings
from turnkeeper.domain.messaging import MessageDraft

#: ``http.shutdown_timeout`` of the served application (the smallest whole second).
SHUTDOWN_TIMEOUT_SECONDS = 1
#: What the shutdown may take beyond the timeout on a loaded machine: uvicorn's own pause
#: before it waits, its polls of the connections, and the lifespan shutdown.
SLACK_SECONDS = 3.0
#: Bound of a wait for something that must happen soon (start, a stream opening).
BOUND_SECONDS = 10.0
#: Seconds between two looks at a condition being waited for.
POLL_SECONDS = 0.01
#: Receive buffer the stalled client asks the kernel for (the kernel's minimum applies).
CLIENT_RECEIVE_BUFFER = 4096
#: Characters of each posted message (below ``message.max_content_bytes``).
MESSAGE_CHARS = 60_000
#: The most messages posted before the server's transport must have paused writing: far
#: more bytes than the loopback socket buffers and the transport's high-water mark hold.
MAX_MESSAGES = 400
#: The parsers of ``http.parser`` (ADR 0021).
PARSERS = ("httptools", "h11")


@pytest.fixture(params=PARSERS)
def parser(request: pytest.FixtureRequest) -> str:
    """The ``http.parser`` of the server under test."""
    return str(request.param)


@pytest.fixture
def settings(parser: str) -> Settings:
    """A short shutdown timeout, and a message bucket that holds every post."""
    return Settings(
        shutdown_timeout=timedelta(seconds=SHUTDOWN_TIMEOUT_SECONDS),
        rl_message_burst=MAX_MESSAGES,
        rl_message_per_minute=MAX_MESSAGES,
        http_parser=parser,
    )


def _guarded(services: Services, settings: Settings, port: int) -> StreamClosingServer:
    """The server of ``turnkeeper serve`` over `services` on a loopback `port`."""
    return guarded_server(
        create_app(services, settings),
        host="127.0.0.1",
        port=port,
        settings=settings,
        live=services.live,
    )


async def _until(condition: Callable[[], bool], bound: float) -> None:
    """Return once `condition` holds; TimeoutError after `bound` seconds.

    Polled: uvicorn's flow control and connection set signal no event a test could await.
    """
    async with asyncio.timeout(bound):
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(POLL_SECONDS)


def _writing_paused(server: StreamClosingServer) -> bool:
    """Whether the transport of some connection paused writing (its client reads nothing)."""
    return any(
        getattr(getattr(connection, "flow", None), "write_paused", False)
        for connection in server.server_state.connections
    )


@contextlib.asynccontextmanager
async def _serving(
    server: StreamClosingServer,
) -> AsyncIterator[asyncio.Task[None]]:
    """Run `server` until the block ends; yields its task. Stops it in any case."""
    task = asyncio.create_task(server.serve())
    try:
        await _until(lambda: server.started or task.done(), BOUND_SECONDS)
        assert server.started, "the server did not start"
        yield task
    finally:
        if not task.done():
            # The test failed before the server stopped: make uvicorn stop waiting.
            server.should_exit = True
            server.force_exit = True
            await asyncio.wait({task}, timeout=BOUND_SECONDS)
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@contextlib.asynccontextmanager
async def _stalled_stream(port: int, token: str) -> AsyncIterator[socket.socket]:
    """A client that opens the event stream and never reads; closed when the block ends."""
    loop = asyncio.get_running_loop()
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # Before connect: the receive window is agreed on during the handshake.
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, CLIENT_RECEIVE_BUFFER)
        client.setblocking(False)
        await loop.sock_connect(client, ("127.0.0.1", port))
        request = (
            "GET /v1/events/stream HTTP/1.1\r\n"
            "Host: turnkeeper.example.com\r\n"
            f"Authorization: Bearer {token}\r\n"
            "\r\n"
        )
        await loop.sock_sendall(client, request.encode())
        yield client
    finally:
        client.close()


async def test_the_server_is_built_with_the_configured_shutdown_timeout(
    services: Services, settings: Settings
) -> None:
    server = _guarded(services, settings, free_port())
    assert server.shutdown_timeout == SHUTDOWN_TIMEOUT_SECONDS
    # uvicorn's own bound would cancel the answers of open connections (see below).
    assert server.config.timeout_graceful_shutdown is None


async def test_shutdown_ends_within_the_timeout_when_a_stream_client_stopped_reading(
    services: Services, world: DemoWorld, settings: Settings
) -> None:
    port = free_port()
    server = _guarded(services, settings, port)
    opened = asyncio.Event()
    services.live.stream_count_hooks.append(lambda count: opened.set() if count else None)
    alex = world.principal("alex")
    thread_id = world.channels["allgemein"].main_thread_id
    assert thread_id is not None
    loop = asyncio.get_running_loop()
    async with (
        _serving(server) as task,
        _stalled_stream(port, world.people["sam"].token),
    ):
        await asyncio.wait_for(opened.wait(), BOUND_SECONDS)
        for index in range(MAX_MESSAGES):
            if _writing_paused(server):
                break
            draft = MessageDraft(client_msg_id=f"stall-{index}", content="x" * MESSAGE_CHARS)
            await services.conversation.create_message(alex, thread_id, draft)
            await asyncio.sleep(0)  # let the stream take the event and write it
        await _until(lambda: _writing_paused(server), BOUND_SECONDS)

        server.should_exit = True
        stopping = loop.time()
        await asyncio.wait({task}, timeout=SHUTDOWN_TIMEOUT_SECONDS + SLACK_SECONDS)
        took = loop.time() - stopping

        assert task.done(), f"shutdown still waiting after {took:.1f} s"
        assert task.exception() is None
        assert took < SHUTDOWN_TIMEOUT_SECONDS + SLACK_SECONDS
        # Nothing is left: the stalled connection is closed and its stream has ended.
        await _until(lambda: not server.server_state.connections, BOUND_SECONDS)
        await _until(lambda: services.live.open_streams == 0, BOUND_SECONDS)


async def _received_until_closed(client: socket.socket, bound: float) -> bytes:
    """Everything the server sends until it closes the connection (bounded)."""
    loop = asyncio.get_running_loop()
    received = b""
    async with asyncio.timeout(bound):
        while chunk := await loop.sock_recv(client, CLIENT_RECEIVE_BUFFER):
            received += chunk
    return received


async def test_an_answer_cut_by_the_shutdown_timeout_closes_its_connection_unanswered(
    services: Services, world: DemoWorld, settings: Settings
) -> None:
    # uvicorn cancelled the answer and wrote its own text/plain 500, with no correlation
    # id, to a client whose request was still running (found by a black-box audit).
    port = free_port()
    server = _guarded(services, settings, port)
    loop = asyncio.get_running_loop()
    thread_id = world.channels["allgemein"].main_thread_id
    async with _serving(server) as task:
        client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            client.setblocking(False)
            await loop.sock_connect(client, ("127.0.0.1", port))
            # The body never completes: the answer runs until the shutdown cuts it.
            head = (
                f"POST /v1/threads/{thread_id}/messages HTTP/1.1\r\n"
                "Host: turnkeeper.example.com\r\n"
                f"Authorization: Bearer {world.people['alex'].token}\r\n"
                "Content-Type: application/json\r\n"
                "Content-Length: 100\r\n"
                "\r\n"
                '{"client_msg_id"'
            )
            await loop.sock_sendall(client, head.encode())
            await _until(lambda: bool(server.server_state.tasks), BOUND_SECONDS)
            server.should_exit = True
            received = await _received_until_closed(
                client, SHUTDOWN_TIMEOUT_SECONDS + SLACK_SECONDS
            )
        finally:
            client.close()
        await asyncio.wait({task}, timeout=BOUND_SECONDS)
        assert task.done()
        assert task.exception() is None
    assert received == b""
