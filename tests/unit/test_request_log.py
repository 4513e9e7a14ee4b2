"""The request log line follows the logging configuration although its logger is kept."""

from __future__ import annotations

import io
import json

import pytest
import structlog
from structlog.testing import capture_logs

from turnkeeper.adapters.http.request_log import RequestLog
from turnkeeper.adapters.logging import REDACTED, configure_logging

ROUTE = "/v1/threads/{thread_id:uuid}/messages"


pytestmark = pytest.mark.usefixtures("restored_logging")


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_new_configuration_takes_effect_for_the_kept_logger() -> None:
    log = RequestLog()
    first, second = io.StringIO(), io.StringIO()
    configure_logging(json=True, stream=first)
    log.write(method="POST", route=ROUTE, status=201, duration_ms=1.5)
    configure_logging(json=True, stream=second)
    log.write(method="POST", route=ROUTE, status=201, duration_ms=2.5)
    assert [line["duration_ms"] for line in _lines(first)] == [1.5]
    (line,) = _lines(second)
    assert {k: line[k] for k in ("event", "method", "route", "status", "level", "logger")} == {
        "event": "http_request",
        "method": "POST",
        "route": ROUTE,
        "status": 201,
        "level": "info",
        "logger": "turnkeeper.http",
    }
    with capture_logs() as records:
        log.write(method="GET", route="/healthz", status=200, duration_ms=0.5)
    assert [r["route"] for r in records] == ["/healthz"]


def test_the_line_carries_the_bound_correlation_id_and_redacts_secrets() -> None:
    stream = io.StringIO()
    configure_logging(json=True, stream=stream)
    tokens = structlog.contextvars.bind_contextvars(correlation_id="c-1", api_token="tk_secret")
    try:
        RequestLog().write(method="POST", route=ROUTE, status=201, duration_ms=1.0)
    finally:
        structlog.contextvars.reset_contextvars(**tokens)
    (line,) = _lines(stream)
    assert (line["correlation_id"], line["api_token"]) == ("c-1", REDACTED)
    assert "tk_secret" not in stream.getvalue()


def test_a_quiet_route_success_is_written_at_debug_only() -> None:
    stream = io.StringIO()
    configure_logging(level="INFO", json=True, stream=stream)
    log = RequestLog()
    log.write(method="GET", route="/v1/agent/events", status=200, duration_ms=1.0)
    log.write(method="GET", route="/v1/agent/events", status=401, duration_ms=1.0)
    assert [line["status"] for line in _lines(stream)] == [401]
