"""One connection of uvicorn's protocol as ``turnkeeper serve`` builds it, fed by a test.

`RawConnection` builds the protocol class of `guarded_protocol` (either parser) around
an ASGI application and a `ConnectionGuard`, connects it to a recording transport
(`Socket`), hands it the test's reads, lets the application answer, and gives back the
bytes written: a server's handling of raw bytes without a socket or a server.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from uvicorn.config import Config
from uvicorn.server import ServerState

from tests.unit.test_corked_transport import Recording
from turnkeeper.adapters.http.guard import ConnectionGuard
from turnkeeper.adapters.http.server import guarded_protocol


class Socket(Recording):
    """A recording transport that can close its writing side (`refuse_unread` does)."""

    def can_write_eof(self) -> bool:
        """Whether the writing side can be closed: always."""
        return True


class RawConnection:
    """A new connection of a guarded protocol on a `Socket`."""

    def __init__(self, app: Any, guard: ConnectionGuard, parser: str) -> None:
        """Build the protocol as the server does, with `app` behind it, and connect it.

        Args:
            app: the ASGI application the requests reach.
            guard: the connection's guard.
            parser: ``httptools`` or ``h11``.
        """
        config = Config(
            app=app,
            lifespan="off",
            access_log=False,
            proxy_headers=False,
            log_config=None,
            # The server bounds h11's unparsed head by the guard's bound too.
            h11_max_incomplete_event_size=guard.max_header_bytes,
        )
        config.load()
        self.state = ServerState()
        self.socket = Socket()
        self.protocol = cast(Any, guarded_protocol(guard, parser))(
            config=config, server_state=self.state, app_state={}, _loop=asyncio.get_running_loop()
        )
        self.protocol.connection_made(self.socket)

    async def receive(self, data: bytes, turns: int) -> None:
        """Hand the protocol one read, then let the loop turn `turns` times."""
        self.protocol.data_received(data)
        # A request may wait for the rest of its body: the loop turns a while.
        for _ in range(turns):
            await asyncio.sleep(0)

    async def settle(self) -> None:
        """Let the application answer every request (pipelined ones one by one) to its end."""
        while True:
            # A turn of the loop sends what the corked transport kept, and starts tasks.
            await asyncio.sleep(0)
            if not self.state.tasks:
                return
            await asyncio.gather(*self.state.tasks)

    def close(self) -> bytes:
        """Lose the connection; the bytes written to it, without the end of file mark."""
        self.protocol.connection_lost(None)
        return b"".join(self.socket.writes).replace(b"<eof>", b"")
