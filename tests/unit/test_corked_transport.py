"""`CorkedTransport`: the writes of one turn of the loop leave in one system call.

On a recording transport: what one turn writes is sent joined, in order, when the turn
ends; closing sends what is kept first; aborting drops it; everything else is the
transport's. Then on uvicorn's protocols as ``turnkeeper serve`` builds them: an
answer's head and body reach the transport in one write.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from turnkeeper.adapters.http.corked import CorkedTransport
from turnkeeper.adapters.http.guard import ConnectionGuard
from turnkeeper.adapters.http.server import guarded_protocol

#: The answer of the test application.
BODY = b'{"ok":true}'
#: A request as a client sends it.
REQUEST = b"GET /healthz HTTP/1.1\r\nhost: example.com\r\n\r\n"


class Recording:
    """A transport that records its writes and its closing."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False
        self.buffered = 0

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def write_eof(self) -> None:
        self.writes.append(b"<eof>")

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 8000)}.get(
            name, default
        )

    def pause_reading(self) -> None:
        self.buffered = -1

    def resume_reading(self) -> None:
        self.buffered = 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        return None


def _corked() -> tuple[CorkedTransport, Recording]:
    inner = Recording()
    return CorkedTransport(cast(asyncio.Transport, inner), asyncio.get_running_loop()), inner


async def _turn() -> None:
    await asyncio.sleep(0)


async def test_the_writes_of_one_turn_leave_joined_when_it_ends() -> None:
    corked, inner = _corked()
    corked.write(b"HTTP/1.1 200 OK\r\n\r\n")
    corked.write(b"")
    corked.writelines([b"a", bytearray(b"b"), memoryview(b"c")])
    assert inner.writes == []
    assert corked.get_write_buffer_size() == len(b"HTTP/1.1 200 OK\r\n\r\nabc")
    await _turn()
    assert inner.writes == [b"HTTP/1.1 200 OK\r\n\r\nabc"]
    corked.write(b"next")
    await _turn()
    assert inner.writes == [b"HTTP/1.1 200 OK\r\n\r\nabc", b"next"]


async def test_closing_sends_what_is_kept_first_and_aborting_drops_it() -> None:
    corked, inner = _corked()
    corked.write(b"last words")
    corked.close()
    assert inner.writes == [b"last words"]
    assert inner.closed
    await _turn()
    assert inner.writes == [b"last words"], "nothing is sent twice"

    corked, inner = _corked()
    corked.write(b"head")
    corked.write_eof()
    assert inner.writes == [b"head", b"<eof>"]

    corked, inner = _corked()
    corked.write(b"dropped")
    corked.abort()
    await _turn()
    assert inner.writes == []
    assert inner.aborted


async def test_what_is_kept_for_a_transport_closed_meanwhile_is_not_written() -> None:
    corked, inner = _corked()
    corked.write(b"too late")
    inner.closed = True  # the connection was lost during the turn
    await _turn()
    assert inner.writes == []


async def test_everything_else_is_the_transports() -> None:
    corked, inner = _corked()
    assert corked.get_extra_info("peername") == ("127.0.0.1", 50000)
    corked.pause_reading()
    assert inner.buffered == -1
    assert not corked.is_closing()


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        return
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json"), (b"content-length", b"11")],
        }
    )
    await send({"type": "http.response.body", "body": BODY})


@pytest.mark.parametrize("parser", ["h11", "httptools"])
async def test_an_answers_head_and_body_reach_the_socket_in_one_write(parser: str) -> None:
    guard = ConnectionGuard(header_timeout=10, max_connections=10)
    protocol_class = guarded_protocol(guard, parser)
    config = Config(
        app=_app, lifespan="off", access_log=False, proxy_headers=False, log_config=None
    )
    config.load()
    loop = asyncio.get_running_loop()
    protocol = cast(Any, protocol_class)(
        config=config, server_state=ServerState(), app_state={}, _loop=loop
    )
    inner = Recording()
    protocol.connection_made(inner)
    protocol.data_received(REQUEST)
    for _ in range(10):  # the application's task, then the end of its turn
        await _turn()
    assert len(inner.writes) == 1
    assert inner.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert inner.writes[0].endswith(b"\r\n\r\n" + BODY)
    protocol.connection_lost(None)
