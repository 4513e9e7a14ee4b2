"""Exceptions reach a log line as their classes and frames, never as their text.

An exception's message, arguments and notes may quote data (a driver error quotes the
failing row), so every record with an exception, structlog's (``log.exception``,
``exc_info=``) and the standard library's (uvicorn's ``Exception in ASGI application``),
holds its outline: the traceback's frames (file, line, function) and the classes of the
exception and of the ones chained to it, in both formats.
"""

from __future__ import annotations

import io
import json
import logging
import sys

import pytest
import structlog

from turnkeeper.adapters.logging import configure_logging, exception_outline

#: What every exception of these tests quotes: never in a line.
CANARY = "zebra-canary-17"

pytestmark = pytest.mark.usefixtures("restored_logging")


class QuotingError(Exception):
    """An error whose text quotes data, as a driver's does."""


def _raise_quoting() -> None:
    raise QuotingError(f"DETAIL:  Failing row contains ({CANARY})")


def _chained() -> BaseException:
    """A RuntimeError caused by a QuotingError, raised while a KeyError was handled."""
    try:
        try:
            raise KeyError(CANARY)
        except KeyError:
            try:
                _raise_quoting()
            except QuotingError as cause:
                error = RuntimeError(CANARY, {"content": CANARY})
                error.add_note(CANARY)
                raise error from cause
    except RuntimeError as caught:
        return caught
    raise AssertionError("unreachable")


def test_the_outline_names_classes_and_frames_and_no_text() -> None:
    outline = exception_outline(_chained())
    assert CANARY not in outline
    lines = outline.splitlines()
    # Python's order: the cause first, then what it caused.
    assert lines[0] == "Traceback (most recent call last):"
    assert f"{__name__}.QuotingError" in lines
    assert lines[-1] == "RuntimeError"
    assert lines.index(f"{__name__}.QuotingError") < lines.index("RuntimeError")
    assert "The above exception was the direct cause of the following exception:" in lines
    assert any(
        line.startswith('  File "') and line.endswith(", in _raise_quoting") for line in lines
    )
    assert f'  File "{__file__}"' in outline
    # The context of the cause (the KeyError) is shown as Python shows it.
    assert "KeyError" in lines
    assert "During handling of the above exception, another exception occurred:" in lines


def test_a_suppressed_context_is_left_out() -> None:
    try:
        try:
            raise KeyError(CANARY)
        except KeyError:
            raise ValueError(CANARY) from None
    except ValueError as caught:
        outline = exception_outline(caught)
    assert outline.splitlines()[-1] == "ValueError"
    assert "KeyError" not in outline
    assert CANARY not in outline


def test_a_group_shows_each_member_by_class() -> None:
    members: list[Exception] = []
    for kind in (QuotingError, ValueError):
        try:
            raise kind(CANARY)
        except Exception as caught:
            members.append(caught)
    try:
        raise ExceptionGroup(CANARY, members)
    except ExceptionGroup as caught:
        outline = exception_outline(caught)
    assert CANARY not in outline
    assert "ExceptionGroup" in outline
    assert f"{__name__}.QuotingError" in outline
    assert "ValueError" in outline


def test_an_exception_never_raised_is_its_class() -> None:
    assert exception_outline(QuotingError(CANARY)) == f"{__name__}.QuotingError"


def test_a_deep_recursion_is_shortened_as_python_shortens_it() -> None:
    def down(n: int) -> None:
        if n == 0:
            raise QuotingError(CANARY)
        down(n - 1)

    try:
        down(50)
    except QuotingError as caught:
        outline = exception_outline(caught)
    assert CANARY not in outline
    assert "[Previous line repeated" in outline
    assert len(outline.splitlines()) < 20


@pytest.mark.parametrize("as_json", [True, False])
def test_structlogs_exception_lines_hold_the_outline(as_json: bool) -> None:
    stream = io.StringIO()
    configure_logging(json=as_json, stream=stream)
    log = structlog.get_logger("turnkeeper.jobs")
    try:
        raise _chained()
    except RuntimeError:
        log.exception("jobs_pass_failed")
    try:
        _raise_quoting()
    except QuotingError as caught:
        log.error("given", exc_info=caught)
    text = stream.getvalue()
    assert CANARY not in text
    assert text.count("RuntimeError") == 1
    assert text.count(f"{__name__}.QuotingError") == 2
    if as_json:
        first, second = (json.loads(line) for line in text.splitlines())
        assert first["exception"].splitlines()[-1] == "RuntimeError"
        assert second["exception"].splitlines()[-1] == f"{__name__}.QuotingError"


@pytest.mark.parametrize("as_json", [True, False])
def test_a_standard_library_record_with_an_exception_holds_the_outline(as_json: bool) -> None:
    stream = io.StringIO()
    configure_logging(json=as_json, stream=stream)
    error = _chained()
    logging.getLogger("uvicorn.error").error(
        "Exception in ASGI application", exc_info=(type(error), error, error.__traceback__)
    )
    text = stream.getvalue()
    assert "Exception in ASGI application" in text
    assert "RuntimeError" in text
    assert f"{__name__}.QuotingError" in text
    assert CANARY not in text


def test_the_outline_of_the_exception_being_handled() -> None:
    stream = io.StringIO()
    configure_logging(json=True, stream=stream)
    try:
        _raise_quoting()
    except QuotingError:
        assert sys.exc_info()[1] is not None
        structlog.get_logger("turnkeeper.http").error("failed", exc_info=True)
    (line,) = stream.getvalue().splitlines()
    record = json.loads(line)
    assert record["exception"].endswith(f"{__name__}.QuotingError")
    assert "in _raise_quoting" in record["exception"]
    assert CANARY not in line
