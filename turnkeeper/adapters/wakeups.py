"""In-process wake-ups: the fan-out from "events were committed" to waiting readers.

`LocalWaker` satisfies `turnkeeper.application.wakeup.EventWaker`. The memory adapter
signals it after every commit that appended events; the PostgreSQL adapter signals it
from the notifications of its LISTEN connection (`turnkeeper.adapters.postgres.wakeup`).

Signals may come from another thread than the waiting reader's event loop (a test's
loop beside the server's): a waiting listener is resolved through its own loop
(``call_soon_threadsafe``), and one lock guards the listener sets.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import timedelta

from turnkeeper.application.wakeup import Feed, WakeListener

#: Called with the number of open listeners whenever it changes.
ListenerCountHook = Callable[[int], None]


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Listener:
    """One open listener of a `LocalWaker` (all state guarded by the waker's lock)."""

    def __init__(self, waker: LocalWaker) -> None:
        self._waker = waker
        self.pending = False
        self.waiter: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None

    def wake(self) -> None:
        """Mark a commit and resolve a running wait (called under the waker's lock)."""
        self.pending = True
        if self.waiter is None:
            return
        loop, future = self.waiter
        self.waiter = None
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            _resolve(future)
            return
        try:
            loop.call_soon_threadsafe(_resolve, future)
        except RuntimeError:
            # The waiting loop is closed: nobody waits any more.
            return

    async def wait(self, at_most: timedelta) -> bool:
        """See `turnkeeper.application.wakeup.WakeListener.wait`."""
        lock = self._waker.lock
        loop = asyncio.get_running_loop()
        with lock:
            if self.pending or self._waker.closed:
                self.pending = False
                return True
            future: asyncio.Future[None] = loop.create_future()
            self.waiter = (loop, future)
        try:
            async with asyncio.timeout(max(at_most.total_seconds(), 0.0)):
                await future
        except TimeoutError:
            pass
        finally:
            with lock:
                self.waiter = None
                woken = self.pending or self._waker.closed
                self.pending = False
        return woken


class LocalWaker:
    """Wakes the readers of one process; satisfies `EventWaker`.

    Args:
        on_count: called with the number of open listeners whenever it changes (the
            PostgreSQL waker holds its LISTEN connection only while listeners exist).
    """

    def __init__(self, on_count: ListenerCountHook | None = None) -> None:
        self.lock = threading.Lock()
        self._feeds: dict[Feed, set[_Listener]] = {}
        self._count = 0
        self._generation = 0
        self._closed = False
        self._on_count = on_count

    @contextmanager
    def listen(self, feed: Feed) -> Iterator[WakeListener]:
        """A listener of one feed for the duration of the block."""
        listener = _Listener(self)
        with self.lock:
            self._feeds.setdefault(feed, set()).add(listener)
            self._count += 1
            count = self._count
        self._counted(count)
        try:
            yield listener
        finally:
            with self.lock:
                listeners = self._feeds.get(feed)
                if listeners is not None:
                    listeners.discard(listener)
                    if not listeners:
                        del self._feeds[feed]
                self._count -= 1
                count = self._count
            self._counted(count)

    @property
    def listeners(self) -> int:
        """Listeners open now."""
        return self._count

    @property
    def generation(self) -> int:
        """Moves with every signal (see the port)."""
        return self._generation

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self._closed

    def signal(self, feeds: Iterable[Feed]) -> None:
        """Events of these feeds were committed: wake their listeners.

        Args:
            feeds: the feeds of the committed events (duplicates are fine).
        """
        with self.lock:
            self._generation += 1
            for feed in set(feeds):
                for listener in self._feeds.get(feed, ()):
                    listener.wake()

    def signal_all(self) -> None:
        """Something may have been committed that no signal named: wake every listener."""
        with self.lock:
            self._generation += 1
            for listeners in self._feeds.values():
                for listener in listeners:
                    listener.wake()

    def close(self) -> None:
        """Wake every listener for good; later waits return at once."""
        self._closed = True
        self.signal_all()

    def _counted(self, count: int) -> None:
        if self._on_count is not None:
            self._on_count(count)
