"""The pure rules of API tokens: when a use is recorded, which owner tokens a rotation
retires, which labels are refused."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnkeeper.domain.credentials import (
    ApiToken,
    TokenOrigin,
    label_errors,
    last_use_due,
    owner_tokens_to_revoke,
)

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


@pytest.mark.parametrize(
    ("last_used_at", "interval", "due"),
    [
        (None, MINUTE, True),
        (NOW, MINUTE, False),
        (NOW - MINUTE + timedelta(microseconds=1), MINUTE, False),
        (NOW - MINUTE, MINUTE, True),
        (NOW - 2 * MINUTE, MINUTE, True),
        (NOW, timedelta(0), True),
        (None, timedelta(0), True),
    ],
)
def test_a_use_is_recorded_once_the_record_is_an_interval_old(
    last_used_at: datetime | None, interval: timedelta, due: bool
) -> None:
    assert last_use_due(last_used_at, NOW, interval) is due


@given(
    since=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=2)),
    interval=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=1)),
)
def test_within_one_interval_at_most_the_first_use_is_due(
    since: timedelta, interval: timedelta
) -> None:
    recorded = NOW - since
    assert last_use_due(recorded, NOW, interval) is (since >= interval)
    # Recording now makes every later use inside the interval not due.
    later = NOW + interval / 2
    assert last_use_due(NOW, later, interval) is (interval == timedelta(0))


def _token(n: int, origin: TokenOrigin, revoked: bool = False) -> ApiToken:
    return ApiToken(
        id=uuid.UUID(int=n),
        principal_id=uuid.UUID(int=999),
        origin=origin,
        created_at=NOW,
        revoked_at=NOW if revoked else None,
    )


ENV, ISSUED = TokenOrigin.OWNER_ENV, TokenOrigin.ISSUED


@pytest.mark.parametrize(
    ("live", "configured", "retired"),
    [
        ([], None, []),
        ([_token(1, ENV)], 1, []),
        ([_token(1, ENV)], None, [1]),
        ([_token(1, ENV), _token(2, ENV)], 2, [1]),
        ([_token(3, ENV), _token(1, ENV), _token(2, ISSUED)], 2, [1, 3]),
        ([_token(1, ISSUED), _token(2, ISSUED)], None, []),
    ],
)
def test_a_rotation_retires_the_tokens_the_variable_named_before(
    live: list[ApiToken], configured: int | None, retired: list[int]
) -> None:
    configured_id = None if configured is None else uuid.UUID(int=configured)
    assert owner_tokens_to_revoke(live, configured_id) == [uuid.UUID(int=n) for n in retired]


@given(
    origins=st.lists(st.sampled_from([ENV, ISSUED]), max_size=8),
    pick=st.integers(min_value=0, max_value=8),
)
def test_a_rotation_keeps_the_configured_token_and_every_issued_one(
    origins: list[TokenOrigin], pick: int
) -> None:
    live = [_token(i, origin) for i, origin in enumerate(origins)]
    configured = live[pick].id if pick < len(live) else None
    retired = set(owner_tokens_to_revoke(live, configured))
    kept = [t for t in live if t.id not in retired]
    assert configured is None or configured not in retired
    assert all(t.origin is ENV for t in live if t.id in retired)
    assert [t for t in kept if t.origin is ENV and t.id != configured] == []
    assert {t.id for t in live if t.origin is ISSUED} <= {t.id for t in kept}


@pytest.mark.parametrize(
    ("label", "codes"),
    [
        (None, []),
        ("laptop", []),
        ("x" * 10, []),
        ("x" * 11, ["too_long"]),
        ("", ["required"]),
        (" \t", ["required"]),
        ("\u3000", ["required"]),
        ("\x1f", []),
    ],
)
def test_labels(label: str | None, codes: list[str]) -> None:
    errors = label_errors(label, max_chars=10)
    assert [(e.pointer, e.code) for e in errors] == [("/label", c) for c in codes]
