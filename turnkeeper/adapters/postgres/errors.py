"""The one place where psycopg errors become application errors.

Services never see a driver exception: everything the PostgreSQL adapter runs is wrapped
in `wrap_errors()`, which translates

- deadlocks, serialization failures and lock timeouts into `RetriableConflict` (the
  transactor reruns the whole unit);
- the idempotency race on ``messages_author_client_msg_id_key`` (and the first-bucket
  race on ``rate_buckets_pkey``, the first-grant race on
  ``grants_principal_resource_key``) into `RetriableConflict`: the rerun finds the row
  the winner committed and replays (or changes) it;
- a prepared statement gone from the connection (26000, after a DEALLOCATE ALL a write
  unit's link did not send; see `turnkeeper.adapters.postgres.executor`) into
  `RetriableConflict`: the link forgot its names, and the rerun prepares them again;
- every other unique violation into `DuplicateKey` naming its constraint;
- lost or refused connections, an exhausted or closed pool, and a statement cancelled by
  ``statement_timeout`` (see `turnkeeper.adapters.postgres.pool`) into `StoreUnavailable`;
- a table, column, function or type the statements name but the database lacks (a
  database not migrated, or migrated to an older version: sqlc checks every statement
  against the migrations) into `StoreUnavailable` saying so (`/readyz` answers
  ``migrations_pending`` then).

Anything else propagates unchanged: it is a bug, not a condition to handle. A connection
string libpq cannot parse, or one whose port, timeout or mode libpq would refuse only when
it connects, is the caller's mistake, refused by `require_conninfo` before anything
connects.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from turnkeeper.application.errors import DuplicateKey, RetriableConflict, StoreUnavailable

#: Unique constraints whose violation means "a concurrent unit inserted the same key
#: first": rerunning the unit reads the winner's row instead of inserting.
RACE_CONSTRAINTS = frozenset(
    {
        "messages_author_client_msg_id_key",
        "rate_buckets_pkey",
        "runs_one_active_per_thread",
        "grants_principal_resource_key",
    }
)

#: SQLSTATEs of the server refusing or dropping connections (class 08, and the shutdown
#: family of class 57), of a database that cannot be used right now, and of a statement
#: cancelled by ``statement_timeout`` (57014: the database is too slow for
#: ``database.request_timeout``).
_UNAVAILABLE_STATES = frozenset({"57P01", "57P02", "57P03", "3D000", "57014"})

#: A schema older than the statements: undefined table, column, function, object.
_SCHEMA_BEHIND = (
    pg_errors.UndefinedTable,
    pg_errors.UndefinedColumn,
    pg_errors.UndefinedFunction,
    pg_errors.UndefinedObject,
)
#: What a `StoreUnavailable` of a schema behind says (a log line; never shown to clients).
SCHEMA_BEHIND = "the database schema is not current: run the migrations (turnkeeper migrate)"

_RETRIABLE = (
    pg_errors.DeadlockDetected,
    pg_errors.SerializationFailure,
    pg_errors.LockNotAvailable,
)


def translate(exc: psycopg.Error) -> Exception | None:
    """The application error a psycopg error stands for, or None to let it propagate.

    Args:
        exc: the driver error.

    Returns:
        A `RetriableConflict`, `DuplicateKey` or `StoreUnavailable`, or None.
    """
    if isinstance(exc, _RETRIABLE):
        return RetriableConflict(str(exc).strip(), reason=type(exc).__name__)
    if isinstance(exc, pg_errors.InvalidSqlStatementName):
        return RetriableConflict(type(exc).__name__, reason="statement_gone")
    if isinstance(exc, pg_errors.UniqueViolation):
        constraint = exc.diag.constraint_name or "unknown"
        if constraint in RACE_CONSTRAINTS:
            return RetriableConflict(constraint, reason="unique_race")
        return DuplicateKey(constraint)
    if isinstance(exc, psycopg.OperationalError):
        state = exc.sqlstate
        if state is None or state.startswith("08") or state in _UNAVAILABLE_STATES:
            return StoreUnavailable(str(exc).strip() or type(exc).__name__)
    if isinstance(exc, psycopg.InterfaceError) and "closed" in str(exc):
        return StoreUnavailable(str(exc).strip())
    if isinstance(exc, _SCHEMA_BEHIND):
        return StoreUnavailable(f"{SCHEMA_BEHIND} ({type(exc).__name__})")
    return None


@contextmanager
def wrap_errors() -> Iterator[None]:
    """Translate psycopg errors raised in the block (see the module docstring).

    Works around awaits too: the translation happens when the error leaves the block.

    Raises:
        RetriableConflict: deadlock, serialization failure, lock timeout, unique race.
        DuplicateKey: any other unique violation.
        StoreUnavailable: the database cannot be reached, or its schema is behind.

    Example:
        >>> with wrap_errors():  # doctest: +SKIP
        ...     await queries.insert_message(conn, ...)
    """
    try:
        yield
    except psycopg.Error as exc:
        translated = translate(exc)
        if translated is None:
            raise
        raise translated from exc


#: The options of a connection string whose values come from a fixed list (libpq's):
#: libpq reads them only when it connects, so a typo would pass for an outage.
CONNINFO_CHOICES: Mapping[str, tuple[str, ...]] = {
    "sslmode": ("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
    "gssencmode": ("disable", "prefer", "require"),
    "channel_binding": ("disable", "prefer", "require"),
    "target_session_attrs": (
        "any",
        "read-write",
        "read-only",
        "primary",
        "standby",
        "prefer-standby",
    ),
    "load_balance_hosts": ("disable", "random"),
}
#: The highest TCP port number.
MAX_PORT = 65535
#: An integer as libpq reads one: ASCII digits, C white space around them.
_INTEGER = re.compile(r"[ \t\n\r\f\v]*[+-]?[0-9]+[ \t\n\r\f\v]*")


class BadConninfoOption(ValueError):
    """A connection string parses, but libpq would refuse one of its option values.

    Args:
        option: the option's name.
        expected: what its value must be (never the value: the string may hold secrets).
    """

    def __init__(self, option: str, expected: str) -> None:
        super().__init__(f"bad {option}: must be {expected}")
        self.option = option
        self.expected = expected


def require_conninfo(conninfo: str) -> None:
    """Refuse a connection string libpq cannot parse, or would refuse when it connects.

    Args:
        conninfo: libpq connection string or URI.

    Raises:
        BadConninfoOption: for a port that is no number from 1 to `MAX_PORT`, a
            ``connect_timeout`` that is no integer, or a value outside
            `CONNINFO_CHOICES`.
        ValueError: for one that does not parse; the message names no part of it (it may
            hold a password), and psycopg's own error is not chained.
    """
    try:
        options = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        raise ValueError("not a PostgreSQL connection string or URI") from None
    for option, allowed in CONNINFO_CHOICES.items():
        value = options.get(option)
        if value is not None and str(value) not in allowed:
            raise BadConninfoOption(option, f"one of {', '.join(allowed)}")
    port = options.get("port")
    if port is not None:
        ports = str(port).split(",")
        hosts = str(options.get("host") or options.get("hostaddr") or "").split(",")
        # One port for every host, or one for all; an empty entry is the default port.
        if not all(_port(part) for part in ports) or len(ports) not in (1, len(hosts)):
            raise BadConninfoOption("port", f"a number from 1 to {MAX_PORT} for each host")
    timeout = options.get("connect_timeout")
    if timeout is not None and not _INTEGER.fullmatch(str(timeout)):
        raise BadConninfoOption("connect_timeout", "an integer number of seconds")


def _port(text: str) -> bool:
    """Whether one entry of a port list is empty or a port number."""
    if text == "":
        return True
    return bool(_INTEGER.fullmatch(text)) and 1 <= int(text) <= MAX_PORT


def connect_timeout(conninfo: str, seconds: float) -> str:
    """The ``connect_timeout`` of a connection bounded by `seconds`.

    A frozen server accepts the connection's socket and never answers: without a bound
    the attempt waits for ever. A smaller positive ``connect_timeout`` of the conninfo
    is kept (libpq reads 0 or less as "wait for ever": the bound holds then).

    Args:
        conninfo: libpq connection string or URI (parsed by `require_conninfo` first).
        seconds: the bound (``database.request_timeout``).

    Returns:
        Whole seconds, as libpq reads them.
    """
    bound = math.ceil(seconds)
    given = conninfo_to_dict(conninfo).get("connect_timeout")
    if given is not None and int(str(given)) > 0:
        bound = min(bound, int(str(given)))
    return str(bound)


def bounded_conninfo(conninfo: str, seconds: float | None) -> str:
    """The connection string with its attempt bounded by `seconds` (`connect_timeout`).

    Args:
        conninfo: libpq connection string or URI.
        seconds: the bound; None leaves the string as it is.

    Returns:
        The connection string to connect with.
    """
    if seconds is None:
        return conninfo
    return make_conninfo(conninfo, connect_timeout=connect_timeout(conninfo, seconds))
