"""Test doubles of the clock, id and signer ports (no sleeping: tests move the clock)."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta

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
