"""Test doubles of the clock, id and signer ports (no sleeping: tests move the clock)."""

from __future__ import annotations

import contextlib
import itertools
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from turnkeeper.adapters.tokens import JwtSigner

#: The signing key of invocation tokens in every test (HS256 wants 32 bytes or more).
TEST_KEY = b"turnkeeper-test-signing-key-example.com-0123456789"

#: The fixed start of every test clock.
EPOCH = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)

#: The start of the counter of `DescendingIds` (far above any count a test reaches).
DESCENDING_START = 1 << 40


def _uuid7_shaped(n: int) -> uuid.UUID:
    # Version 7 and the RFC 4122 variant bits, the counter in the low bits.
    return uuid.UUID(int=(0x0190_0000_0000 << 80) | (0x7 << 76) | (0x2 << 62) | n)


class FakeClock:
    """A clock that only moves when a test moves it."""

    def __init__(self, start: datetime = EPOCH) -> None:
        self.current = start

    def now(self) -> datetime:
        return self.current

    def advance(self, by: float | timedelta) -> None:
        """Move the clock forward (a number is seconds)."""
        self.current += by if isinstance(by, timedelta) else timedelta(seconds=by)


class TickingClock(FakeClock):
    """A fake clock that moves one `TICK` forward at every reading (as a real one may)."""

    def now(self) -> datetime:
        self.current += TICK
        return self.current


#: How far a `TickingClock` moves per reading.
TICK = timedelta(microseconds=1)


class SequentialIds:
    """UUIDv7-shaped ids from a counter: ordered and reproducible."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)

    def new_id(self) -> uuid.UUID:
        return _uuid7_shaped(next(self._counter))


class DescendingIds:
    """UUIDv7-shaped ids that fall: message id order is the reverse of thread order."""

    def __init__(self) -> None:
        self._next = DESCENDING_START

    def new_id(self) -> uuid.UUID:
        self._next -= 1
        return _uuid7_shaped(self._next)


def signer() -> JwtSigner:
    """The invocation token signer of every test's services (key `TEST_KEY`)."""
    return JwtSigner(TEST_KEY)


class InstantWaker:
    """A wake-up port whose waits never block: a wait that would time out moves the clock.

    It listens through a real waker (the memory store's), so a commit since the previous
    wait still makes the next wait return True; otherwise the wait returns False at once
    after moving `clock` by the time it was given. A stream over it therefore answers a
    heartbeat instead of blocking, which lets a test drain a stream without waiting.
    """

    def __init__(self, inner: Any, clock: FakeClock) -> None:
        self._inner = inner
        self._clock = clock
        self.waits = 0

    @contextlib.contextmanager
    def listen(self, feed: uuid.UUID | None) -> Iterator[Any]:
        with self._inner.listen(feed) as listener:
            yield _InstantListener(self, listener)

    @property
    def generation(self) -> int:
        return int(self._inner.generation)

    @property
    def closed(self) -> bool:
        return bool(self._inner.closed)

    def close(self) -> None:
        self._inner.close()

    async def wait(self, listener: Any, at_most: timedelta) -> bool:
        self.waits += 1
        woken = bool(await listener.wait(timedelta(0)))
        if not woken:
            self._clock.current += at_most
        return woken


class _InstantListener:
    def __init__(self, waker: InstantWaker, inner: Any) -> None:
        self._waker = waker
        self._inner = inner

    async def wait(self, at_most: timedelta) -> bool:
        return await self._waker.wait(self._inner, at_most)
