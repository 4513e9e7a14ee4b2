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


#: The lines between chained exceptions, as Python writes them.
CAUSE_LINE = "The above exception was the direct cause of the following exception:"
CONTEXT_LINE = "During handling of the above exception, another exception occurred:"


def _frames_and_classes_only(outline: str) -> None:
    """Assert the outline's indented lines are frames or repeat counts, never source lines."""
    for line in outline.splitlines():
        if line.startswith(" "):
            assert line.startswith(('  File "', "  [Previous line repeated ")), line
            assert not line.startswith("   "), line


def test_no_source_line_is_shown() -> None:
    # A source line may hold a literal as sensitive as a message.
    outline = exception_outline(_chained())
    _frames_and_classes_only(outline)
    assert '  File "' in outline


def test_a_syntax_errors_details_are_left_out() -> None:
    outlines: list[str] = []
    # A SyntaxError carries the file name, the source text and the message apart from its
    # arguments: compile's and one built by hand, as a parser library raises it.
    try:
        compile(f"x = ({CANARY!r}", f"<{CANARY}>", "exec")
    except SyntaxError as caught:
        outlines.append(exception_outline(caught))
    try:
        raise SyntaxError(CANARY, (f"{CANARY}.py", 1, 2, f"x = {CANARY}\n", 1, 3))
    except SyntaxError as caught:
        outlines.append(exception_outline(caught))
    for outline in outlines:
        assert CANARY not in outline
        assert outline.splitlines()[-1] == "SyntaxError"
        _frames_and_classes_only(outline)


def test_notes_are_left_out_at_every_level() -> None:
    def noted(error: Exception) -> Exception:
        try:
            raise error
        except Exception as caught:
            caught.add_note(CANARY)
            return caught

    member = noted(QuotingError(CANARY))
    member.__cause__ = noted(KeyError(CANARY))
    # __notes__ is an attribute like any other: not a list of text here.
    odd = ValueError(CANARY)
    odd.__notes__ = CANARY  # type: ignore[assignment]
    group = noted(ExceptionGroup(CANARY, [member, odd]))
    group.__context__ = noted(RuntimeError(CANARY))
    outline = exception_outline(group)
    assert CANARY not in outline
    for name in (f"{__name__}.QuotingError", "KeyError", "ValueError", "RuntimeError"):
        assert name in outline


def test_a_group_shows_its_members_one_by_one() -> None:
    group = ExceptionGroup(CANARY, [QuotingError(CANARY), ValueError(CANARY)])
    assert exception_outline(group).splitlines() == [
        "ExceptionGroup",
        "+-- 1 --",
        f"| {__name__}.QuotingError",
        "+-- 2 --",
        "| ValueError",
    ]


def test_a_wide_group_shows_its_first_fifteen_members() -> None:
    group = ExceptionGroup(CANARY, [ValueError(CANARY) for _ in range(20)])
    lines = exception_outline(group).splitlines()
    assert lines[-3:] == ["+-- 15 --", "| ValueError", "+-- and 5 more"]
    assert CANARY not in "\n".join(lines)


def test_groups_nested_deeply_are_cut_after_ten() -> None:
    error: Exception = QuotingError(CANARY)
    for _ in range(12):
        error = ExceptionGroup(CANARY, [error])
    outline = exception_outline(error)
    assert outline.count("ExceptionGroup") == 11
    assert outline.splitlines()[-1].endswith("+-- ... (groups nested too deep)")
    assert "QuotingError" not in outline


def test_a_cycle_of_causes_shows_each_exception_once() -> None:
    first, second = ValueError(CANARY), KeyError(CANARY)
    first.__cause__, second.__cause__ = second, first
    assert exception_outline(first).splitlines() == ["KeyError", "", CAUSE_LINE, "", "ValueError"]


def test_a_chain_longer_than_the_recursion_limit_is_outlined() -> None:
    length = sys.getrecursionlimit() + 100
    error = ValueError(CANARY)
    for _ in range(length - 1):
        later = ValueError(CANARY)
        later.__context__ = error
        error = later
    lines = exception_outline(error).splitlines()
    # One class per exception, and three lines between two of them.
    assert len(lines) == length + 3 * (length - 1)
    assert lines[:4] == ["ValueError", "", CONTEXT_LINE, ""]
    assert CANARY not in "\n".join(lines)
