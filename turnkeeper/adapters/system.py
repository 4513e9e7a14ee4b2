"""System sources: time, ids and secrets (the production `Clock` and `IdGenerator`), version.

`UuidV7Generator` is written by hand after RFC 9562 section 5.7 so that ids sort by
creation time even when many are made within one millisecond (monotonic random,
method 2 of section 6.2). API tokens are made in `turnkeeper.application.services.identity`.
"""

from __future__ import annotations

import secrets
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata

# Layout of a UUIDv7 (RFC 9562 section 5.7): 48 bits unix_ts_ms, 4 bits version,
# 12 bits rand_a, 2 bits variant, 62 bits rand_b. The 74 random bits are treated as one
# counter so that ids made within one millisecond still increase.
_RANDOM_BITS = 74
_RANDOM_LIMIT = 1 << _RANDOM_BITS
_RAND_B_BITS = 62
_TIMESTAMP_LIMIT = 1 << 48
# The increment within a millisecond is random (up to 2**32) so that the next id of a
# burst cannot be guessed from the previous one, while 2**42 ids per millisecond fit.
_INCREMENT_BITS = 32
_VERSION = 0x7
_VARIANT = 0b10


class SystemClock:
    """The wall clock in UTC (satisfies `turnkeeper.application.ports.Clock`)."""

    def now(self) -> datetime:
        """The current time.

        Returns:
            A timezone-aware UTC datetime.
        """
        return datetime.now(UTC)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class UuidV7Generator:
    """Time-ordered UUIDv7 ids, strictly increasing within one process.

    Satisfies `turnkeeper.application.ports.IdGenerator`. Thread-safe.

    Args:
        now_ms: milliseconds since the Unix epoch (injectable for tests).
        random_bits: returns that many random bits (injectable for tests).

    Example:
        >>> generator = UuidV7Generator()
        >>> a, b = generator.new_id(), generator.new_id()
        >>> a < b and a.version == 7
        True
    """

    def __init__(
        self,
        now_ms: Callable[[], int] = _wall_clock_ms,
        random_bits: Callable[[int], int] = secrets.randbits,
    ) -> None:
        self._now_ms = now_ms
        self._random_bits = random_bits
        self._lock = threading.Lock()
        self._last_ms = -1
        self._last_random = 0

    def new_id(self) -> uuid.UUID:
        """A fresh id, greater than every id this generator made before.

        Returns:
            A UUID of version 7 and the RFC 9562 variant.
        """
        with self._lock:
            ms = self._now_ms()
            if ms > self._last_ms:
                random_part = self._random_bits(_RANDOM_BITS)
            else:
                # Same millisecond, or the wall clock stepped back: keep the last
                # timestamp and count up, so that order never breaks.
                ms = self._last_ms
                random_part = self._last_random + 1 + self._random_bits(_INCREMENT_BITS)
                if random_part >= _RANDOM_LIMIT:
                    # Counter exhausted: borrow the next millisecond (RFC 9562 6.2).
                    ms += 1
                    random_part = self._random_bits(_RANDOM_BITS)
            if ms >= _TIMESTAMP_LIMIT:
                raise OverflowError("UUIDv7 timestamp beyond 48 bits")
            self._last_ms = ms
            self._last_random = random_part
        return uuid.UUID(int=_assemble(ms, random_part))


def _assemble(ms: int, random_part: int) -> int:
    rand_a = random_part >> _RAND_B_BITS
    rand_b = random_part & ((1 << _RAND_B_BITS) - 1)
    return (ms << 80) | (_VERSION << 76) | (rand_a << 64) | (_VARIANT << 62) | rand_b


def uuid7_timestamp_ms(value: uuid.UUID) -> int:
    """The creation time embedded in a UUIDv7.

    Args:
        value: a version 7 UUID.

    Returns:
        Milliseconds since the Unix epoch.
    """
    return value.int >> 80


#: The version of a source tree that was never installed (it has no package metadata).
UNKNOWN_VERSION = "0.0.0+unknown"


def package_version() -> str:
    """The installed version of turnkeeper (its package metadata), else `UNKNOWN_VERSION`."""
    try:
        return metadata.version("turnkeeper")
    except metadata.PackageNotFoundError:
        return UNKNOWN_VERSION
