"""`write_direct` writes the line of the installed chain, or declines and writes nothing."""

from __future__ import annotations

import contextlib
import io
import json
import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import pytest
import structlog
from structlog.testing import capture_logs

from turnkeeper.adapters.http.request_log import LOGGER_NAME, RequestLog
from turnkeeper.adapters.logging import REDACTED, configure_logging, write_direct
from turnkeeper.application.logs import LIBRARY_LOGGER

ROUTE = "/v1/threads/{thread_id:uuid}/messages"
FIELDS = {"method": "POST", "route": ROUTE, "status": 201, "duration_ms": 1.25}


pytestmark = pytest.mark.usefixtures("restored_logging")


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    named = logging.getLogger(LOGGER_NAME)
    saved = (named.disabled, named.filters[:], named.propagate)
    yield named
    named.disabled, named.filters[:], named.propagate = saved


def _without_timestamp(line: str, as_json: bool) -> object:
    if as_json:
        record = json.loads(line)
        assert record.pop("timestamp")
        return record
    # Console lines begin with the timestamp.
    stamp, _, rest = line.partition(" ")
    assert stamp
    return rest


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "console"])
def test_the_direct_line_is_the_line_of_structlog(logger: logging.Logger, as_json: bool) -> None:
    stream = io.StringIO()
    configure_logging(json=as_json, stream=stream)
    tokens = structlog.contextvars.bind_contextvars(correlation_id="c-1")
    try:
        structlog.get_logger(LOGGER_NAME).info("http_request", **FIELDS)
        assert write_direct(logger, "info", "http_request", dict(FIELDS)) is True
    finally:
        structlog.contextvars.reset_contextvars(**tokens)
    through_structlog, direct = stream.getvalue().splitlines()
    assert _without_timestamp(direct, as_json) == _without_timestamp(through_structlog, as_json)
    assert "c-1" in direct


def test_context_secrets_are_redacted_on_the_direct_path(logger: logging.Logger) -> None:
    stream = io.StringIO()
    configure_logging(json=True, stream=stream)
    tokens = structlog.contextvars.bind_contextvars(api_token="tk_secret")
    try:
        assert write_direct(logger, "info", "http_request", {"token": "tk_other", **FIELDS})
    finally:
        structlog.contextvars.reset_contextvars(**tokens)
    (line,) = stream.getvalue().splitlines()
    record = json.loads(line)
    assert (record["api_token"], record["token"]) == (REDACTED, REDACTED)
    assert "tk_" not in line


def test_a_level_below_the_configured_one_writes_nothing(logger: logging.Logger) -> None:
    stream = io.StringIO()
    configure_logging(level="INFO", json=True, stream=stream)
    assert write_direct(logger, "debug", "http_request", dict(FIELDS)) is True
    assert stream.getvalue() == ""
    configure_logging(level="DEBUG", json=True, stream=stream)
    assert write_direct(logger, "debug", "http_request", dict(FIELDS)) is True
    assert json.loads(stream.getvalue())["level"] == "debug"


@contextlib.contextmanager
def _decline_by_capture(logger: logging.Logger) -> Iterator[None]:
    with capture_logs():
        yield


@contextlib.contextmanager
def _decline_by_second_handler(logger: logging.Logger) -> Iterator[None]:
    logging.getLogger().addHandler(logging.NullHandler())
    yield


@contextlib.contextmanager
def _decline_by_disabled_logger(logger: logging.Logger) -> Iterator[None]:
    logger.disabled = True
    yield


@contextlib.contextmanager
def _decline_by_logger_filter(logger: logging.Logger) -> Iterator[None]:
    logger.addFilter(lambda record: True)
    yield


@contextlib.contextmanager
def _decline_by_structlog_defaults(logger: logging.Logger) -> Iterator[None]:
    structlog.reset_defaults()
    yield


@contextlib.contextmanager
def _decline_by_parent_handler(logger: logging.Logger) -> Iterator[None]:
    # Made now if nobody has (the standard library then puts it between the two).
    parent = logging.getLogger(LOGGER_NAME.rpartition(".")[0])
    assert logger.parent is parent
    handler = logging.StreamHandler(io.StringIO())
    parent.addHandler(handler)
    try:
        yield
    finally:
        parent.removeHandler(handler)


@contextlib.contextmanager
def _decline_by_no_propagation(logger: logging.Logger) -> Iterator[None]:
    logger.propagate = False
    yield


@pytest.mark.parametrize(
    "change",
    [
        _decline_by_capture,
        _decline_by_second_handler,
        _decline_by_disabled_logger,
        _decline_by_logger_filter,
        _decline_by_structlog_defaults,
        _decline_by_parent_handler,
        _decline_by_no_propagation,
    ],
    ids=[
        "capture_logs",
        "second root handler",
        "disabled",
        "filter",
        "structlog defaults",
        "parent handler",
        "no propagation",
    ],
)
def test_another_configuration_is_declined_and_nothing_written(
    logger: logging.Logger, change: Callable[[logging.Logger], AbstractContextManager[None]]
) -> None:
    stream = io.StringIO()
    configure_logging(json=True, stream=stream)
    with change(logger):
        assert write_direct(logger, "info", "http_request", dict(FIELDS)) is False
    assert stream.getvalue() == ""


def test_the_packages_null_handler_keeps_the_direct_path(logger: logging.Logger) -> None:
    # The package logger's NullHandler (turnkeeper.application.logs) does nothing with a
    # record: the request log keeps its direct line.
    assert any(
        isinstance(h, logging.NullHandler) for h in logging.getLogger(LIBRARY_LOGGER).handlers
    )
    stream = io.StringIO()
    configure_logging(json=True, stream=stream)
    assert write_direct(logger, "info", "http_request", dict(FIELDS)) is True
    assert json.loads(stream.getvalue())["event"] == "http_request"


def test_a_failing_stream_does_not_fail_the_caller(
    logger: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError("disk full")

    configure_logging(json=True, stream=Broken())
    handled: list[logging.LogRecord] = []
    handler = logging.getLogger().handlers[0]
    monkeypatch.setattr(handler, "handleError", handled.append)
    assert write_direct(logger, "info", "http_request", dict(FIELDS)) is True
    assert [record.getMessage() for record in handled] == ["http_request"]


def test_the_request_log_takes_the_direct_path_when_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream = io.StringIO()
    configure_logging(json=True, stream=stream)
    log = RequestLog()

    def no_bound_logger() -> None:
        raise AssertionError("the request log used structlog's bound logger")

    monkeypatch.setattr(log, "_bound", no_bound_logger)
    log.write(method="POST", route=ROUTE, status=201, duration_ms=1.25)
    (line,) = stream.getvalue().splitlines()
    assert {k: json.loads(line)[k] for k in FIELDS} == FIELDS


def _counted_records(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    made: list[str] = []
    original = logging.Logger.makeRecord

    def counted(self: logging.Logger, *args: object, **kwargs: object) -> logging.LogRecord:
        made.append(self.name)
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(logging.Logger, "makeRecord", counted)
    return made


def test_a_structlog_line_is_written_without_a_standard_library_record(
    logger: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = io.StringIO()
    configure_logging(level="INFO", json=True, stream=stream)
    made = _counted_records(monkeypatch)
    structlog.get_logger(LOGGER_NAME).info("agent_send", token="tk_secret", outcome="sent")
    structlog.get_logger(LOGGER_NAME).debug("below_the_level")
    logging.getLogger("uvicorn.error").warning("a foreign record")
    first, second = stream.getvalue().splitlines()
    record = json.loads(first)
    assert (record["event"], record["token"], record["outcome"]) == ("agent_send", REDACTED, "sent")
    assert (record["level"], record["logger"]) == ("info", LOGGER_NAME)
    assert json.loads(second)["event"] == "a foreign record"
    assert made == ["uvicorn.error"], "only the foreign record became a LogRecord"


def test_a_structlog_line_takes_the_standard_library_when_another_handler_listens(
    logger: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = io.StringIO()
    configure_logging(json=True, stream=stream)
    heard: list[logging.LogRecord] = []

    class Listener(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            heard.append(record)

    listener = Listener()
    logger.addHandler(listener)
    try:
        structlog.get_logger(LOGGER_NAME).info("agent_send", outcome="sent")
    finally:
        logger.removeHandler(listener)
    (line,) = stream.getvalue().splitlines()
    assert json.loads(line)["event"] == "agent_send"
    assert len(heard) == 1
