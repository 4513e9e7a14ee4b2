"""One line at the end of a run naming the tests that stood aside, and why.

The browser tests skip without a browser outside CI (tests/browser/conftest.py). Under
pytest-xdist they run in worker processes while the controller writes the summary, so the
line is built from the test reports, which every process that writes a summary receives.
"""

from __future__ import annotations

from typing import Any

import pytest

#: How the reason of a browser test that stood aside begins.
BROWSER_NOT_RUN = "browser tests did not run: "
#: How pytest prefixes the reason of a skip in its report.
SKIP_PREFIX = "Skipped: "


class StoodAside:
    """The distinct reasons of the browser tests that stood aside in this run."""

    def __init__(self) -> None:
        """Start with no reason."""
        self.reasons: list[str] = []

    def note(self, report: pytest.TestReport) -> None:
        """Keep the reason of a browser test's skip, once.

        Args:
            report: any test report; reports of other outcomes or skips are ignored.
        """
        if not report.skipped or not isinstance(report.longrepr, tuple):
            return
        reason = str(report.longrepr[2]).removeprefix(SKIP_PREFIX)
        if reason.startswith(BROWSER_NOT_RUN) and reason not in self.reasons:
            self.reasons.append(reason)

    def write(self, terminalreporter: Any) -> None:
        """Write the first reason as the run's one line, when there is one.

        Args:
            terminalreporter: pytest's terminal reporter (anything with ``write_line``).
        """
        if self.reasons:
            terminalreporter.write_line(self.reasons[0])
