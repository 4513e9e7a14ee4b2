"""A stop during ``turnkeeper serve``'s start-up is a stop: exit 0, embedded server stopped.

Found by an audit: ``serve`` set up no SIGTERM handling of its own before uvicorn's, so
a SIGTERM while the embedded PostgreSQL started, the migrations ran or the application
was built (``http_listening`` in the log) ended the process at once (exit 143). The
embedded server it had started ran on, with the dead pid among its users, so that every
later command on that data directory left it running too, even after a clean stop.

Each test starts the real command on the real embedded server, reads its output until a
start-up point's line appears (bounded, no sleeping for a time window), sends the stop
there and asserts exit 0 and that no PostgreSQL serves the data directory any more. The
points a signal can fall before or after by a hair are repeated. The data directory is
reused: a stale user would keep the next start's server running, which the next round
(and the serve and stop at the end) would find.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.support_server import (
    OWNER_TOKEN,
    READY_TIMEOUT_SECONDS,
    STOP_TIMEOUT_SECONDS,
    TURNKEEPER,
    embedded_environment,
)
from turnkeeper.adapters.postgres.embedded import EMBEDDED_SUBDIR

#: Rounds of a stop at a racy point (the signal may fall a little before or after it).
ROUNDS = 5
#: Bytes read from the output at a time.
READ_BYTES = 65536

#: Start-up points of one process: the line that marks each (pgserver's, then ours).
PG_CTL_STARTING = "running pg_ctl"
POSTGRES_STARTED = "Now asserting server is running"
OWNER_PRINTED = '"owner"'
HTTP_LISTENING = "http_listening"
SERVER_STACK = "http_server_stack"
HEAP_SETTLED = "heap_settled"
APP_STARTED = "Application startup complete"
#: A parent that has forked its workers.
WORKERS_STARTED = "http_workers_started"


def _embedded_env(data_dir: Path) -> dict[str, str]:
    """The embedded server's environment, every line written through to the pipe."""
    # Every line reaches the pipe when it is written, not when a buffer fills.
    return embedded_environment(data_dir, PYTHONUNBUFFERED="1")


class Serve:
    """A ``turnkeeper serve`` process whose output is read as it comes."""

    def __init__(self, data_dir: Path, *extra: str, owner_token: bool = True) -> None:
        env = _embedded_env(data_dir)
        if owner_token:
            env["TURNKEEPER_OWNER_TOKEN"] = OWNER_TOKEN
        self.output = b""
        self.process = subprocess.Popen(
            [str(TURNKEEPER), "serve", "--host", "127.0.0.1", "--port", "0", "--no-jobs", *extra],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def text(self) -> str:
        """The output so far (for failure messages)."""
        return self.output.decode("utf-8", errors="replace")

    def wait_for(self, marker: str) -> None:
        """Read the output until a line holds `marker` (within `READY_TIMEOUT_SECONDS`).

        Raises:
            AssertionError: when the process ends first or the deadline passes.
        """
        assert self.process.stdout is not None
        wanted = marker.encode()
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            while wanted not in self.output:
                left = deadline - time.monotonic()
                assert left > 0, f"no {marker!r} in time:\n{self.text()}"
                if not selector.select(timeout=left):
                    continue
                chunk = os.read(self.process.stdout.fileno(), READ_BYTES)
                assert chunk, f"ended before {marker!r}:\n{self.text()}"
                self.output += chunk

    def stop(self, stop: signal.Signals = signal.SIGTERM) -> int:
        """Send `stop`, read the rest of the output and return the exit code."""
        self.process.send_signal(stop)
        rest, _ = self.process.communicate(timeout=STOP_TIMEOUT_SECONDS)
        self.output += rest
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL the process if it still runs (a failed test's clean-up)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate(timeout=STOP_TIMEOUT_SECONDS)


def _postmasters(pgdata: Path) -> list[int]:
    """The PostgreSQL servers whose data directory is `pgdata` (from their command lines)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"postgres") and os.fsencode(pgdata) in argv:
            found.append(int(entry))
    return found


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """The data directory of the test; any server left in it is stopped at the end."""
    data = tmp_path / "data"
    yield data
    for pid in _postmasters((data / EMBEDDED_SUBDIR).resolve()):
        # A failed stop leaves it behind: a fast shutdown, or it outlives the test run.
        os.kill(pid, signal.SIGINT)


def _stop_at(data_dir: Path, marker: str, *extra: str, stop: signal.Signals) -> None:
    """Start serve, stop it at `marker`: exit 0 and no PostgreSQL left in `data_dir`."""
    serve = Serve(data_dir, *extra, owner_token=marker != OWNER_PRINTED)
    try:
        serve.wait_for(marker)
        code = serve.stop(stop)
    finally:
        serve.kill()
    assert code == 0, serve.text()
    assert _postmasters((data_dir / EMBEDDED_SUBDIR).resolve()) == [], serve.text()


def _serve_and_stop_leaves_none(data_dir: Path) -> None:
    """A full start and stop on the data directory: exit 0, its server stopped too."""
    _stop_at(data_dir, APP_STARTED, stop=signal.SIGTERM)


@pytest.mark.slow
@pytest.mark.parametrize(
    "marker",
    [PG_CTL_STARTING, POSTGRES_STARTED, HTTP_LISTENING, SERVER_STACK, HEAP_SETTLED],
)
def test_sigterm_at_a_start_up_point_stops_serve_whole(data_dir: Path, marker: str) -> None:
    for _ in range(ROUNDS):
        _stop_at(data_dir, marker, stop=signal.SIGTERM)
    _serve_and_stop_leaves_none(data_dir)


def test_sigterm_after_the_owner_is_made_stops_serve_whole(data_dir: Path) -> None:
    # The owner's token is printed once, by the start that made the owner: a new world.
    _stop_at(data_dir, OWNER_PRINTED, stop=signal.SIGTERM)
    _serve_and_stop_leaves_none(data_dir)


@pytest.mark.parametrize("marker", [PG_CTL_STARTING, POSTGRES_STARTED, HTTP_LISTENING])
def test_sigint_at_a_start_up_point_stops_serve_whole(data_dir: Path, marker: str) -> None:
    _stop_at(data_dir, marker, stop=signal.SIGINT)
    _serve_and_stop_leaves_none(data_dir)


@pytest.mark.slow
@pytest.mark.parametrize(
    "marker", [PG_CTL_STARTING, POSTGRES_STARTED, WORKERS_STARTED, HTTP_LISTENING]
)
def test_sigterm_while_workers_start_stops_the_server_whole(data_dir: Path, marker: str) -> None:
    # The parent migrates, then forks; a stop before or while it forks reaches every
    # worker, each of which may still be building its application.
    for _ in range(ROUNDS):
        _stop_at(data_dir, marker, "--workers", "2", stop=signal.SIGTERM)
    _serve_and_stop_leaves_none(data_dir)


@pytest.mark.parametrize("marker", [PG_CTL_STARTING, POSTGRES_STARTED])
def test_sigint_before_workers_start_stops_the_server_whole(data_dir: Path, marker: str) -> None:
    # The parent starts the embedded server outside any event loop: Ctrl-C there is a
    # KeyboardInterrupt wherever it falls.
    _stop_at(data_dir, marker, "--workers", "2", stop=signal.SIGINT)
    _serve_and_stop_leaves_none(data_dir)
