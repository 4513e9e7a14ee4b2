"""The headless Chromium of the browser tests, or one line saying why they did not run.

The browser is Debian's ``chromium`` (``/usr/bin/chromium``, or ``TURNKEEPER_CHROMIUM``)
driven by Playwright's Python package through ``executable_path``; Playwright's own
browser downloads are never used. Without a browser the tests stand aside with a skip
and the run ends with one line naming the install command (tests/support/stood_aside.py),
except under ``CI=true``, where a missing browser fails the run.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import pytest

from tests.browser.support import WIDE, ServedWorld, served_world
from tests.support.stood_aside import BROWSER_NOT_RUN

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext

#: The environment variable naming another Chromium executable.
CHROMIUM_ENV = "TURNKEEPER_CHROMIUM"
#: Debian's Chromium.
DEFAULT_CHROMIUM = "/usr/bin/chromium"
#: How a newcomer gets the browser (Debian, Ubuntu).
INSTALL_COMMAND = "sudo apt-get install -y chromium"
#: Chromium's flags: headless, no sandbox (root in CI), and no traffic of its own.
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def chromium_path() -> Path:
    """The Chromium executable the tests drive."""
    return Path(os.environ.get(CHROMIUM_ENV, DEFAULT_CHROMIUM))


def missing_browser() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if importlib.util.find_spec("playwright") is None:
        return "the Python package playwright is missing (it is in the dev extra)"
    path = chromium_path()
    if not os.access(path, os.X_OK):
        return f"no Chromium at {path}"
    return None


def stand_aside(why: str) -> NoReturn:
    """Skip a browser test for lack of a browser, or fail it under ``CI=true``.

    Args:
        why: what is missing.

    Raises:
        pytest.fail.Exception: under ``CI=true`` (CI never runs without the browser).
        pytest.skip.Exception: elsewhere; the run then ends with one line saying so.
    """
    if os.environ.get("CI") == "true":
        pytest.fail(
            f"the browser tests must run under CI=true: {why}; install: {INSTALL_COMMAND}",
            pytrace=False,
        )
    pytest.skip(f"{BROWSER_NOT_RUN}{why}; install it with: {INSTALL_COMMAND}")


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    """One headless Chromium for the whole run (a fresh context per test)."""
    why = missing_browser()
    if why is not None:
        stand_aside(why)
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(chromium_path()), headless=True, args=list(CHROMIUM_ARGS)
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def served() -> AsyncIterator[ServedWorld]:
    """A memory store with the demo world, served on a loopback port."""
    async with served_world() as world:
        yield world


@pytest.fixture
async def context(browser: Browser) -> AsyncIterator[BrowserContext]:
    """A fresh browser context with the wide viewport, closed after the test."""
    opened = await browser.new_context(viewport=WIDE)  # type: ignore[arg-type]
    try:
        yield opened
    finally:
        await opened.close()
