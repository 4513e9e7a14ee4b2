"""Raw ASGI exchanges with the application: the scope of a GET, waits on the waker.

The live delivery tests drive the app without a server, so that they choose when the
client's receive channel says ``http.disconnect`` and what the server's send does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from turnkeeper.adapters.wakeups import LocalWaker
from turnkeeper.application.bootstrap import Services

#: Bound of a wait for something that must happen at once.
BOUND_SECONDS = 10.0


def get_scope(path: str, token: str, query: str = "") -> dict[str, Any]:
    """The ASGI scope of a GET with a bearer token.

    Args:
        path: the request's path.
        token: the bearer token.
        query: the query string, without ``?``.

    Returns:
        A new scope (the application may write into its ``state``).
    """
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [
            (b"host", b"turnkeeper.example.com"),
            (b"authorization", f"Bearer {token}".encode()),
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("turnkeeper.example.com", 80),
        "state": {},
    }


def local_waker(services: Services) -> LocalWaker:
    """The memory store's in-process waker of `services`."""
    waker = services.live.waker
    assert isinstance(waker, LocalWaker)
    return waker


async def until(condition: Callable[[], bool], bound: float = BOUND_SECONDS) -> None:
    """Yield to the loop until `condition` holds (the server runs meanwhile).

    Args:
        condition: what to wait for.
        bound: seconds after which the wait fails (`TimeoutError`).
    """
    async with asyncio.timeout(bound):
        # The waker counts its listeners and tells nobody when the count changes.
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0)
