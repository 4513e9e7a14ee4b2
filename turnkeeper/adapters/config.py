"""Loading `Settings` and the process configuration from defaults, TOML and environment.

Precedence, lowest first: the defaults of `turnkeeper.application.settings.Settings`, the TOML file
named by ``TURNKEEPER_CONFIG`` (tables and keys as the dotted names, for example
``[ratelimit.rl.message] burst = 5``), then environment variables: ``TURNKEEPER_`` plus
the key in capitals with every dot written as two underscores
(``TURNKEEPER_RATELIMIT__RL__MESSAGE__BURST``). Any mistake raises `ConfigError` with a
one-line message that names the key, so that the command line can print it as it is.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import psycopg
from psycopg.conninfo import conninfo_to_dict

from turnkeeper.adapters.postgres.embedded import DATA_DIR_ENV, DEFAULT_DATA_DIR
from turnkeeper.application.settings import CHOICES, SETTING_KEYS, Settings

#: Prefix of every environment variable turnkeeper reads.
ENV_PREFIX = "TURNKEEPER_"
#: Environment variable naming the TOML configuration file.
ENV_CONFIG_FILE = "TURNKEEPER_CONFIG"
#: Environment variable with the PostgreSQL URL (else the embedded server is used).
ENV_DATABASE_URL = "TURNKEEPER_DATABASE_URL"
#: Environment variable with the data directory (embedded database, generated files).
ENV_DATA_DIR = DATA_DIR_ENV
#: Environment variable with the owner's API token (else one is generated once).
ENV_OWNER_TOKEN = "TURNKEEPER_OWNER_TOKEN"  # noqa: S105 (a variable name, not a secret)
#: Environment variable with the key that signs invocation tokens (else a key file in
#: the data directory, made once); every process of one deployment must share it.
ENV_SIGNING_KEY = "TURNKEEPER_SIGNING_KEY"
_TRUE = frozenset({"true", "1"})
_FALSE = frozenset({"false", "0"})


class ConfigError(Exception):
    """The configuration is invalid; ``str()`` is one line that names the key.

    Args:
        detail: what is wrong, starting with the key.
    """

    def __init__(self, detail: str) -> None:
        super().__init__(f"invalid configuration: {detail}")
        self.detail = detail


@attrs.frozen(kw_only=True)
class Config:
    """Everything a turnkeeper process is configured with.

    Attributes:
        settings: the limits and windows of the application.
        database_url: a PostgreSQL URL, or None for the embedded server.
        data_dir: where the embedded server and generated files live.
        owner_token: the owner's API token, or None to generate one.
        signing_key: the invocation token key, or None to use the data directory's.
        config_file: the TOML file that was read, if any.
    """

    settings: Settings
    database_url: str | None = None
    data_dir: Path = Path(DEFAULT_DATA_DIR)
    owner_token: str | None = None
    signing_key: str | None = None
    config_file: Path | None = None


def env_name(key: str) -> str:
    """The environment variable of a dotted setting key.

    Args:
        key: for example ``ratelimit.rl.message.burst``.

    Returns:
        For example ``TURNKEEPER_RATELIMIT__RL__MESSAGE__BURST``.
    """
    return ENV_PREFIX + key.upper().replace(".", "__")


_ENV_TO_KEY: dict[str, str] = {env_name(key): key for key in SETTING_KEYS}
_FIELDS: dict[str, attrs.Attribute[Any]] = {
    field.name: field for field in attrs.fields(attrs.resolve_types(Settings))
}


def load_config(environ: Mapping[str, str] | None = None) -> Config:
    """Read the whole configuration of a process.

    Args:
        environ: the environment (``os.environ`` when None).

    Returns:
        The validated configuration.

    Raises:
        ConfigError: for an unreadable or unknown TOML key, an unknown
            ``TURNKEEPER_*__*`` variable, or a value of the wrong type or range.
    """
    env = os.environ if environ is None else environ
    return Config(
        settings=load_settings(env),
        database_url=_database_url(env),
        data_dir=Path(_non_empty(env, ENV_DATA_DIR) or DEFAULT_DATA_DIR),
        owner_token=_non_empty(env, ENV_OWNER_TOKEN),
        signing_key=_non_empty(env, ENV_SIGNING_KEY),
        config_file=Path(path) if (path := _non_empty(env, ENV_CONFIG_FILE)) else None,
    )


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Build `Settings` from defaults, the TOML file and the environment.

    Args:
        environ: the environment (``os.environ`` when None).

    Returns:
        The validated settings.

    Raises:
        ConfigError: see `load_config`.
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    config_file = _non_empty(env, ENV_CONFIG_FILE)
    if config_file is not None:
        for key, raw in _read_toml(Path(config_file)).items():
            values[SETTING_KEYS[key]] = _from_toml(key, raw)
    for name, raw in env.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        env_key = _ENV_TO_KEY.get(name)
        if env_key is None:
            # A variable in the settings' form that names no key is a typo, and a typo
            # silently ignored would leave a limit at its default.
            raise ConfigError(f"unknown setting {name} in the environment")
        values[SETTING_KEYS[env_key]] = _from_text(env_key, raw)
    return Settings(**values)


def _database_url(env: Mapping[str, str]) -> str | None:
    """``TURNKEEPER_DATABASE_URL`` when libpq can parse it (checked before any work)."""
    url = _non_empty(env, ENV_DATABASE_URL)
    if url is None:
        return None
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        # libpq's reason quotes the string, which may hold a password: not repeated.
        raise ConfigError(
            f"{ENV_DATABASE_URL} is not a libpq connection string or postgresql:// URI"
        ) from None
    return url


def _non_empty(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            document = tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(
            f"{ENV_CONFIG_FILE} file {str(path)!r} cannot be read ({exc.strerror})"
        ) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"{ENV_CONFIG_FILE} file {str(path)!r} is not valid TOML ({exc})"
        ) from exc
    flat: dict[str, Any] = {}
    _flatten(document, "", flat)
    for key in flat:
        if key not in SETTING_KEYS:
            raise ConfigError(f"unknown key {key} in {str(path)!r}")
    return flat


def _flatten(table: Mapping[str, Any], prefix: str, into: dict[str, Any]) -> None:
    for name, value in table.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict):
            _flatten(value, f"{key}.", into)
        else:
            into[key] = value


def _from_toml(key: str, raw: object) -> int | bool | str | timedelta:
    field = _FIELDS[SETTING_KEYS[key]]
    if CHOICES in field.metadata:
        return _choice(key, field, raw)
    if field.type is bool:
        if not isinstance(raw, bool):
            raise ConfigError(f"{key} must be true or false, got {raw!r}")
        return raw
    # TOML has real integers; a bool is an int to Python but never a valid count.
    if not isinstance(raw, int) or isinstance(raw, bool):
        raise ConfigError(f"{key} must be {_int_wording(field)}, got {raw!r}")
    return _checked_int(key, field, raw, raw)


def _from_text(key: str, raw: str) -> int | bool | str | timedelta:
    field = _FIELDS[SETTING_KEYS[key]]
    text = raw.strip()
    if CHOICES in field.metadata:
        return _choice(key, field, text)
    if field.type is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ConfigError(f"{key} must be true, false, 1 or 0, got {raw!r}")
    try:
        number = int(text, 10)
    except ValueError:
        raise ConfigError(f"{key} must be {_int_wording(field)}, got {raw!r}") from None
    return _checked_int(key, field, number, raw)


def _choice(key: str, field: attrs.Attribute[Any], raw: object) -> str:
    choices: tuple[str, ...] = field.metadata[CHOICES]
    # Levels and formats are words: "INFO" and "info" mean the same.
    if isinstance(raw, str) and raw.strip().lower() in choices:
        return raw.strip().lower()
    raise ConfigError(f"{key} must be one of {', '.join(choices)}, got {raw!r}")


def _checked_int(
    key: str, field: attrs.Attribute[Any], number: int, raw: object
) -> int | timedelta:
    if not _passes(field, number):
        raise ConfigError(f"{key} must be {_int_wording(field)}, got {raw!r}")
    return _typed(field, number)


def _typed(field: attrs.Attribute[Any], number: int) -> int | timedelta:
    # A duration is configured as whole seconds and held as a timedelta.
    return timedelta(seconds=number) if field.type is timedelta else number


def _passes(field: attrs.Attribute[Any], value: int) -> bool:
    if field.validator is None:
        return True
    try:
        field.validator(None, field, _typed(field, value))
    except ValueError:
        return False
    return True


def _int_wording(field: attrs.Attribute[Any]) -> str:
    # The validators of `Settings` are the source of truth for the range; probing them
    # keeps this message right if a key moves between positive and non-negative.
    if _passes(field, 1) and not _passes(field, 0):
        return "a positive integer"
    if _passes(field, 0) and not _passes(field, -1):
        return "a non-negative integer"
    return "an integer"
