"""log.level and log.format choose what a process writes and how."""

from __future__ import annotations

import io
import json
import logging

import pytest
import structlog

from turnkeeper.adapters.logging import configure_from_settings
from turnkeeper.application.settings import Settings

pytestmark = pytest.mark.usefixtures("restored_logging")


def write(settings: Settings) -> str:
    stream = io.StringIO()
    configure_from_settings(settings, stream=stream)
    log = structlog.get_logger("turnkeeper.test")
    log.debug("quiet_detail", seq=1)
    log.info("run_ended", state="completed")
    log.warning("tx_retry_exhausted", attempts=6)
    logging.getLogger("uvicorn.error").info("stdlib_line")
    return stream.getvalue()


def test_json_lines_at_the_default_level() -> None:
    lines = [json.loads(line) for line in write(Settings(log_format="json")).splitlines()]
    assert [line["event"] for line in lines] == ["run_ended", "tx_retry_exhausted", "stdlib_line"]
    assert lines[0]["level"] == "info"


def test_console_lines_are_not_json() -> None:
    text = write(Settings(log_format="console"))
    assert "run_ended" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text.splitlines()[0])


@pytest.mark.parametrize(
    ("level", "events"),
    [
        ("debug", ["quiet_detail", "run_ended", "tx_retry_exhausted", "stdlib_line"]),
        ("warning", ["tx_retry_exhausted"]),
        ("error", []),
    ],
)
def test_the_level_filters_structlog_and_the_standard_library(
    level: str, events: list[str]
) -> None:
    text = write(Settings(log_level=level, log_format="json"))
    assert [json.loads(line)["event"] for line in text.splitlines()] == events


def test_auto_follows_the_terminal() -> None:
    # A StringIO is no terminal: auto writes JSON there.
    text = write(Settings(log_format="auto"))
    assert json.loads(text.splitlines()[0])["event"] == "run_ended"
