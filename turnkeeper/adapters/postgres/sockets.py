"""A wait on a socket through the running event loop, for code that drives libpq itself."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def socket_ready(
    add: Callable[..., object], remove: Callable[[int], object], fd: int
) -> None:
    """Wait until the running loop finds `fd` ready (a reader's or a writer's callback).

    Args:
        add: the loop's ``add_reader`` or ``add_writer``.
        remove: the matching ``remove_reader`` or ``remove_writer``.
        fd: the socket.
    """
    ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def wake() -> None:
        # The loop may call a ready callback again before the waiting task resumes.
        if not ready.done():
            ready.set_result(None)

    add(fd, wake)
    try:
        await ready
    finally:
        remove(fd)


__all__ = ["socket_ready"]
