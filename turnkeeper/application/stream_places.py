"""The stream places port: ``stream.max_per_principal`` across every server process.

API.md bounds the event streams of a principal (``GET /v1/events/stream`` and ``GET
/v1/agent/events/stream`` together) by ``stream.max_per_principal``; beyond, 429
``rate_limited``. Several server processes (``serve --workers``) on one database share
the bound: a stream takes one of the principal's places from the store, and gives it
back when it ends. A place is never written to a table: a process that dies (killed,
its connection cut) gives its places back with it, so a crash cannot leave a principal
refused.

`LocalStreamPlaces` keeps the places of one process, for stores that serve one (the
memory store, a store without `ProvidesStreamPlaces`); the PostgreSQL store's places
are session advisory locks (`turnkeeper.adapters.postgres.stream_places`).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Protocol, runtime_checkable

#: Gives a place back; calling it again does nothing. Synchronous, so that a stream
#: that ends in any way (a client gone, a shutdown) gives its place back.
Release = Callable[[], None]


class StreamPlaces(Protocol):
    """The places of the open event streams of each principal."""

    async def take(self, principal_id: uuid.UUID, limit: int) -> Release | None:
        """Take one of the principal's `limit` places for a stream.

        Args:
            principal_id: the stream's reader.
            limit: ``stream.max_per_principal``.

        Returns:
            The release of the place taken, or None when the principal holds `limit`
            places already (in any process sharing the store).

        Raises:
            StoreUnavailable: the store cannot be asked.
        """
        ...


@runtime_checkable
class ProvidesStreamPlaces(Protocol):
    """A unit-of-work factory whose store keeps stream places for every process."""

    @property
    def stream_places(self) -> StreamPlaces:
        """The places of the store's streams."""
        ...


class LocalStreamPlaces:
    """The places of the streams of this process alone (satisfies `StreamPlaces`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[uuid.UUID, int] = {}

    async def take(self, principal_id: uuid.UUID, limit: int) -> Release | None:
        """See `StreamPlaces.take`."""
        with self._lock:
            held = self._held.get(principal_id, 0)
            if held >= limit:
                return None
            self._held[principal_id] = held + 1
        given_back = False

        def release() -> None:
            nonlocal given_back
            with self._lock:
                if given_back:
                    return
                given_back = True
                left = self._held.get(principal_id, 0) - 1
                if left > 0:
                    self._held[principal_id] = left
                else:
                    self._held.pop(principal_id, None)

        return release
