"""Properties of the token bucket and of the denial-audit window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from turnkeeper.application.audit import window_start
from turnkeeper.domain.ratelimit import Bucket, take_token

T0 = datetime(2025, 3, 1, 9, 0, 0, tzinfo=UTC)

bursts = st.integers(min_value=1, max_value=50)
rates = st.integers(min_value=0, max_value=1000)
positive_rates = st.integers(min_value=1, max_value=1000)


@st.composite
def stored_buckets(draw: st.DrawFn, burst: int) -> Bucket | None:
    if draw(st.booleans()):
        return None
    tokens = draw(st.floats(min_value=0.0, max_value=float(burst), allow_nan=False))
    age = draw(st.integers(min_value=0, max_value=3_600_000_000))
    return Bucket(tokens=tokens, updated_at=T0 - timedelta(microseconds=age))


@given(st.data(), bursts, rates)
def test_never_more_than_burst_allows_at_one_instant(
    data: st.DataObject, burst: int, per_minute: int
) -> None:
    bucket = data.draw(stored_buckets(burst))
    allowed = 0
    for _ in range(burst + 2):
        decision = take_token(bucket, T0, burst=burst, per_minute=per_minute)
        bucket = decision.bucket
        if decision.retry_after is None:
            allowed += 1
        else:
            assert decision.retry_after >= 1
    assert allowed <= burst
    assert decision.retry_after is not None


@given(bursts, rates)
def test_a_fresh_principal_gets_exactly_burst_at_one_instant(burst: int, per_minute: int) -> None:
    bucket: Bucket | None = None
    outcomes = []
    for _ in range(burst + 1):
        decision = take_token(bucket, T0, burst=burst, per_minute=per_minute)
        bucket = decision.bucket
        outcomes.append(decision.retry_after is None)
    assert outcomes == [True] * burst + [False]


@given(
    bursts,
    rates,
    st.lists(st.integers(min_value=-5_000_000, max_value=600_000_000), min_size=1, max_size=30),
)
def test_tokens_stay_between_zero_and_burst(burst: int, per_minute: int, steps: list[int]) -> None:
    bucket: Bucket | None = None
    now = T0
    for step in steps:
        now += timedelta(microseconds=step)
        decision = take_token(bucket, now, burst=burst, per_minute=per_minute)
        bucket = decision.bucket
        assert 0.0 <= bucket.tokens <= burst
        assert bucket.updated_at == now


@given(bursts, positive_rates)
def test_one_refill_interval_after_a_refusal_gives_one_more_token(
    burst: int, per_minute: int
) -> None:
    bucket: Bucket | None = None
    for _ in range(burst):
        bucket = take_token(bucket, T0, burst=burst, per_minute=per_minute).bucket
    refused = take_token(bucket, T0, burst=burst, per_minute=per_minute)
    assert refused.retry_after is not None
    # 60/per_minute seconds, rounded up to the clock's microsecond; one microsecond of
    # slack covers the float rounding reported for per_minute=3125 (see the unit tests).
    interval = timedelta(microseconds=-(-60_000_000 // per_minute) + 1)
    later = take_token(refused.bucket, T0 + interval, burst=burst, per_minute=per_minute)
    assert later.retry_after is None
    assert later.bucket.tokens < 1.0
    again = take_token(later.bucket, T0 + interval, burst=burst, per_minute=per_minute)
    assert again.retry_after is not None


@given(bursts, positive_rates)
def test_waiting_retry_after_seconds_is_always_enough(burst: int, per_minute: int) -> None:
    bucket: Bucket | None = None
    decision = None
    for _ in range(burst + 1):
        decision = take_token(bucket, T0, burst=burst, per_minute=per_minute)
        bucket = decision.bucket
    assert decision is not None
    assert decision.retry_after is not None
    later = T0 + timedelta(seconds=decision.retry_after)
    assert take_token(bucket, later, burst=burst, per_minute=per_minute).retry_after is None


@given(
    st.datetimes(
        min_value=datetime(1970, 1, 1), max_value=datetime(2400, 1, 1), timezones=st.just(UTC)
    ),
    st.integers(min_value=1, max_value=7 * 86400),
)
def test_window_start_contains_the_moment(moment: datetime, window: int) -> None:
    start = window_start(moment, timedelta(seconds=window))
    assert start <= moment < start + timedelta(seconds=window)
    assert start.microsecond == 0
    assert int(start.timestamp()) % window == 0
    assert window_start(start, timedelta(seconds=window)) == start
