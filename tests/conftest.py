"""Database fixtures shared by every test directory.

One PostgreSQL per pytest run: ``TURNKEEPER_TEST_DATABASE_URL`` when set (a server the
tests may create and drop databases on), otherwise the embedded server of the pgserver
wheel in a temporary directory, started once and stopped at the end. Never skipped.

The migrations are applied once, to a template database; every test that asks for
`pg_conninfo` gets a fresh database cloned from it (``CREATE DATABASE ... TEMPLATE``),
dropped after the test, so tests are isolated and nothing is left behind. Under
pytest-xdist (``make test`` runs on every core) each worker process starts its own. A
watcher process (tests/support/pg_reaper.py) stops the embedded server and removes its
folder when the process that started it ends without the fixture's teardown (killed).

The hooks at the end put the tests marked ``slow`` first, so that under xdist none of
them starts last and keeps one worker busy while the others have finished, and write the
one line of the tests that stood aside: they live here because the xdist controller
loads only this conftest and sees only the reports.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from psycopg_pool import AsyncConnectionPool

from tests.support import pg_reaper
from tests.support.database import create_database, database_conninfo, drop_database
from tests.support.stood_aside import StoodAside
from turnkeeper.adapters.postgres.embedded import EmbeddedPostgres
from turnkeeper.adapters.postgres.migrations import migrate
from turnkeeper.adapters.postgres.uow import Conn, PostgresUnitOfWorkFactory, create_pool
from turnkeeper.application.ports import UnitOfWorkFactory

# A test run started in the background of a non-interactive shell (`make test &`, some CI
# runners) ignores SIGINT, and every process it starts inherits that through exec: the
# tests that stop a command with SIGINT, as Ctrl-C does, need it delivered there.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

#: Environment variable of an external test server (admin rights: CREATE/DROP DATABASE).
TEST_DATABASE_ENV = "TURNKEEPER_TEST_DATABASE_URL"

#: Pool bounds of `pg_pool`: small enough that concurrency tests queue on it.
POOL_MIN_SIZE = 1
POOL_MAX_SIZE = 10

#: Test directories whose tests run without coverage's tracer (`unmeasured`).
UNMEASURED_DIRECTORIES = ("tests/reliability", "tests/concurrency", "tests/browser")
#: The marker of a long loop elsewhere that runs without the tracer as well (the same
#: code is measured by the shorter tests beside it).
UNMEASURED_MARKER = "unmeasured"
#: Set (to anything) to measure coverage in every test (``make coverage``).
COVER_ALL_ENV = "TURNKEEPER_COVER_ALL"

#: The Hypothesis profile of a CI run (``CI`` set): every run draws the same examples.
CI_HYPOTHESIS_PROFILE = "ci"

# A CI run must not fail on a draw no earlier run made (twice a test's own oracle was
# wrong for a rare draw, and the run that met it did not land): under CI each test draws
# the examples its name seeds, and keeps no example database; elsewhere Hypothesis draws
# anew each time, which is how such a test gets found.
settings.register_profile(CI_HYPOTHESIS_PROFILE, derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile(CI_HYPOTHESIS_PROFILE)

_stood_aside = StoodAside()


def slow_first(items: list[pytest.Item]) -> None:
    """Move the tests marked ``slow`` to the front, each group in its collected order.

    Args:
        items: the collected tests, reordered in place.
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def unmeasured(items: list[pytest.Item], config: pytest.Config) -> None:
    """Mark the tests of `UNMEASURED_DIRECTORIES`, and those marked `UNMEASURED_MARKER`,
    ``no_cover`` (pytest-cov pauses its tracer).

    Unless `COVER_ALL_ENV` is set (``make coverage``), the long loops of these suites run
    without the line tracer, which doubles the time of Python-heavy tests on CPython 3.11;
    the other suites measure the coverage the report shows (ADR 0031).

    Args:
        items: the collected tests, marked in place.
        config: the run's configuration (its root, and whether coverage runs at all).
    """
    if os.environ.get(COVER_ALL_ENV) or getattr(config.option, "no_cov", False):
        # pytest-cov's marker fails under --no-cov (it pauses a controller it never made).
        return
    directories = [config.rootpath / name for name in UNMEASURED_DIRECTORIES]
    for item in items:
        if item.get_closest_marker(UNMEASURED_MARKER) or any(
            item.path.is_relative_to(d) for d in directories
        ):
            item.add_marker(pytest.mark.no_cover)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the slow tests first (`slow_first`); no tracer in the long suites (`unmeasured`)."""
    slow_first(items)
    unmeasured(items, config)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Keep the reason of a browser test that stood aside (tests/support/stood_aside.py)."""
    _stood_aside.note(report)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line when the browser tests stood aside (never in CI, where they fail)."""
    _stood_aside.write(terminalreporter)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """Conninfo of the test server's admin database (external or embedded)."""
    external = os.environ.get(TEST_DATABASE_ENV)
    if external:
        yield external
        return
    # Not under pytest's basetemp: the embedded server runs as a separate system user
    # when tests run as root, and every new pytest session resets its basetemp root to
    # mode 0700, which would lock a concurrently starting server out of its data.
    base = Path(tempfile.mkdtemp(prefix="turnkeeper-pg-"))
    # Started before the server: a run killed while the server starts leaves none either.
    release_watcher = pg_reaper.guard(base, base / "data")
    server = EmbeddedPostgres.start(base / "data", cleanup_mode="delete")
    try:
        yield server.conninfo
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
        release_watcher()


@pytest.fixture(scope="session")
async def pg_template(pg_server: str) -> AsyncIterator[str]:
    """Name of a template database with every migration applied (built once per run)."""
    name = await create_database(pg_server)
    try:
        await migrate(database_conninfo(pg_server, name))
        yield name
    finally:
        await drop_database(pg_server, name)


@pytest.fixture
async def pg_conninfo(pg_server: str, pg_template: str) -> AsyncIterator[str]:
    """Conninfo of a fresh, migrated database for one test (dropped afterwards)."""
    name = await create_database(pg_server, template=pg_template)
    try:
        yield database_conninfo(pg_server, name)
    finally:
        await drop_database(pg_server, name)


@pytest.fixture
async def pg_empty_conninfo(pg_server: str) -> AsyncIterator[str]:
    """Conninfo of a fresh database without any migration (dropped afterwards)."""
    name = await create_database(pg_server)
    try:
        yield database_conninfo(pg_server, name)
    finally:
        await drop_database(pg_server, name)


@pytest.fixture
async def pg_pool(pg_conninfo: str) -> AsyncIterator[AsyncConnectionPool[Conn]]:
    """A connection pool on the test's database, closed after the test."""
    pool = await create_pool(pg_conninfo, min_size=POOL_MIN_SIZE, max_size=POOL_MAX_SIZE)
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture
def pg_uow_factory(pg_pool: AsyncConnectionPool[Conn]) -> UnitOfWorkFactory:
    """Units of work on the test's database."""
    factory: UnitOfWorkFactory = PostgresUnitOfWorkFactory(pg_pool)
    return factory
