"""The browser tests stand aside only outside CI, and then say so in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest

from tests.browser import conftest
from tests.support.stood_aside import BROWSER_NOT_RUN, StoodAside


def test_without_ci_a_missing_browser_skips_with_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        conftest.stand_aside("no Chromium at /nowhere")
    assert str(skipped.value).startswith(BROWSER_NOT_RUN + "no Chromium at /nowhere")
    assert "apt-get install -y chromium" in str(skipped.value)


def test_under_ci_a_missing_browser_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception) as failed:
        conftest.stand_aside("no Chromium at /nowhere")
    assert "CI=true" in str(failed.value)


def test_a_missing_executable_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(conftest.CHROMIUM_ENV, str(tmp_path / "chromium"))
    assert conftest.missing_browser() == f"no Chromium at {tmp_path / 'chromium'}"


def report(outcome: Literal["passed", "skipped"], reason: str) -> pytest.TestReport:
    """A setup report as a worker process sends it to the controller."""
    longrepr = (__file__, 1, f"Skipped: {reason}") if outcome == "skipped" else None
    return pytest.TestReport(
        "tests/browser/test_console.py::t", (__file__, 1, "t"), {}, outcome, longrepr, "setup"
    )


class Reporter:
    """The terminal reporter's one method the summary uses."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def write_line(self, line: str) -> None:
        self.lines.append(line)


def test_the_summary_line_is_written_once_from_the_reports() -> None:
    reason = f"{BROWSER_NOT_RUN}no Chromium at /nowhere; install it with: x"
    stood_aside = StoodAside()
    for _ in range(3):
        stood_aside.note(report("skipped", reason))
    stood_aside.note(report("skipped", "another skip"))
    stood_aside.note(report("passed", ""))
    reporter = Reporter()
    stood_aside.write(reporter)
    assert reporter.lines == [reason]


def test_without_a_skip_no_line_is_written() -> None:
    stood_aside = StoodAside()
    stood_aside.note(report("skipped", "another skip"))
    reporter = Reporter()
    stood_aside.write(reporter)
    assert reporter.lines == []
