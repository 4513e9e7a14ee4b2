"""``http.shutdown_timeout``: its default, its sources and the values it refuses."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from turnkeeper.adapters.config import ConfigError, env_name, load_settings
from turnkeeper.application.settings import SETTING_KEYS, Settings

KEY = "http.shutdown_timeout"
VARIABLE = "TURNKEEPER_HTTP__SHUTDOWN_TIMEOUT"
#: The documented default, in seconds.
DEFAULT_SECONDS = 30


def _write(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "turnkeeper.toml"
    path.write_text(text, encoding="utf-8")
    return {"TURNKEEPER_CONFIG": str(path)}


def test_the_key_names_the_setting_and_has_the_documented_variable() -> None:
    assert SETTING_KEYS[KEY] == "shutdown_timeout"
    assert env_name(KEY) == VARIABLE


def test_the_default_is_thirty_seconds() -> None:
    assert Settings().shutdown_timeout == timedelta(seconds=DEFAULT_SECONDS)
    assert load_settings({}).shutdown_timeout == timedelta(seconds=DEFAULT_SECONDS)


@pytest.mark.parametrize(("raw", "seconds"), [("5", 5), ("1", 1), ("120", 120)])
def test_the_environment_gives_whole_seconds(raw: str, seconds: int) -> None:
    assert load_settings({VARIABLE: raw}).shutdown_timeout == timedelta(seconds=seconds)


def test_the_toml_file_gives_whole_seconds_under_http(tmp_path: Path) -> None:
    env = _write(tmp_path, "[http]\nshutdown_timeout = 7\n")
    assert load_settings(env).shutdown_timeout == timedelta(seconds=7)


def test_the_environment_wins_over_the_file(tmp_path: Path) -> None:
    env = _write(tmp_path, "[http]\nshutdown_timeout = 7\n")
    env[VARIABLE] = "3"
    assert load_settings(env).shutdown_timeout == timedelta(seconds=3)


@pytest.mark.parametrize("raw", ["0", "-1", "1.5", "x", "", " 1 "])
def test_an_invalid_environment_value_is_one_line_naming_the_key(raw: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({VARIABLE: raw})
    assert str(caught.value) == (
        f"invalid configuration: {KEY} must be a positive integer, got {raw!r}"
    )


@pytest.mark.parametrize(
    ("value", "shown"), [("0", "0"), ("-2", "-2"), ("'x'", '"x"'), ("true", "true"), ("1.5", "1.5")]
)
def test_an_invalid_file_value_is_one_line_naming_the_key(
    tmp_path: Path, value: str, shown: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(_write(tmp_path, f"[http]\nshutdown_timeout = {value}\n"))
    assert str(caught.value) == (
        f"invalid configuration: {KEY} must be a positive integer, got {shown}"
    )


@pytest.mark.parametrize("value", [timedelta(0), timedelta(seconds=-1)])
def test_settings_refuse_a_timeout_that_is_not_positive(value: timedelta) -> None:
    with pytest.raises(ValueError, match="shutdown_timeout must be positive"):
        Settings(shutdown_timeout=value)
