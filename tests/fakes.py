"""Test doubles for the clock and id ports (no sleeping: tests move the clock)."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta

#: The signing key of invocation tokens in tests.
TEST_KEY = b"turnkeeper-test-signing-key-example.com-0123456789"

#: The fixed start of every test clock.
EPOCH = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


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
        n = next(self._counter)
        # Version 7 and the RFC 4122 variant bits, the counter in the low bits.
        value = (0x0190_0000_0000 << 80) | (0x7 << 76) | (0x2 << 62) | n
        return uuid.UUID(int=value)
