"""Every count and duration is refused outside its documented range, naming its bound.

The ranges come from the key table of docs/configuration.md (`tests.support.config_doc`):
below its minimum a key's message says the minimum, above its maximum it says the
maximum, from the environment and from the TOML file alike, and never with a stack
trace (a duration too long for `timedelta` raised OverflowError).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from tests.support.config_doc import (
    DOCUMENTED_MAXIMUM,
    DocumentedKey,
    environment,
    numeric_keys,
)
from turnkeeper.adapters.config import ConfigError, load_settings
from turnkeeper.application import settings
from turnkeeper.application.settings import SETTING_KEYS, Settings

#: How a message names the lowest value of a range, by its minimum.
MINIMUM_WORDING = {0: "a non-negative integer", 1: "a positive integer"}
#: Far above every maximum, and above what `timedelta` and a C int can hold.
HUGE = "99999999999999999999"
#: More digits than Python converts to an int (``sys.get_int_max_str_digits``).
TOO_MANY_DIGITS = "9" * 5000
#: The longest ``database.request_timeout``: PostgreSQL's ``statement_timeout`` is
#: milliseconds in a 32-bit integer.
REQUEST_TIMEOUT_MAXIMUM = (2**31 - 1) // 1000

NUMERIC = numeric_keys()


def _ids(row: DocumentedKey) -> str:
    return row.key


def minimum_wording(minimum: int) -> str:
    """The words of a message for a value below `minimum`."""
    return MINIMUM_WORDING.get(minimum, f"an integer of {minimum} or more")


def maximum_wording(row: DocumentedKey) -> str:
    """The words of a message for a value above the key's maximum."""
    unit = " seconds" if row.is_duration else ""
    return f"at most {row.maximum}{unit}"


def configured(row: DocumentedKey, number: int) -> object:
    """The attribute value a configured number gives."""
    return timedelta(seconds=number) if row.is_duration else number


def _write(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "turnkeeper.toml"
    path.write_text(text, encoding="utf-8")
    return {"TURNKEEPER_CONFIG": str(path)}


@pytest.mark.parametrize("row", NUMERIC, ids=_ids)
def test_below_its_minimum_a_key_names_its_minimum(row: DocumentedKey, tmp_path: Path) -> None:
    assert row.minimum is not None
    below = row.minimum - 1
    wording = minimum_wording(row.minimum)
    with pytest.raises(ConfigError) as from_environment:
        load_settings({row.variable: str(below)})
    assert str(from_environment.value) == (
        f"invalid configuration: {row.key} must be {wording}, got {str(below)!r}"
    )
    with pytest.raises(ConfigError) as from_file:
        load_settings(_write(tmp_path, f"{row.key} = {below}\n"))
    assert (
        str(from_file.value) == f"invalid configuration: {row.key} must be {wording}, got {below}"
    )
    attribute = SETTING_KEYS[row.key]
    expected = configured(row, row.minimum)
    assert getattr(load_settings(environment(row, str(row.minimum))), attribute) == expected


@pytest.mark.parametrize("row", NUMERIC, ids=_ids)
def test_above_its_maximum_a_key_names_its_maximum(row: DocumentedKey, tmp_path: Path) -> None:
    assert row.maximum is not None
    above = row.maximum + 1
    for raw in (str(above), HUGE, TOO_MANY_DIGITS):
        with pytest.raises(ConfigError) as from_environment:
            load_settings({row.variable: raw})
        assert str(from_environment.value) == (
            f"invalid configuration: {row.key} must be {maximum_wording(row)}, got {raw!r}"
        )
    with pytest.raises(ConfigError) as from_file:
        load_settings(_write(tmp_path, f"{row.key} = {above}\n"))
    assert str(from_file.value) == (
        f"invalid configuration: {row.key} must be {maximum_wording(row)}, got {above}"
    )
    attribute = SETTING_KEYS[row.key]
    expected = configured(row, row.maximum)
    assert getattr(load_settings(environment(row, str(row.maximum))), attribute) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[jobs]\ninterval = 99999999999999\n",
            "invalid configuration: jobs.interval must be at most 2147483647 seconds, "
            "got 99999999999999",
        ),
        (
            "[database]\nrequest_timeout = 2147484\n",
            "invalid configuration: database.request_timeout must be at most 2147483 seconds, "
            "got 2147484",
        ),
        (
            "[http]\ngc_threshold = 2147483648\n",
            "invalid configuration: http.gc_threshold must be at most 2147483647, got 2147483648",
        ),
    ],
)
def test_the_audited_values_out_of_range_are_one_line(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(_write(tmp_path, text))
    assert str(caught.value) == message


def test_the_documented_maxima_are_those_of_the_code() -> None:
    assert settings.MAX_COUNT == DOCUMENTED_MAXIMUM
    assert settings.MAX_DURATION_SECONDS == DOCUMENTED_MAXIMUM
    assert settings.MAX_REQUEST_TIMEOUT_SECONDS == REQUEST_TIMEOUT_MAXIMUM
    rows = {row.key: row for row in NUMERIC}
    assert rows["database.request_timeout"].maximum == REQUEST_TIMEOUT_MAXIMUM
    # Every count and duration has a row with a range, so the tables above miss none.
    defaults = Settings()
    assert set(rows) == {
        key
        for key, attribute in SETTING_KEYS.items()
        if not isinstance(getattr(defaults, attribute), bool | str)
    }


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"TURNKEEPER_DATABASE__POOL_MIN_SIZE": "20"},
            "invalid configuration: database.pool_min_size must not exceed "
            "database.pool_max_size (10), got 20",
        ),
        (
            {
                "TURNKEEPER_DATABASE__POOL_MIN_SIZE": "5",
                "TURNKEEPER_DATABASE__POOL_MAX_SIZE": "4",
            },
            "invalid configuration: database.pool_min_size must not exceed "
            "database.pool_max_size (4), got 5",
        ),
    ],
)
def test_a_pool_minimum_above_its_maximum_is_refused(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(environ)
    assert str(caught.value) == message
    equal = {"TURNKEEPER_DATABASE__POOL_MIN_SIZE": "4", "TURNKEEPER_DATABASE__POOL_MAX_SIZE": "4"}
    assert (load_settings(equal).pool_min_size, load_settings(equal).pool_max_size) == (4, 4)
