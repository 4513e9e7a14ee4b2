"""`Settings` built by a program hold the same ranges as the configuration.

A program that builds `turnkeeper.Settings` itself gives durations as `timedelta`
(fractions of a second included) and gets a ValueError naming the attribute for a value
the configuration would refuse: above the longest duration (which `timedelta` could
hold but `now + duration` could not), above the largest count, or a pool whose
minimum exceeds its maximum.
"""

from __future__ import annotations

from datetime import timedelta

import attrs
import pytest

from turnkeeper.application.settings import (
    MAX_COUNT,
    MAX_DURATION_SECONDS,
    MAX_REQUEST_TIMEOUT_SECONDS,
    CountRange,
    DurationRange,
    Settings,
    SettingsConflict,
)

#: A duration far below a second, as tests and programs give heartbeats.
SUB_SECOND = timedelta(milliseconds=50)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"jobs_interval": timedelta(seconds=MAX_DURATION_SECONDS + 1)}, "jobs_interval"),
        (
            {"request_timeout": timedelta(seconds=MAX_REQUEST_TIMEOUT_SECONDS + 1)},
            "request_timeout",
        ),
        ({"http_gc_threshold": MAX_COUNT + 1}, "http_gc_threshold"),
        ({"mcp_chunk_bytes": 3}, "mcp_chunk_bytes must be at least 4"),
        ({"pool_min_size": 11}, "database.pool_min_size must not exceed"),
        ({"pool_min_size": 3, "pool_max_size": 2}, "database.pool_min_size must not exceed"),
    ],
)
def test_values_out_of_range_are_value_errors(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Settings(**changes)  # type: ignore[arg-type]


def test_the_rules_between_keys_name_the_key() -> None:
    with pytest.raises(SettingsConflict) as caught:
        attrs.evolve(Settings(pool_max_size=4), pool_min_size=5)
    assert (caught.value.key, caught.value.detail) == (
        "database.pool_min_size",
        "must not exceed database.pool_max_size (4), got 5",
    )


def test_every_count_and_duration_has_a_range_validator() -> None:
    for field in attrs.fields(attrs.resolve_types(Settings)):
        if field.type is int:
            assert isinstance(field.validator, CountRange), field.name
        elif field.type is timedelta:
            assert isinstance(field.validator, DurationRange), field.name
    # Durations a program gives need not be whole seconds.
    settings = Settings(stream_heartbeat=SUB_SECOND, token_last_used_interval=timedelta(0))
    assert settings.stream_heartbeat == SUB_SECOND


@pytest.mark.parametrize(("default", "maximum", "size"), [(50, 500, 50), (10, 5, 5), (5, 5, 5)])
def test_a_page_without_a_limit_never_holds_more_than_page_max_limit(
    default: int, maximum: int, size: int
) -> None:
    # An audit: with page.default_limit above page.max_limit a page without a limit held
    # more items than any limit a client may name.
    settings = Settings(page_default_limit=default, page_max_limit=maximum)
    assert settings.default_page_size == size
    assert settings.page_size(None) == size
