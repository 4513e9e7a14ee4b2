"""Loading settings from defaults, a TOML file and the environment."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from turnkeeper.adapters.config import ConfigError, env_name, load_config, load_settings
from turnkeeper.application.settings import SETTING_KEYS, Settings


def test_defaults_apply_without_file_or_environment() -> None:
    assert load_settings({}) == Settings()


def test_every_key_has_an_environment_variable_of_the_documented_form() -> None:
    assert env_name("ratelimit.rl.message.burst") == "TURNKEEPER_RATELIMIT__RL__MESSAGE__BURST"
    assert all(env_name(key).startswith("TURNKEEPER_") for key in SETTING_KEYS)


@pytest.mark.parametrize(
    ("variable", "raw", "attribute", "expected"),
    [
        ("TURNKEEPER_RATELIMIT__RL__MESSAGE__BURST", "5", "rl_message_burst", 5),
        ("TURNKEEPER_RATELIMIT__RL__MESSAGE__PER_MINUTE", "0", "rl_message_per_minute", 0),
        ("TURNKEEPER_DATABASE__TX_RETRY_MAX", "3", "tx_retry_max", 3),
        ("TURNKEEPER_DATABASE__TX_RETRY_MAX", "007", "tx_retry_max", 7),
        ("TURNKEEPER_AGENT__CANCEL_GRACE", "30", "cancel_grace", timedelta(seconds=30)),
        ("TURNKEEPER_HTTP__MAX_BODY_BYTES", "2048", "max_body_bytes", 2048),
        (
            "TURNKEEPER_FRESHNESS__REQUIRED_FOR_AGENTS",
            "false",
            "freshness_required_for_agents",
            False,
        ),
        ("TURNKEEPER_FRESHNESS__REQUIRED_FOR_AGENTS", "0", "freshness_required_for_agents", False),
        (
            "TURNKEEPER_FRESHNESS__REQUIRED_FOR_AGENTS",
            "true",
            "freshness_required_for_agents",
            True,
        ),
        ("TURNKEEPER_FRESHNESS__REQUIRED_FOR_AGENTS", "1", "freshness_required_for_agents", True),
    ],
)
def test_environment_values_are_parsed_by_type(
    variable: str, raw: str, attribute: str, expected: object
) -> None:
    assert getattr(load_settings({variable: raw}), attribute) == expected


@pytest.mark.parametrize(
    ("variable", "raw", "message"),
    [
        (
            "TURNKEEPER_RATELIMIT__RL__MESSAGE__BURST",
            "x",
            "invalid configuration: ratelimit.rl.message.burst must be a positive integer, got 'x'",
        ),
        (
            "TURNKEEPER_RATELIMIT__RL__MESSAGE__BURST",
            "0",
            "invalid configuration: ratelimit.rl.message.burst must be a positive integer, got '0'",
        ),
        (
            "TURNKEEPER_DATABASE__TX_RETRY_MAX",
            "-1",
            "invalid configuration: database.tx_retry_max must be a non-negative integer, got '-1'",
        ),
        (
            "TURNKEEPER_HTTP__MAX_BODY_BYTES",
            "1.5",
            "invalid configuration: http.max_body_bytes must be a positive integer, got '1.5'",
        ),
        (
            "TURNKEEPER_FRESHNESS__REQUIRED_FOR_AGENTS",
            "yes",
            "invalid configuration: freshness.required_for_agents must be true, false, 1 or 0, "
            "got 'yes'",
        ),
        (
            "TURNKEEPER_RATELIMIT__RL__MESAGE__BURST",
            "5",
            "invalid configuration: unknown setting TURNKEEPER_RATELIMIT__RL__MESAGE__BURST "
            "in the environment",
        ),
    ],
)
def test_invalid_environment_values_raise_one_line_naming_the_key(
    variable: str, raw: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({variable: raw})
    assert str(caught.value) == message
    assert "\n" not in str(caught.value)


#: Numbers the environment refuses though `int()` reads them: spaces, a sign, a newline,
#: an underscore, digits of another script (ARABIC-INDIC DIGIT THREE).
LOOSE_NUMBERS = [" 3", "3 ", " 3 ", "+3", "3\n", "\t3", "1_000", "\u0663", "3.0", "0x3"]
#: Booleans the environment refuses: only true, false, 1 and 0 in lower case are read.
LOOSE_BOOLEANS = ["TRUE", "True", "FALSE", "False", " true", "false ", "01", "yes", ""]


@pytest.mark.parametrize(
    ("key", "raw", "wording"),
    [
        *[("database.tx_retry_max", raw, "a non-negative integer") for raw in LOOSE_NUMBERS],
        *[("jobs.interval", raw, "a positive integer") for raw in LOOSE_NUMBERS],
        *[("metrics.enabled", raw, "true, false, 1 or 0") for raw in LOOSE_BOOLEANS],
    ],
)
def test_environment_numbers_and_booleans_have_only_their_documented_form(
    key: str, raw: str, wording: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({env_name(key): raw})
    assert str(caught.value) == f"invalid configuration: {key} must be {wording}, got {raw!r}"


def test_a_file_that_is_not_utf8_is_not_valid_toml(tmp_path: Path) -> None:
    path = tmp_path / "turnkeeper.toml"
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError) as caught:
        load_settings({"TURNKEEPER_CONFIG": str(path)})
    assert str(caught.value) == (
        f"invalid configuration: TURNKEEPER_CONFIG file {str(path)!r} is not valid TOML "
        "(not UTF-8 at byte 0)"
    )


def test_a_file_with_an_integer_python_cannot_read_is_not_valid_toml(tmp_path: Path) -> None:
    # tomllib leaves Python's limit on the digits of an int as a plain ValueError.
    path = tmp_path / "turnkeeper.toml"
    path.write_text("[jobs]\ninterval = " + "9" * 5000 + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings({"TURNKEEPER_CONFIG": str(path)})
    line = str(caught.value)
    assert line.startswith(
        f"invalid configuration: TURNKEEPER_CONFIG file {str(path)!r} is not valid TOML ("
    )
    assert "\n" not in line


def _write(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "turnkeeper.toml"
    path.write_text(text, encoding="utf-8")
    return {"TURNKEEPER_CONFIG": str(path)}


def test_toml_tables_follow_the_dotted_keys(tmp_path: Path) -> None:
    env = _write(
        tmp_path,
        "[ratelimit.rl.message]\nburst = 5\nper_minute = 60\n"
        "[freshness]\nrequired_for_agents = false\n"
        "[http]\nmax_body_bytes = 4096\n",
    )
    settings = load_settings(env)
    assert (settings.rl_message_burst, settings.rl_message_per_minute) == (5, 60)
    assert settings.freshness_required_for_agents is False
    assert settings.max_body_bytes == 4096


def test_dotted_keys_in_toml_are_the_same_tables(tmp_path: Path) -> None:
    env = _write(tmp_path, "ratelimit.rl.message.burst = 7\n")
    assert load_settings(env).rl_message_burst == 7


def test_environment_wins_over_the_file(tmp_path: Path) -> None:
    env = _write(tmp_path, "[ratelimit.rl.message]\nburst = 5\n")
    env["TURNKEEPER_RATELIMIT__RL__MESSAGE__BURST"] = "9"
    assert load_settings(env).rl_message_burst == 9


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[ratelimit.rl.message]\nbrust = 5\n",
            "invalid configuration: unknown key ratelimit.rl.message.brust in ",
        ),
        (
            "[ratelimit.rl.message]\nburst = 'x'\n",
            'invalid configuration: ratelimit.rl.message.burst must be a positive integer, got "x"',
        ),
        (
            "[ratelimit.rl.message]\nburst = true\n",
            "invalid configuration: ratelimit.rl.message.burst must be a positive integer, "
            "got true",
        ),
        # Values are printed as TOML writes them, never as Python objects.
        (
            "[http]\nmax_body_bytes = 1979-05-27\n",
            "invalid configuration: http.max_body_bytes must be a positive integer, got 1979-05-27",
        ),
        (
            "[http]\nmax_body_bytes = 1979-05-27T07:32:00Z\n",
            "invalid configuration: http.max_body_bytes must be a positive integer, "
            "got 1979-05-27T07:32:00+00:00",
        ),
        (
            "[http]\nmax_body_bytes = 07:32:00\n",
            "invalid configuration: http.max_body_bytes must be a positive integer, got 07:32:00",
        ),
        (
            "[http]\nmax_body_bytes = [1, false, 'x', {a = 2.5}]\n",
            "invalid configuration: http.max_body_bytes must be a positive integer, "
            'got [1, false, "x", {a = 2.5}]',
        ),
        # Keys TOML cannot write bare are quoted, and strings are basic strings.
        (
            '[http]\nmax_body_bytes = {"a b" = 1, "c.d" = "tab\\there"}\n',
            "invalid configuration: http.max_body_bytes must be a positive integer, "
            'got {"a b" = 1, "c.d" = "tab\\there"}',
        ),
        (
            "[log]\nlevel = 1979-05-27\n",
            "invalid configuration: log.level must be one of ",
        ),
        (
            "[freshness]\nrequired_for_agents = 1\n",
            "invalid configuration: freshness.required_for_agents must be true or false, got 1",
        ),
        ("[http\n", "invalid configuration: TURNKEEPER_CONFIG file "),
        # An empty table adds no key, yet a misspelt one must not pass unseen.
        ("[nosuch]\n", "invalid configuration: unknown key nosuch in "),
        ("[ratelimit.rl.mesage]\n", "invalid configuration: unknown key ratelimit.rl.mesage in "),
        (
            "[message]\nmax_content_bytes = {}\n",
            "invalid configuration: message.max_content_bytes must be a positive integer, got {}",
        ),
        (
            "[ratelimit.rl.message.burst]\n",
            "invalid configuration: ratelimit.rl.message.burst must be a positive integer, got {}",
        ),
        # A key is printed escaped, as values are: the line stays one line.
        (
            '[message]\n"max\\ncontent" = 1\n',
            "invalid configuration: unknown key message.max\\ncontent in ",
        ),
    ],
)
def test_invalid_files_raise_one_line_naming_the_key(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(_write(tmp_path, text))
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_an_empty_table_of_known_keys_is_accepted(tmp_path: Path) -> None:
    # A table whose keys are all commented out is a common, valid file.
    assert load_settings(_write(tmp_path, "[message]\n[ratelimit.rl]\n")) == Settings()


def test_an_unknown_variable_is_named_on_one_line() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({"TURNKEEPER_MESSAGE__MAX\nCONTENT": "1"})
    assert "\n" not in str(caught.value)
    assert "TURNKEEPER_MESSAGE__MAX\\nCONTENT" in str(caught.value)


@pytest.mark.parametrize(
    ("url", "option"),
    [
        ("postgresql://u:pw@localhost/db?sslmode=bogus", "sslmode"),
        ("postgresql://u:pw@localhost:99999/db", "port"),
        ("postgresql://u:pw@localhost:0/db", "port"),
        ("postgresql://u:pw@a:5432,b:x/db", "port"),
        ("postgresql://u:pw@localhost/db?connect_timeout=abc", "connect_timeout"),
        ("postgresql://u:pw@localhost/db?target_session_attrs=nope", "target_session_attrs"),
        ("postgresql://u:pw@localhost/db?gssencmode=maybe", "gssencmode"),
        ("postgresql://u:pw@localhost/db?channel_binding=always", "channel_binding"),
        ("postgresql://u:pw@localhost/db?load_balance_hosts=roundrobin", "load_balance_hosts"),
        ("host=localhost sslmode=bogus password=secret-pw", "sslmode"),
        # As libpq reads them: ASCII digits, C white space, one port per host or one for all.
        ("host=localhost port=\u0665\u0665\u0664\u0663", "port"),
        ("host=localhost port='5432\u00a0'", "port"),
        ("host=localhost port=' '", "port"),
        ("host=localhost port=5432,5433", "port"),
    ],
)
def test_a_database_url_with_a_bad_option_value_is_a_configuration_error(
    url: str, option: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config({"TURNKEEPER_DATABASE_URL": url})
    message = str(caught.value)
    assert message.startswith(f"invalid configuration: TURNKEEPER_DATABASE_URL has a bad {option}")
    assert "pw" not in message


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:pw@localhost:5433/db?sslmode=verify-full&connect_timeout=5",
        "postgresql://u:pw@a:5432,b/db?target_session_attrs=prefer-standby",
        "postgresql:///db?host=/tmp&port=5432&gssencmode=disable&channel_binding=prefer",
        "host=a,b port=5432,5433 dbname=db load_balance_hosts=random",
        "postgresql://u@localhost/db?connect_timeout=-1",
        "host=a,b,c port=5432,,5434 dbname=db",
        "host=localhost port=' 5432 '",
    ],
)
def test_a_database_url_with_good_option_values_is_accepted(url: str) -> None:
    assert load_config({"TURNKEEPER_DATABASE_URL": url}).database_url == url


def test_a_missing_file_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be read"):
        load_settings({"TURNKEEPER_CONFIG": str(tmp_path / "absent.toml")})


def test_process_configuration_reads_database_data_dir_and_owner_token() -> None:
    config = load_config(
        {
            "TURNKEEPER_DATABASE_URL": "postgresql://localhost/tk",
            "TURNKEEPER_DATA_DIR": "/var/lib/tk",
            "TURNKEEPER_OWNER_TOKEN": "tk_secret",
        }
    )
    assert config.database_url == "postgresql://localhost/tk"
    assert config.data_dir == Path("/var/lib/tk")
    assert config.owner_token == "tk_secret"


def test_process_configuration_defaults_to_the_embedded_database_in_dot_turnkeeper() -> None:
    config = load_config({})
    assert config.database_url is None
    assert config.data_dir == Path(".turnkeeper")
    assert config.owner_token is None
    assert config.settings == Settings()


@pytest.mark.parametrize(
    ("variable", "raw", "attribute", "expected"),
    [
        ("TURNKEEPER_METRICS__ENABLED", "false", "metrics_enabled", False),
        ("TURNKEEPER_LOG__LEVEL", "DEBUG", "log_level", "debug"),
        ("TURNKEEPER_LOG__LEVEL", " warning ", "log_level", "warning"),
        ("TURNKEEPER_LOG__FORMAT", "console", "log_format", "console"),
        ("TURNKEEPER_LOG__FORMAT", "json", "log_format", "json"),
    ],
)
def test_operations_keys_come_from_the_environment(
    variable: str, raw: str, attribute: str, expected: object
) -> None:
    assert getattr(load_settings({variable: raw}), attribute) == expected


def test_operations_keys_have_their_documented_defaults() -> None:
    settings = Settings()
    assert (settings.metrics_enabled, settings.log_level, settings.log_format) == (
        True,
        "info",
        "auto",
    )


@pytest.mark.parametrize(
    ("variable", "raw", "message"),
    [
        (
            "TURNKEEPER_LOG__LEVEL",
            "loud",
            "invalid configuration: log.level must be one of debug, info, warning, error, "
            "got 'loud'",
        ),
        (
            "TURNKEEPER_LOG__FORMAT",
            "xml",
            "invalid configuration: log.format must be one of auto, json, console, got 'xml'",
        ),
    ],
)
def test_an_unknown_level_or_format_names_the_key(variable: str, raw: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings({variable: raw})
    assert str(raised.value) == message


def test_operations_keys_come_from_toml(tmp_path: Path) -> None:
    path = tmp_path / "turnkeeper.toml"
    path.write_text('[metrics]\nenabled = false\n[log]\nlevel = "error"\nformat = "json"\n')
    settings = load_settings({"TURNKEEPER_CONFIG": str(path)})
    assert (settings.metrics_enabled, settings.log_level, settings.log_format) == (
        False,
        "error",
        "json",
    )
    path.write_text("[log]\nlevel = 3\n")
    with pytest.raises(ConfigError, match=r"log\.level must be one of"):
        load_settings({"TURNKEEPER_CONFIG": str(path)})
