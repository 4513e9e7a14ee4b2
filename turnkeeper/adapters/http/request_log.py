"""The request log line: one line per HTTP request, written the short way.

The line names the method, the route template, the status and the duration, never a body,
a query string or a header (so neither tokens nor message content reach the log). It is
written at debug for the successful polls, stream reads and heartbeats of `QUIET_ROUTES`
and at info otherwise, through `turnkeeper.adapters.logging.write_direct` while logging is
configured as ``turnkeeper serve`` configures it (ADR 0028), else through a logger bound
once per logging configuration.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog

from turnkeeper.adapters.logging import write_direct
from turnkeeper.application.logs import library_logger

#: Routes that clients call in a loop (polls, stream reads, heartbeats): their successful
#: requests are logged at debug, so that an idle agent does not fill the log.
QUIET_ROUTES = frozenset(
    {
        ("GET", "/v1/events"),
        ("GET", "/v1/agent/events"),
        ("GET", "/v1/events/stream"),
        ("GET", "/v1/agent/events/stream"),
        ("PUT", "/v1/agent/heartbeat"),
    }
)
#: Statuses from here on are logged at info on every route.
_LOUD_STATUS = 400

#: The logger of the request log line.
LOGGER_NAME = "turnkeeper.http"


class RequestLog:
    """The request log line, bound once per logging configuration.

    structlog's module-level loggers assemble a bound logger at every call (they are not
    cached, so that a new configuration takes effect at once); this one keeps its bound
    logger while `structlog.get_config` names the same processors, wrapper and factory.
    """

    def __init__(self) -> None:
        self._key: tuple[object, ...] = ()
        self._logger: Any = None
        self._stdlib = logging.getLogger(LOGGER_NAME)

    def _bound(self) -> Any:
        if not structlog.is_configured():
            # A program that mounts the application and has not set structlog up: its
            # standard library logging decides (turnkeeper.application.logs).
            return library_logger(LOGGER_NAME)
        config = structlog.get_config()
        key = (config["processors"], config["wrapper_class"], config["logger_factory"])
        if self._logger is None or any(a is not b for a, b in zip(key, self._key, strict=True)):
            self._logger = structlog.get_logger(LOGGER_NAME).bind()
            self._key = key
        return self._logger

    def write(self, *, method: str, route: str, status: int, duration_ms: float) -> None:
        """Write the line of one request (at debug for a quiet route's success).

        Args:
            method: the HTTP method.
            route: the route template, or ``(unmatched)``.
            status: the answer's status.
            duration_ms: the request's duration in milliseconds.
        """
        quiet = status < _LOUD_STATUS and (method, route) in QUIET_ROUTES
        fields = {"method": method, "route": route, "status": status, "duration_ms": duration_ms}
        if write_direct(self._stdlib, "debug" if quiet else "info", "http_request", fields):
            return
        logger = self._bound()
        (logger.debug if quiet else logger.info)("http_request", **fields)


__all__ = ["LOGGER_NAME", "QUIET_ROUTES", "RequestLog"]
