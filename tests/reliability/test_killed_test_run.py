"""A test run killed outright leaves no embedded PostgreSQL running and no folder behind.

The session fixture `pg_server` stops its server at the end of the run; a run stopped by
SIGTERM (``timeout``) or SIGKILL never got there, and its server ran on with its
temporary directory. Its watcher (tests/support/pg_reaper.py) stops the server and
removes the folder once the process that started it is gone.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from psycopg.conninfo import conninfo_to_dict

from tests.conftest import TEST_DATABASE_ENV
from tests.reliability.support import process_running
from tests.reliability.support_server import (
    READY_POLL_SECONDS,
    READY_TIMEOUT_SECONDS,
    STOP_TIMEOUT_SECONDS,
)
from turnkeeper.adapters.postgres.embedded import POSTMASTER_PID_FILE

#: The source tree (the inner run loads its conftest from there).
SOURCE_ROOT = Path(__file__).resolve().parents[2]
#: The signals a run is killed with: a supervisor's stop and an outright kill.
KILL_SIGNALS = (signal.SIGTERM, signal.SIGKILL)

#: The inner run's one test: says where its server is, then waits to be killed.
HOLDING_TEST = """
import json, os, threading
from pathlib import Path

def test_hold(pg_server):
    Path(os.environ["HOLD_MARKER"]).write_text(json.dumps(pg_server))
    threading.Event().wait()
"""


def _wait_for(condition_met: Callable[[], bool], what: str) -> None:
    """Poll `condition_met` (a callable) until it is true; fail after the ready timeout."""
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while not condition_met():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {READY_TIMEOUT_SECONDS}s")
        time.sleep(READY_POLL_SECONDS)


@pytest.mark.slow
@pytest.mark.parametrize("kill", KILL_SIGNALS, ids=[s.name for s in KILL_SIGNALS])
def test_a_killed_run_leaves_no_server_and_no_folder(tmp_path: Path, kill: signal.Signals) -> None:
    test_file = tmp_path / "test_hold.py"
    test_file.write_text(HOLDING_TEST)
    marker = tmp_path / "server.json"
    environment = {key: value for key, value in os.environ.items() if key != TEST_DATABASE_ENV}
    environment["HOLD_MARKER"] = str(marker)
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(SOURCE_ROOT),
            "-o",
            "addopts=",
            str(test_file),
        ],
        cwd=SOURCE_ROOT,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    socket_dir = postmaster = None
    try:
        _wait_for(lambda: marker.exists() or run.poll() is not None, "the inner run started")
        assert run.poll() is None, "the inner run ended before it was killed"
        socket_dir = Path(str(conninfo_to_dict(json.loads(marker.read_text()))["host"]))
        postmaster = int((socket_dir / POSTMASTER_PID_FILE).read_text().split("\n", 1)[0])
        assert process_running(postmaster)

        run.send_signal(kill)
        run.wait(timeout=STOP_TIMEOUT_SECONDS)

        _wait_for(lambda: not process_running(postmaster), "the server stopped")
        _wait_for(lambda: not socket_dir.parent.exists(), "the folder removed")
    finally:
        # Without the watcher the server runs on: stopped here, not left to the host.
        if run.poll() is None:
            run.kill()
            run.wait()
        if postmaster is not None and process_running(postmaster):
            psutil.Process(postmaster).send_signal(signal.SIGQUIT)
        if socket_dir is not None:
            shutil.rmtree(socket_dir.parent, ignore_errors=True)
