"""A transport whose writes of one turn of the event loop leave in one system call.

uvicorn writes an answer's status line and headers, then its body, each with its own
``transport.write``, and the event loop's transport sends each at once: two system calls
per answer, and two wake-ups of a client that reads as the bytes arrive.
`CorkedTransport` keeps what is written during one turn of the loop and sends it in one
write when the turn ends (``loop.call_soon``), before the loop waits for anything, so a
streamed answer's chunk leaves as soon as the code that wrote it yields. Closing sends
what is kept first; aborting drops it, as the transport would.
"""

from __future__ import annotations

import asyncio
from typing import Any


class CorkedTransport:
    """Wraps a connection's transport for the protocol; everything but writing passes on.

    Args:
        transport: the loop's transport of the connection.
        loop: the loop the connection runs on.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._kept: list[bytes | bytearray | memoryview] | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Keep `data` until the turn of the loop ends (then send all kept in one write)."""
        if not data:
            return
        if self._kept is None:
            self._kept = [data]
            self._loop.call_soon(self._send)
        else:
            self._kept.append(data)

    def writelines(self, list_of_data: Any) -> None:
        """Keep each piece, as `write` does."""
        for data in list_of_data:
            self.write(data)

    def _send(self) -> None:
        kept, self._kept = self._kept, None
        if not kept or self._transport.is_closing():
            return
        self._transport.write(kept[0] if len(kept) == 1 else b"".join(kept))

    def get_write_buffer_size(self) -> int:
        """What the transport holds plus what is kept."""
        kept = sum(len(data) for data in self._kept or ())
        return self._transport.get_write_buffer_size() + kept

    def write_eof(self) -> None:
        """Send what is kept, then close the write side."""
        self._send()
        self._transport.write_eof()

    def close(self) -> None:
        """Send what is kept, then close (the transport sends its buffer before it ends)."""
        self._send()
        self._transport.close()

    def abort(self) -> None:
        """Close at once: what is kept is dropped with the transport's own buffer."""
        self._kept = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        # Everything else (extra info, reading, flow control, closing state) is the
        # transport's own.
        return getattr(self._transport, name)
