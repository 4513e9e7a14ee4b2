"""Ending the event streams when the server shuts down, within a bound.

uvicorn stops accepting connections on SIGTERM or SIGINT and then waits until every
open answer is complete before it sends the lifespan shutdown to the application, so a
stream (an answer that never completes by itself) would hold the process up until the
graceful timeout cancels it mid-way. `StreamClosingServer` first ends every stream and
long-poll of the process (`turnkeeper.application.services.live.LiveDelivery.close`):
each stream's answer ends cleanly, and its client reconnects elsewhere with
``Last-Event-ID``.

A stream whose client stopped reading cannot end that way: its last write waits in
uvicorn's flow control until the client's receive window opens, which may be never.
The wait is therefore bounded by ``http.shutdown_timeout`` (given by
`turnkeeper.adapters.http.server.guarded_server`): when it passes, `StreamClosingServer`
aborts the connections still open, whose unsent bytes would otherwise keep them until the
client reads or the process ends, and then cancels the answers still running. Aborted
first, a cancelled answer writes nothing: uvicorn's own bound
(``timeout_graceful_shutdown``, unused here) cancelled the answers on open connections,
and uvicorn answered each that had not started with a text/plain 500 of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import uvicorn

from turnkeeper.application.logs import get_logger
from turnkeeper.application.services.live import LiveDelivery

_log = get_logger("turnkeeper.http")


class StoppingServer(uvicorn.Server):
    """A uvicorn server whose stop by SIGTERM or SIGINT returns (the command exits 0).

    ``turnkeeper serve`` (through `StreamClosingServer`) and ``turnkeeper mcp --http``.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Capture SIGTERM and SIGINT as uvicorn does, without raising them again at the end.

        uvicorn raises a signal it handled again once serving ended, so that the process
        ends as the signal's default would: SIGTERM then kills it at once, before the
        command closed its database pool and stopped the embedded PostgreSQL server it
        started (which went on running without its server). Here a stop is complete
        when serving returns: the command cleans up and exits 0.
        """
        with super().capture_signals():
            try:
                yield
            finally:
                captured = getattr(self, "_captured_signals", None)
                if isinstance(captured, list):
                    captured.clear()


class StreamClosingServer(StoppingServer):
    """A uvicorn server that ends the process's streams before it waits for answers.

    Args:
        config: the uvicorn configuration (its ``timeout_graceful_shutdown`` unset).
        live: the live delivery service of the served application.
        shutdown_timeout: ``http.shutdown_timeout`` in seconds, the bound of the wait
            for open answers at shutdown.
        sock: a listening socket shared with other worker processes (None: uvicorn binds
            ``config.host`` and ``config.port`` itself).
    """

    def __init__(
        self,
        config: uvicorn.Config,
        live: LiveDelivery,
        *,
        shutdown_timeout: float,
        sock: socket.socket | None = None,
    ) -> None:
        super().__init__(config)
        self._live = live
        self._sock = sock
        self.shutdown_timeout = shutdown_timeout

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        """Serve until a signal or ``should_exit``, on the shared socket if there is one.

        Args:
            sockets: listening sockets (uvicorn's argument; the shared socket when None).
        """
        if sockets is None and self._sock is not None:
            sockets = [self._sock]
        await super().serve(sockets)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """End every stream, shut down as uvicorn does, within ``shutdown_timeout``.

        When the bound passes with answers still running, their connections are aborted
        (logged as ``http_connections_aborted``) and then the answers cancelled: a client
        sees its connection closed, never an answer the application did not write. After
        a forced exit (a second SIGINT) the connections still open are aborted too.

        Args:
            sockets: the listening sockets (uvicorn's argument).
        """
        self._live.close()
        stopping = asyncio.ensure_future(super().shutdown(sockets))
        done, _ = await asyncio.wait({stopping}, timeout=self.shutdown_timeout)
        if not done:
            self._abort_open_connections()
            # The aborts' connection_lost callbacks run first, marking each answer's
            # client gone, so that a cancelled answer writes nothing.
            await asyncio.sleep(0)
            for task in list(self.server_state.tasks):
                task.cancel()
        await stopping
        self._abort_open_connections()

    def _abort_open_connections(self) -> None:
        left = list(self.server_state.connections)
        if left:
            _log.warning("http_connections_aborted", connections=len(left))
        for connection in left:
            connection.transport.abort()
