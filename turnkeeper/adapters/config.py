"""Loading `Settings` and the process configuration from defaults, TOML and environment.

Precedence, lowest first: the defaults of `turnkeeper.application.settings.Settings`, the TOML file
named by ``TURNKEEPER_CONFIG`` (tables and keys as the dotted names, for example
``[ratelimit.rl.message] burst = 5``), then environment variables: ``TURNKEEPER_`` plus
the key in capitals with every dot written as two underscores
(``TURNKEEPER_RATELIMIT__RL__MESSAGE__BURST``). Any mistake raises `ConfigError` with a
one-line message that names the key, so that the command line can print it as it is.

Everything the configuration decides is checked here, before a command touches the
database: each value's type and range (`turnkeeper.application.settings.CountRange` and
``DurationRange``), the rules between keys, that the modules a choice needs are
installed, and the length of ``TURNKEEPER_SIGNING_KEY``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from datetime import date, time, timedelta
from pathlib import Path
from typing import Any

import attrs

from turnkeeper.adapters.postgres.embedded import DATA_DIR_ENV, DEFAULT_DATA_DIR
from turnkeeper.adapters.postgres.errors import BadConninfoOption, require_conninfo
from turnkeeper.adapters.tokens import MIN_SIGNING_KEY_BYTES as MIN_SIGNING_KEY_BYTES
from turnkeeper.application.settings import (
    CHOICES,
    SETTING_KEYS,
    CountRange,
    DurationRange,
    Settings,
    SettingsConflict,
)

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
#: The extra that installs the modules of `FAST_EXTRA_MODULES`.
FAST_EXTRA = "fast"
#: Key -> the value of it that needs a module of the ``fast`` extra, which is also the
#: module's name. ``serve`` imports it only once the database is migrated.
FAST_EXTRA_MODULES: dict[str, str] = {"http.parser": "httptools", "http.event_loop": "uvloop"}
#: How an environment value of a count, size or duration is written: ASCII decimal
#: digits alone (`decimal`).
_DECIMAL_DIGITS = re.compile(r"[0-9]+")
#: A table key TOML writes without quotes.
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
#: How the environment writes the boolean: exactly these, in lower case.
_TRUE = frozenset({"true", "1"})
_FALSE = frozenset({"false", "0"})


class ConfigError(Exception):
    """The configuration is invalid; ``str()`` is one line that names the key.

    Public as ``turnkeeper.ConfigError``: `load_settings` and `load_config` raise it,
    and the command line prints it as it is and exits with code 2.

    Args:
        detail: what is wrong, starting with the key.

    Example:
        >>> import turnkeeper
        >>> try:
        ...     turnkeeper.load_settings({"TURNKEEPER_MCP__CHUNK_BYTES": "3"})
        ... except turnkeeper.ConfigError as exc:
        ...     print(exc)
        invalid configuration: mcp.chunk_bytes must be an integer of 4 or more, got '3'
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
            ``TURNKEEPER_*__*`` variable, a value of the wrong type or range, two values
            that conflict, a choice whose module is not installed, or a signing key
            shorter than `MIN_SIGNING_KEY_BYTES`.
    """
    env = os.environ if environ is None else environ
    return Config(
        settings=load_settings(env),
        database_url=_database_url(env),
        data_dir=Path(_non_empty(env, ENV_DATA_DIR) or DEFAULT_DATA_DIR),
        owner_token=_non_empty(env, ENV_OWNER_TOKEN),
        signing_key=_signing_key(env),
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
            raise ConfigError(f"unknown setting {_printable(name)} in the environment")
        values[SETTING_KEYS[env_key]] = _from_text(env_key, raw)
    try:
        settings = Settings(**values)
    except SettingsConflict as exc:
        # Each value passed its own range above; only a rule between keys is left.
        raise ConfigError(str(exc)) from exc
    _require_installed(settings)
    return settings


def _require_installed(settings: Settings) -> None:
    """Refuse a choice whose module is missing, before anything is started with it."""
    for key, module in FAST_EXTRA_MODULES.items():
        if getattr(settings, SETTING_KEYS[key]) == module and not _installed(module):
            raise ConfigError(
                f"{key} is {module}, which needs the {FAST_EXTRA} extra "
                f"(pip install 'turnkeeper[{FAST_EXTRA}]'): {module} is not installed"
            )


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:
        # A module in sys.modules without a spec (a stand-in) can be imported.
        return True


def _signing_key(env: Mapping[str, str]) -> str | None:
    """``TURNKEEPER_SIGNING_KEY`` when it is long enough (never repeated in the error)."""
    key = _non_empty(env, ENV_SIGNING_KEY)
    if key is None:
        return None
    size = len(key.encode("utf-8"))
    if size < MIN_SIGNING_KEY_BYTES:
        raise ConfigError(
            f"{ENV_SIGNING_KEY} must be at least {MIN_SIGNING_KEY_BYTES} bytes, got {size}"
        )
    return key


def _database_url(env: Mapping[str, str]) -> str | None:
    """``TURNKEEPER_DATABASE_URL`` when libpq can parse it (checked before any work)."""
    url = _non_empty(env, ENV_DATABASE_URL)
    if url is None:
        return None
    try:
        require_conninfo(url)
    except BadConninfoOption as exc:
        raise ConfigError(
            f"{ENV_DATABASE_URL} has a bad {exc.option}: must be {exc.expected}"
        ) from None
    except ValueError:
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
    except ValueError as exc:
        # TOMLDecodeError, UnicodeDecodeError (tomllib decodes UTF-8) and the ValueError
        # of an integer beyond Python's limit on digits, which tomllib lets through.
        raise ConfigError(
            f"{ENV_CONFIG_FILE} file {str(path)!r} is not valid TOML ({_toml_reason(exc)})"
        ) from exc
    flat: dict[str, Any] = {}
    _flatten(document, "", flat)
    for key in flat:
        if key not in SETTING_KEYS:
            raise ConfigError(f"unknown key {_printable(key)} in {str(path)!r}")
    return flat


def _toml_reason(exc: ValueError) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 at byte {exc.start}"
    # Python's limit on an integer's digits ends with advice to programmers after a
    # semicolon; tomllib's own messages hold none.
    return str(exc).split(";", 1)[0]


def _flatten(table: Mapping[str, Any], prefix: str, into: dict[str, Any]) -> None:
    for name, value in table.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict) and key not in SETTING_KEYS and (value or _holds_keys(key)):
            _flatten(value, f"{key}.", into)
        else:
            # A table at a key is a wrong value; an empty table that holds no key is an
            # unknown one (a misspelt table with its keys commented out).
            into[key] = value


def _holds_keys(table: str) -> bool:
    """Whether some setting lives in this table (or a table below it)."""
    return any(key.startswith(f"{table}.") for key in SETTING_KEYS)


def _printable(name: str) -> str:
    """A key or variable name as one line: escaped as a Python string, without quotes."""
    return repr(name)[1:-1]


def _shown(raw: object) -> str:
    """A value of the file as an error message prints it: as TOML writes it, on one line.

    Strings are basic strings (double quotes, escapes), table keys bare where TOML
    allows it; booleans, dates, times, arrays and inline tables print as TOML, not as
    Python.
    """
    if isinstance(raw, str):
        return json.dumps(raw, ensure_ascii=False)
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, date | time):
        return raw.isoformat()
    if isinstance(raw, list):
        return f"[{', '.join(_shown(item) for item in raw)}]"
    if isinstance(raw, dict):
        members = (f"{_toml_key(str(k))} = {_shown(v)}" for k, v in raw.items())
        return "{" + ", ".join(members) + "}"
    return repr(raw)


def _toml_key(key: str) -> str:
    """A table key as TOML writes it: bare when it can be, else a quoted string."""
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)


def _from_toml(key: str, raw: object) -> int | bool | str | timedelta:
    field = _FIELDS[SETTING_KEYS[key]]
    if CHOICES in field.metadata:
        return _choice(key, field, raw, _shown)
    if field.type is bool:
        if not isinstance(raw, bool):
            raise ConfigError(f"{key} must be true or false, got {_shown(raw)}")
        return raw
    bounds = _range(field)
    # TOML has real integers; a bool is an int to Python but never a valid count.
    if not isinstance(raw, int) or isinstance(raw, bool):
        raise ConfigError(f"{key} must be {_minimum_wording(bounds)}, got {_shown(raw)}")
    return _checked_number(key, bounds, raw, raw)


def _from_text(key: str, raw: str) -> int | bool | str | timedelta:
    field = _FIELDS[SETTING_KEYS[key]]
    if CHOICES in field.metadata:
        return _choice(key, field, raw, repr)
    if field.type is bool:
        if raw in _TRUE:
            return True
        if raw in _FALSE:
            return False
        raise ConfigError(f"{key} must be true, false, 1 or 0, got {raw!r}")
    bounds = _range(field)
    value = decimal(raw, bounds.maximum)
    if value is None:
        raise ConfigError(f"{key} must be {_minimum_wording(bounds)}, got {raw!r}")
    return _checked_number(key, bounds, value, raw)


def decimal(text: str, maximum: int) -> int | None:
    """A whole number written as the environment writes one: ASCII decimal digits alone.

    Command-line numbers (``--workers``, ``--port``) are read by the same rule.

    Args:
        text: the value as written.
        maximum: the largest value of interest.

    Returns:
        The number; ``maximum + 1`` for any number above `maximum` (Python converts at
        most a few thousand digits to an int, but a number with more significant digits
        than `maximum` is above it whatever they are); None when `text` is not digits
        alone (``int`` also reads spaces, a sign, ``_`` and other scripts' digits).
    """
    if _DECIMAL_DIGITS.fullmatch(text) is None:
        return None
    significant = text.lstrip("0") or "0"
    if len(significant) > len(str(maximum)):
        return maximum + 1
    return int(significant)


def _choice(
    key: str, field: attrs.Attribute[Any], raw: object, shown: Callable[[object], str]
) -> str:
    """The choice a value names; `shown` prints a refused one (as the file or the env)."""
    choices: tuple[str, ...] = field.metadata[CHOICES]
    # Levels and formats are words: "INFO" and "info" mean the same.
    if isinstance(raw, str) and raw.strip().lower() in choices:
        return raw.strip().lower()
    raise ConfigError(f"{key} must be one of {', '.join(choices)}, got {shown(raw)}")


def _range(field: attrs.Attribute[Any]) -> CountRange | DurationRange:
    """The range of a count or duration attribute: its validator, which holds it."""
    validator = field.validator
    if isinstance(validator, CountRange | DurationRange):
        return validator
    raise TypeError(f"Settings.{field.name} has no CountRange or DurationRange")


def _checked_number(
    key: str, bounds: CountRange | DurationRange, number: int, raw: object
) -> int | timedelta:
    # The message names the bound the value misses, so that the reader can fix it.
    if number < bounds.minimum:
        raise ConfigError(f"{key} must be {_minimum_wording(bounds)}, got {raw!r}")
    if number > bounds.maximum:
        unit = " seconds" if isinstance(bounds, DurationRange) else ""
        raise ConfigError(f"{key} must be at most {bounds.maximum}{unit}, got {raw!r}")
    # A duration is configured as whole seconds and held as a timedelta.
    return timedelta(seconds=number) if isinstance(bounds, DurationRange) else number


def _minimum_wording(bounds: CountRange | DurationRange) -> str:
    if bounds.minimum == 0:
        return "a non-negative integer"
    if bounds.minimum == 1:
        return "a positive integer"
    return f"an integer of {bounds.minimum} or more"
