"""A pid that another process took over is never the embedded PostgreSQL's, nor a holder's.

After a host crash (or a container restart) the pids in the data directory's files name
processes that ended; a reboot hands the same pids to new, unrelated processes. pgserver
takes any live process named by ``postmaster.pid`` for the server: it joined it, could
not reach it, and at the end killed it (a black-box audit lost a ``sleep`` that way; as
root, any process). And a live unrelated process named in ``.handle_pids.json`` kept the
server running for good. A process that started after the file was last written is not
the one the file names (`EmbeddedPostgres.start`, `EmbeddedPostgres.stop`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from tests.reliability.support import process_running
from tests.reliability.test_embedded_dead_handles import HELPER_TIMEOUT_SECONDS, _helper
from turnkeeper.adapters.postgres.embedded import HANDLE_PIDS_FILE

#: How long before the unrelated process the crashed one wrote its file (seconds).
CRASHED_BEFORE_SECONDS = 3600


@contextmanager
def _unrelated_process() -> Iterator[int]:
    """A live process that is neither PostgreSQL nor turnkeeper; its pid."""
    process = subprocess.Popen(["sleep", str(HELPER_TIMEOUT_SECONDS * 10)])
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()


def _name_instead(path: Path, old: int, new: int) -> None:
    """Make a file name the pid `new` where it named `old`, written long before `new` started."""
    path.write_text(path.read_text().replace(str(old), str(new), 1))
    written = psutil.Process(new).create_time() - CRASHED_BEFORE_SECONDS
    os.utime(path, (written, written))


def test_a_live_process_named_by_a_stale_postmaster_pid_is_left_alone(tmp_path: Path) -> None:
    data_dir = tmp_path / "pgdata"
    killed = _helper(data_dir, "kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    crashed = int(killed.stdout.split()[0])
    # The host crash: the server ends without removing its postmaster.pid.
    os.kill(crashed, signal.SIGKILL)
    psutil.Process(crashed).wait(timeout=HELPER_TIMEOUT_SECONDS)
    with _unrelated_process() as unrelated:
        _name_instead(data_dir / "postmaster.pid", crashed, unrelated)
        started = _helper(data_dir, "stop")
        assert started.returncode == 0, started.stderr
        postmaster = int(started.stdout.split()[0])
        assert postmaster != unrelated
        assert not process_running(postmaster)
        assert process_running(unrelated)


def test_a_live_process_named_as_a_holder_does_not_keep_the_server_running(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "pgdata"
    killed = _helper(data_dir, "kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    postmaster = int(killed.stdout.split()[0])
    (holder,) = json.loads((data_dir / HANDLE_PIDS_FILE).read_text())
    try:
        with _unrelated_process() as unrelated:
            _name_instead(data_dir / HANDLE_PIDS_FILE, holder, unrelated)
            stopped = _helper(data_dir, "stop")
            assert stopped.returncode == 0, stopped.stderr
            assert int(stopped.stdout.split()[0]) == postmaster
            assert not process_running(postmaster)
            assert json.loads((data_dir / HANDLE_PIDS_FILE).read_text()) == []
            assert process_running(unrelated)
    finally:
        if process_running(postmaster):
            os.kill(postmaster, signal.SIGKILL)


def test_another_data_directorys_server_named_by_a_postmaster_pid_is_left_alone(
    tmp_path: Path,
) -> None:
    # A postmaster.pid copied from elsewhere (or restored with new times) can name a
    # live postgres of another data directory that started before the file's time: it
    # was joined, and stopped at the end, another cluster's server.
    other, data_dir = tmp_path / "other" / "pgdata", tmp_path / "pgdata"
    (tmp_path / "other").mkdir()
    running = _helper(other, "kill")
    assert running.returncode == -signal.SIGKILL, running.stderr
    theirs = int(running.stdout.split()[0])
    try:
        killed = _helper(data_dir, "kill")
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        crashed = int(killed.stdout.split()[0])
        os.kill(crashed, signal.SIGKILL)
        psutil.Process(crashed).wait(timeout=HELPER_TIMEOUT_SECONDS)
        path = data_dir / "postmaster.pid"
        path.write_text(path.read_text().replace(str(crashed), str(theirs), 1))
        started = _helper(data_dir, "stop")
        assert started.returncode == 0, started.stderr
        assert int(started.stdout.split()[0]) != theirs
        assert process_running(theirs)
    finally:
        stopped = _helper(other, "stop")
        assert stopped.returncode == 0, stopped.stderr
    assert not process_running(theirs)
