"""The wake-up port: readers of an event feed wait until something was committed.

A reader of the shared feed or of an agent's feed that found nothing after its cursor
opens a listener *before* it reads, reads, and then waits on the listener. Every commit
that appended events wakes the listeners of the feeds those events belong to (the
shared feed, or the personal feed of each audience); the reader then reads again
through the normal cursor rules (``seq > after``, commit order, see ADR 0005), so a
wake-up carries no data and decides nothing: it only says "look again".

Feeds are named by the audience of their events: `SHARED_FEED` (None) for the shared
feed, a principal id for that principal's personal feed.

A wake-up may be lost (the PostgreSQL listener reconnects, a notification comes late):
implementations then change `EventWaker.generation`, and readers whose wait timed out
read again when the generation moved since their last read. A lost wake-up therefore
costs at most one wait, never an event.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta
from typing import Final, Protocol, runtime_checkable

#: The feed of shared events (events without audience).
SHARED_FEED: Final = None

#: A feed: `SHARED_FEED`, or the id of the principal whose personal feed it is.
Feed = uuid.UUID | None


class WakeListener(Protocol):
    """One reader's subscription to the commits of one feed."""

    async def wait(self, at_most: timedelta) -> bool:
        """Wait for a commit of the feed, for the waker to close, or for `at_most`.

        A commit that happened after the listener opened (or after the previous `wait`
        returned) and before this call makes it return at once.

        Args:
            at_most: the longest wait.

        Returns:
            True when woken (a commit of the feed, or the waker closed); False when
            `at_most` passed first.
        """
        ...


class EventWaker(Protocol):
    """Wakes the readers of event feeds when events were committed.

    Example:
        >>> with waker.listen(SHARED_FEED) as listener:  # doctest: +SKIP
        ...     page = await read(after)
        ...     if not page.events:
        ...         await listener.wait(timedelta(seconds=15))
    """

    def listen(self, feed: Feed) -> AbstractContextManager[WakeListener]:
        """A listener for the commits of one feed, open for the duration of a block.

        Args:
            feed: `SHARED_FEED` or a principal id.

        Returns:
            A context manager yielding the listener.
        """
        ...

    @property
    def generation(self) -> int:
        """A number that changes whenever events may have been committed.

        It moves with every commit the waker learns of (of any feed) and whenever it
        may have missed some (a reconnect): a reader whose wait timed out reads again
        only when the generation moved since its last read.
        """
        ...

    @property
    def closed(self) -> bool:
        """True once `close` was called."""
        ...

    def close(self) -> None:
        """Wake every listener for good (the process shuts down): waits return at once."""
        ...


@runtime_checkable
class ProvidesWaker(Protocol):
    """A unit-of-work factory that knows how its store wakes readers."""

    @property
    def waker(self) -> EventWaker:
        """The waker of the store's commits."""
        ...


class _SleepingListener:
    def __init__(self, waker: PollingWaker) -> None:
        self._waker = waker

    async def wait(self, at_most: timedelta) -> bool:
        return await self._waker.sleep(at_most)


class PollingWaker:
    """A waker for stores that cannot signal: every wait runs to its timeout.

    Its generation changes on every read of it, so readers read again after every
    wait: delivery then costs up to one wait (``stream.heartbeat_seconds``) of delay.
    """

    def __init__(self) -> None:
        self._counter = itertools.count()
        self._closed = False
        self._sleepers: set[_Sleeper] = set()

    @contextmanager
    def listen(self, feed: Feed) -> Iterator[WakeListener]:
        """A listener that is only woken by `close` (see the class)."""
        yield _SleepingListener(self)

    @property
    def generation(self) -> int:
        """A new number on every read: readers always look again."""
        return next(self._counter)

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self._closed

    def close(self) -> None:
        """Wake every sleeping listener for good."""
        self._closed = True
        for sleeper in list(self._sleepers):
            sleeper.wake()

    async def sleep(self, at_most: timedelta) -> bool:
        """Sleep for `at_most` unless closed first.

        Returns:
            True when closed (now or meanwhile), else False.
        """
        if self._closed:
            return True
        sleeper = _Sleeper()
        self._sleepers.add(sleeper)
        try:
            return await sleeper.sleep(at_most)
        finally:
            self._sleepers.discard(sleeper)


class _Sleeper:
    def __init__(self) -> None:
        self._event = asyncio.Event()

    def wake(self) -> None:
        self._event.set()

    async def sleep(self, at_most: timedelta) -> bool:
        try:
            async with asyncio.timeout(at_most.total_seconds()):
                await self._event.wait()
        except TimeoutError:
            return False
        return True
