"""SIGTERM stops ``turnkeeper serve``, ``jobs`` and the benchmarks whole: embedded server stopped.

uvicorn raises a SIGTERM it handled again once serving ends, so that the process ends
as the signal's default would: at once, before the command closed its pool and stopped
the embedded PostgreSQL server it started, which then ran on without its server. The
command now returns from a stop, cleans up and exits 0 (docs/operations.md, Stopping
the server).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from bench.harness import EXIT_STOPPED
from tests.reliability.support import process_running
from tests.reliability.support_server import (
    OWNER_TOKEN,
    READY_POLL_SECONDS,
    READY_TIMEOUT_SECONDS,
    STOP_TIMEOUT_SECONDS,
    TURNKEEPER,
    Server,
    embedded_environment,
)
from turnkeeper.adapters.postgres.embedded import EMBEDDED_SUBDIR

#: The signals a stop is asked with: SIGTERM from a supervisor, SIGINT from Ctrl-C.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: The source tree (the ``bench`` package is not installed; it runs from the checkout).
SOURCE_ROOT = Path(__file__).resolve().parents[2]
#: The prefix of the short temporary directory a benchmark's own one goes into.
SHORT_TMP_PREFIX = "tkb-"


def _exit_code(process: subprocess.Popen[bytes], log: Path) -> int:
    """The stopped process's exit code; a failure showing its log when it does not exit."""
    try:
        return process.wait(timeout=STOP_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        pytest.fail(f"not stopped in {STOP_TIMEOUT_SECONDS}s\n{log.read_text()}")


def _embedded_env(data_dir: Path) -> dict[str, str]:
    """The embedded server's environment, with the owner's token."""
    return embedded_environment(data_dir, TURNKEEPER_OWNER_TOKEN=OWNER_TOKEN)


@pytest.mark.parametrize("stop", STOP_SIGNALS, ids=[s.name for s in STOP_SIGNALS])
async def test_a_stopped_server_exits_0_and_stops_its_embedded_postgres(
    tmp_path: Path, stop: signal.Signals
) -> None:
    server = Server(env=_embedded_env(tmp_path / "data"), log_dir=tmp_path)
    server.start()
    try:
        await server.wait_ready()
        # The address as bound is in the log (also the port the kernel picks for 0).
        (listening,) = [line for line in server.log().splitlines() if "http_listening" in line]
        assert str(server.port) in listening
        pid_file = tmp_path / "data" / EMBEDDED_SUBDIR / "postmaster.pid"
        postmaster = int(pid_file.read_text().split()[0])
        assert process_running(postmaster)
        assert server.process is not None
        server.process.send_signal(stop)
        assert server.process.wait(timeout=STOP_TIMEOUT_SECONDS) == 0, server.log()
        # The embedded server is stopped before the command returns (pg_ctl waits).
        assert not process_running(postmaster), server.log()
    finally:
        if server.process is not None and server.process.poll() is None:
            server.kill()


@pytest.mark.parametrize("stop", STOP_SIGNALS, ids=[s.name for s in STOP_SIGNALS])
def test_stopped_jobs_exit_0_and_stop_their_embedded_postgres(
    tmp_path: Path, stop: signal.Signals
) -> None:
    # Found by an audit: SIGTERM's default ended `turnkeeper jobs` at once, leaving the
    # embedded server it started running with its dead pid among the server's users.
    log = tmp_path / "jobs.log"
    postmaster: int | None = None
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(TURNKEEPER), "jobs"],
            env=_embedded_env(tmp_path / "data"),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while b"jobs_started" not in log.read_bytes():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(READY_POLL_SECONDS)
        pid_file = tmp_path / "data" / EMBEDDED_SUBDIR / "postmaster.pid"
        postmaster = int(pid_file.read_text().split()[0])
        assert process_running(postmaster)
        process.send_signal(stop)
        assert _exit_code(process, log) == 0, log.read_text()
        assert not process_running(postmaster), log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_SECONDS)
        if postmaster is not None and process_running(postmaster):
            # A failed stop leaves it behind: end it, or it outlives the test run.
            os.kill(postmaster, signal.SIGTERM)


@pytest.mark.slow
@pytest.mark.parametrize("stop", STOP_SIGNALS, ids=[s.name for s in STOP_SIGNALS])
def test_a_stopped_benchmark_stops_its_embedded_postgres(
    tmp_path: Path, stop: signal.Signals
) -> None:
    # Found when a benchmark was stopped with SIGTERM: its embedded server ran on, with
    # its temporary directory, until someone stopped it by hand.
    # The benchmark's temporary directory goes into a short one of its own: below
    # pytest's tmp_path the embedded server's socket path grew past the kernel's limit.
    short = Path(tempfile.mkdtemp(prefix=SHORT_TMP_PREFIX))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
    env.update({"TMPDIR": str(short), "PYTHONUNBUFFERED": "1"})
    log = tmp_path / "bench.log"
    postmaster: int | None = None
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "bench", "--floor", "--quick"],
            cwd=SOURCE_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        # The machine line is printed once the embedded server serves the scratch database.
        while b"machine:" not in log.read_bytes():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(READY_POLL_SECONDS)
        (pid_file,) = short.glob("turnkeeper-bench-*/data/postmaster.pid")
        postmaster = int(pid_file.read_text().split()[0])
        assert process_running(postmaster)
        process.send_signal(stop)
        assert _exit_code(process, log) == EXIT_STOPPED, log.read_text()
        assert not process_running(postmaster), log.read_text()
        # Its temporary directory is removed with it.
        assert list(short.glob("turnkeeper-bench-*")) == []
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_SECONDS)
        if postmaster is not None and process_running(postmaster):
            os.kill(postmaster, signal.SIGTERM)
        shutil.rmtree(short, ignore_errors=True)
