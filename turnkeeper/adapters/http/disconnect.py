"""Work that ends when its client leaves: the long polls of the event feeds.

Litestar never cancels a route handler when its client disconnects; only its streaming
answers watch the connection. A long poll (``wait`` on GET /v1/events and GET
/v1/agent/events, up to ``stream.max_wait_seconds``) would then run on for its whole wait
after its client left: it holds a wake-up listener, reads the feed again on every commit
and, on the agent feed, delivers (mints invocation tokens and moves the delivered
position) to nobody, so that the agent's next poll sees the invocation as redelivered.
`until_client_leaves` runs such a wait while it watches the request's ASGI receive
channel, and cancels the wait as soon as ``http.disconnect`` arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from litestar.types import Receive

from turnkeeper.adapters.http.problems import ClientGone

T = TypeVar("T")

_DISCONNECT = "http.disconnect"


async def _client_left(receive: Receive) -> None:
    """Return once the client disconnected.

    A GET request's channel gives its (empty) body first and then nothing until the
    client leaves; every message other than ``http.disconnect`` is skipped.
    """
    while (await receive())["type"] != _DISCONNECT:
        pass


async def until_client_leaves(work: Awaitable[T], receive: Receive) -> T:
    """Run `work` until it finishes or the client disconnects, whichever comes first.

    The work runs in a task of its own beside a watcher of the receive channel. When the
    client leaves first, the work is cancelled (its context managers, a wake-up listener
    among them, are exited) and waited for, so that nothing reads or delivers for the
    departed client and no task outlives the call. When the work ends first, the watcher
    is cancelled. Start it only for work that may wait: the watcher is one more task.

    Args:
        work: the awaitable to run, for example a long poll of `LiveDelivery`.
        receive: the request's ASGI receive callable; nothing else may read it meanwhile
            (a GET request's body is empty and read by nobody).

    Returns:
        What `work` returned.

    Raises:
        ClientGone: the client disconnected before `work` finished (answered ``408
            request_timeout``, which nobody reads).
        Exception: whatever `work` raised, unchanged (a problem of the route), or what
            `receive` raised.

    Example:
        >>> waited = live.wait_events(sam, wait=wait)  # doctest: +SKIP
        >>> page = await until_client_leaves(waited, request.receive)  # doctest: +SKIP
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_client_left(receive))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        # Whichever is still running ends here (also when this call itself is cancelled):
        # the work leaves its listener, the watcher its pending receive.
        task.cancel()
        watcher.cancel()
        await asyncio.wait((task, watcher))
    if watcher.cancelled() or not task.cancelled():
        if not watcher.cancelled():
            # Both ended at once: the work's outcome wins; a failed receive is dropped.
            with contextlib.suppress(Exception):
                watcher.result()
        return task.result()
    watcher.result()
    raise ClientGone()


__all__ = ["until_client_leaves"]
