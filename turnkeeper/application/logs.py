"""turnkeeper's loggers, and the redaction every record passes.

A library writes where its host looks, not elsewhere: structlog's default configuration
prints every record to standard output, which a program embedding turnkeeper (a web
service, an agent runtime that speaks a protocol on stdout) never asked for. So the
loggers of `get_logger` write through structlog once the program configured it (``turnkeeper
serve`` and the other commands do, in `turnkeeper.adapters.logging`; so may the host), and
until then to the standard library logger of their name (``turnkeeper.runs``,
``turnkeeper.http``), where the host's logging configuration decides. A host without one
sees nothing, warnings included: the ``turnkeeper`` logger has a `logging.NullHandler`, as
the standard library advises for libraries, so its last-resort handler does not print
them to standard error. Secrets and message text are redacted either way
(`redact_secrets`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any

import structlog
from structlog.typing import EventDict, WrappedLogger

#: The logger above every logger of the package.
LIBRARY_LOGGER = "turnkeeper"
# A handler in the hierarchy keeps the last resort from printing the library's warnings
# into a program that configured no logging; the program's own handlers still get them.
logging.getLogger(LIBRARY_LOGGER).addHandler(logging.NullHandler())

#: Keys whose values are never logged: credentials and message content.
REDACTED_KEYS = frozenset({"token", "authorization", "content", "invocation_token"})
#: What a redacted value is replaced with (kept rather than dropped, so that a reader of
#: the log sees the key was present).
REDACTED = "[redacted]"


#: Types whose values hold no nested keys: returned by `_redact` as they are.
SCALARS = (str, int, float, bool, type(None))


#: How many key names `_is_secret_key` remembers (records use a few dozen).
_REMEMBERED_NAMES = 1024
_secret_by_name: dict[object, bool] = {}


def _judge(key: object) -> bool:
    if not isinstance(key, str):
        return False
    name = key.lower()
    # Any *_token (owner_token, api_token ...) is a credential as well.
    return name in REDACTED_KEYS or name.endswith("_token")


def _is_secret_key(key: object) -> bool:
    # Every record judges the same few names again: each is judged once, then looked up.
    secret = _secret_by_name.get(key)
    if secret is None:
        secret = _judge(key)
        if len(_secret_by_name) < _REMEMBERED_NAMES:
            _secret_by_name[key] = secret
    return secret


def _redact(value: Any) -> Any:
    if isinstance(value, SCALARS):
        return value
    if isinstance(value, Mapping):
        return {k: REDACTED if _is_secret_key(k) else _redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact(item) for item in value]
    return value


def redact_secrets(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    """Replace the value of every secret key, also in nested mappings.

    Args:
        logger: the wrapped logger (unused).
        method_name: the log method (unused).
        event_dict: the record.

    Returns:
        The record with tokens, authorization headers and content redacted.
    """
    for key, value in list(event_dict.items()):
        if _is_secret_key(key):
            event_dict[key] = REDACTED
        elif not isinstance(value, SCALARS):
            event_dict[key] = _redact(value)
    return event_dict


def get_logger(name: str) -> Any:
    """The logger of a turnkeeper module (see the module's description).

    Args:
        name: the logger's name (``turnkeeper.runs``).

    Returns:
        A structlog-style logger (``info(event, **fields)``, ``bind``) that picks its
        sink at every record.
    """
    return _Logger(name)


class _Logger:
    """A structlog-style logger: structlog's once configured, else the standard library's."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, method: str) -> Any:
        if structlog.is_configured():
            return getattr(structlog.get_logger(self._name), method)
        return getattr(library_logger(self._name), method)


@functools.cache
def library_logger(name: str) -> Any:
    """The logger of `name` on the standard library, for a program without structlog's set-up.

    Its records are filtered by the standard library logger's level, redacted and handed
    to it as one key-value line.

    Args:
        name: the logger's name.

    Returns:
        A structlog bound logger wrapping ``logging.getLogger(name)``.
    """
    return structlog.wrap_logger(
        logging.getLogger(name),
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.contextvars.merge_contextvars,
            redact_secrets,
            structlog.processors.KeyValueRenderer(key_order=["event"]),
        ],
        wrapper_class=structlog.stdlib.BoundLogger,
    )
