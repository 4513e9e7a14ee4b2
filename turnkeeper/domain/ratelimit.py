"""Token buckets for rate-limit classes (``rl.message``), one bucket per principal.

Pure arithmetic: the caller passes the stored bucket, the time and the configured
burst and refill rate (``ratelimit.rl.message.burst`` and ``.per_minute``).
"""

from __future__ import annotations

import math
from datetime import datetime

import attrs

#: The rate-limit class of message.create and thread.create.
RL_MESSAGE = "rl.message"

#: Seconds per minute, as a float: the refill arithmetic is in IEEE doubles (the SQL of
#: the PostgreSQL adapter repeats it operation by operation, so both round alike).
SECONDS_PER_MINUTE = 60.0
#: Refill arithmetic is in floats; a token short by rounding error alone is a whole one.
TOLERANCE = 1e-9


@attrs.frozen(kw_only=True)
class Bucket:
    """The stored state of one bucket.

    Attributes:
        tokens: tokens left (fractional while refilling).
        updated_at: when `tokens` was computed.
    """

    tokens: float
    updated_at: datetime


@attrs.frozen(kw_only=True)
class BucketDecision:
    """The outcome of taking a token.

    Attributes:
        bucket: the bucket to store (unchanged tokens on refusal, refilled time).
        retry_after: None when allowed, else whole seconds until a token is there.
    """

    bucket: Bucket
    retry_after: int | None


def take_token(
    bucket: Bucket | None, now: datetime, *, burst: int, per_minute: int
) -> BucketDecision:
    """Take one token from a bucket, refilling it for the time that passed.

    Args:
        bucket: the stored bucket, None for a principal's first action (a full bucket).
        now: the current time from the clock port.
        burst: bucket capacity.
        per_minute: refill rate in tokens per minute.

    Returns:
        The decision with the bucket to store.
    """
    if bucket is None:
        tokens = float(burst)
    else:
        elapsed = max(0.0, (now - bucket.updated_at).total_seconds())
        tokens = min(float(burst), bucket.tokens + elapsed * per_minute / SECONDS_PER_MINUTE)
    if tokens >= 1.0 - TOLERANCE:
        left = max(0.0, tokens - 1.0)
        return BucketDecision(bucket=Bucket(tokens=left, updated_at=now), retry_after=None)
    return BucketDecision(
        bucket=Bucket(tokens=tokens, updated_at=now),
        retry_after=retry_after(1.0 - tokens, per_minute=per_minute),
    )


def retry_after(missing: float, *, per_minute: int) -> int:
    """Whole seconds until a refused bucket holds a token again.

    Args:
        missing: the part of a token the bucket lacks (0 < missing <= 1).
        per_minute: refill rate in tokens per minute.

    Returns:
        At least 1; a minute when the bucket never refills (a rate of 0).
    """
    wait = math.inf if per_minute <= 0 else missing * SECONDS_PER_MINUTE / per_minute
    return max(1, math.ceil(wait)) if math.isfinite(wait) else int(SECONDS_PER_MINUTE)
