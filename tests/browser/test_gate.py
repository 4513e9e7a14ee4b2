"""The browser tests stand aside only outside CI, and then say so in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser import conftest


def test_without_ci_a_missing_browser_skips_with_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(conftest, "_not_run", [])
    with pytest.raises(pytest.skip.Exception) as skipped:
        conftest.stand_aside("no Chromium at /nowhere")
    assert "apt-get install -y chromium" in str(skipped.value)
    assert conftest._not_run == [str(skipped.value)]


def test_under_ci_a_missing_browser_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    monkeypatch.setattr(conftest, "_not_run", [])
    with pytest.raises(pytest.fail.Exception) as failed:
        conftest.stand_aside("no Chromium at /nowhere")
    assert "CI=true" in str(failed.value)
    assert conftest._not_run == []


def test_a_missing_executable_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(conftest.CHROMIUM_ENV, str(tmp_path / "chromium"))
    assert conftest.missing_browser() == f"no Chromium at {tmp_path / 'chromium'}"


def test_the_summary_line_is_written_once(monkeypatch: pytest.MonkeyPatch) -> None:
    lines: list[str] = []

    class Reporter:
        def write_line(self, line: str) -> None:
            lines.append(line)

    monkeypatch.setattr(conftest, "_not_run", ["browser tests did not run: x"])
    conftest.pytest_terminal_summary(Reporter())
    assert lines == ["browser tests did not run: x"]
