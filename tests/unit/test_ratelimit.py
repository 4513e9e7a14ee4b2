"""Table tests of the token bucket and of the denial-audit window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from turnkeeper.application.audit import window_start
from turnkeeper.domain.ratelimit import Bucket, take_token

T0 = datetime(2025, 3, 1, 9, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("burst", "left"), [(1, 0.0), (2, 1.0), (5, 4.0), (30, 29.0)], ids=lambda v: str(v)
)
def test_the_first_take_finds_a_full_bucket(burst: int, left: float) -> None:
    decision = take_token(None, T0, burst=burst, per_minute=60)
    assert decision.retry_after is None
    assert decision.bucket == Bucket(tokens=left, updated_at=T0)


# (stored tokens, stored at, now, burst, per_minute, expected retry_after, tokens to store)
TAKE_CASES: list[tuple[str, float, float, float, int, int, int | None, float]] = [
    # Empty bucket: refused, retry_after from per_minute, never below one second.
    ("empty-60-per-minute", 0.0, 0, 0, 5, 60, 1, 0.0),
    ("empty-6-per-minute", 0.0, 0, 0, 5, 6, 10, 0.0),
    ("empty-1-per-minute", 0.0, 0, 0, 5, 1, 60, 0.0),
    ("empty-7-per-minute-rounds-up", 0.0, 0, 0, 5, 7, 9, 0.0),
    ("empty-600-per-minute-at-least-1s", 0.0, 0, 0, 5, 600, 1, 0.0),
    ("half-token-6-per-minute", 0.5, 0, 0, 5, 6, 5, 0.5),
    ("half-token-60-per-minute", 0.5, 0, 0, 5, 60, 1, 0.5),
    # Refill over time, capped at burst.
    ("refilled-one-token", 0.0, 0, 1, 5, 60, None, 0.0),
    ("half-refilled-refused", 0.0, 0, 0.5, 5, 60, 1, 0.5),
    ("quarter-refilled-retry-rest", 0.0, 0, 5, 5, 3, 15, 0.25),
    ("refill-adds-to-rest", 2.5, 0, 2, 10, 30, None, 2.5),
    ("long-wait-capped-at-burst", 0.0, 0, 3600, 5, 60, None, 4.0),
    ("full-bucket-stays-capped", 5.0, 0, 60, 5, 60, None, 4.0),
    ("stored-above-burst-is-capped", 50.0, 0, 0, 5, 60, None, 4.0),
    # per_minute 0 never refills.
    ("no-refill-keeps-tokens", 3.0, 0, 86400, 5, 0, None, 2.0),
    # A clock that goes back refills nothing.
    ("clock-going-back", 0.5, 10, 0, 5, 60, 1, 0.5),
]


@pytest.mark.parametrize(
    ("tokens", "stored", "now", "burst", "per_minute", "retry_after", "left"),
    [c[1:] for c in TAKE_CASES],
    ids=[c[0] for c in TAKE_CASES],
)
def test_take_token(
    tokens: float,
    stored: float,
    now: float,
    burst: int,
    per_minute: int,
    retry_after: int | None,
    left: float,
) -> None:
    decision = take_token(
        Bucket(tokens=tokens, updated_at=at(stored)), at(now), burst=burst, per_minute=per_minute
    )
    assert decision.retry_after == retry_after
    assert decision.bucket.tokens == pytest.approx(left)
    assert decision.bucket.updated_at == at(now)


def test_an_empty_bucket_without_refill_stays_empty() -> None:
    bucket = Bucket(tokens=0.0, updated_at=T0)
    for later in (0, 1, 3600, 86400 * 365):
        decision = take_token(bucket, at(later), burst=5, per_minute=0)
        assert decision.bucket.tokens == 0.0
        assert isinstance(decision.retry_after, int)
        assert decision.retry_after >= 1


def test_waiting_retry_after_is_enough() -> None:
    bucket = take_token(None, T0, burst=1, per_minute=7).bucket
    refused = take_token(bucket, T0, burst=1, per_minute=7)
    assert refused.retry_after == 9
    assert take_token(refused.bucket, at(8), burst=1, per_minute=7).retry_after == 1
    assert take_token(refused.bucket, at(9), burst=1, per_minute=7).retry_after is None


def test_burst_takes_at_one_instant_then_a_refusal() -> None:
    bucket: Bucket | None = None
    outcomes = []
    for _ in range(4):
        decision = take_token(bucket, T0, burst=3, per_minute=60)
        bucket = decision.bucket
        outcomes.append(decision.retry_after)
    assert outcomes == [None, None, None, 1]


# --- window_start ---------------------------------------------------------------------

PLUS_TWO = timezone(timedelta(hours=2))

WINDOW_CASES = [
    (
        "minute",
        datetime(2025, 3, 1, 12, 34, 56, tzinfo=UTC),
        60,
        datetime(2025, 3, 1, 12, 34, tzinfo=UTC),
    ),
    (
        "five-minutes",
        datetime(2025, 3, 1, 12, 34, 56, tzinfo=UTC),
        300,
        datetime(2025, 3, 1, 12, 30, tzinfo=UTC),
    ),
    (
        "hour",
        datetime(2025, 3, 1, 12, 34, 56, tzinfo=UTC),
        3600,
        datetime(2025, 3, 1, 12, tzinfo=UTC),
    ),
    ("day", datetime(2025, 3, 1, 12, 34, 56, tzinfo=UTC), 86400, datetime(2025, 3, 1, tzinfo=UTC)),
    (
        "on-boundary",
        datetime(2025, 3, 1, 12, 35, tzinfo=UTC),
        60,
        datetime(2025, 3, 1, 12, 35, tzinfo=UTC),
    ),
    (
        "last-microsecond",
        datetime(2025, 3, 1, 12, 34, 59, 999999, tzinfo=UTC),
        60,
        datetime(2025, 3, 1, 12, 34, tzinfo=UTC),
    ),
    (
        "one-second-drops-micros",
        datetime(2025, 3, 1, 12, 34, 56, 700000, tzinfo=UTC),
        1,
        datetime(2025, 3, 1, 12, 34, 56, tzinfo=UTC),
    ),
    (
        "odd-window",
        datetime(1970, 1, 1, 0, 0, 20, tzinfo=UTC),
        7,
        datetime(1970, 1, 1, 0, 0, 14, tzinfo=UTC),
    ),
    ("epoch", datetime(1970, 1, 1, tzinfo=UTC), 60, datetime(1970, 1, 1, tzinfo=UTC)),
    (
        "other-offset-hour",
        datetime(2025, 3, 1, 14, 34, 56, tzinfo=PLUS_TWO),
        3600,
        datetime(2025, 3, 1, 12, tzinfo=UTC),
    ),
]


@pytest.mark.parametrize(
    ("moment", "window", "expected"),
    [c[1:] for c in WINDOW_CASES],
    ids=[c[0] for c in WINDOW_CASES],
)
def test_window_start(moment: datetime, window: int, expected: datetime) -> None:
    start = window_start(moment, timedelta(seconds=window))
    assert start == expected
    assert start <= moment < start + timedelta(seconds=window)


def test_window_start_before_the_epoch() -> None:
    moment = datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC)
    assert window_start(moment, timedelta(seconds=60)) == datetime(1969, 12, 31, 23, 59, tzinfo=UTC)


def test_window_start_far_in_the_future() -> None:
    moment = datetime(5000, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    assert window_start(moment, timedelta(seconds=60)) == datetime(5000, 12, 31, 23, 59, tzinfo=UTC)


@pytest.mark.parametrize(
    "per_minute",
    [
        1,
        3,
        7,
        60,
        61,
        600,
        1000,
        3125,
    ],
    ids=lambda v: f"{v}-per-minute",
)
def test_waiting_one_refill_interval_gives_one_token(per_minute: int) -> None:
    interval = timedelta(microseconds=-(-60_000_000 // per_minute))
    empty = Bucket(tokens=0.0, updated_at=T0)
    assert take_token(empty, T0 + interval, burst=5, per_minute=per_minute).retry_after is None
    before = T0 + interval - timedelta(microseconds=1)
    assert take_token(empty, before, burst=5, per_minute=per_minute).retry_after is not None
