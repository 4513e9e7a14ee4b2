"""A command killed outright does not keep the embedded PostgreSQL running for good.

pgserver stops the server when its last handle is released, counting handles by the
pids it lists in the data directory. A process killed by SIGKILL (or the out-of-memory
killer) never runs its exit handler, so its pid stayed listed, and every later command
on that data directory released its handle and left the server running, with no one
left to stop it. `EmbeddedPostgres.stop` now forgets the pids of dead processes first.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.reliability.support import process_running
from turnkeeper.adapters.postgres.embedded import HANDLE_PIDS_FILE

#: How long one helper process may take (start of the embedded server included).
HELPER_TIMEOUT_SECONDS = 120

#: Starts the embedded server in the data directory of argv[1] and prints the
#: postmaster's pid. With argv[2] == "kill" the process then kills itself (no exit
#: handler runs); else it stops the server as a command does when it ends.
HELPER = """
import os, signal, sys
from pathlib import Path
from turnkeeper.adapters.postgres.embedded import EmbeddedPostgres
server = EmbeddedPostgres.start(Path(sys.argv[1]))
pid = (Path(sys.argv[1]) / "postmaster.pid").read_text().split()[0]
print(pid, flush=True)
if sys.argv[2] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
server.stop()
"""


def _helper(data_dir: Path, how: str) -> subprocess.CompletedProcess[str]:
    """Run `HELPER` in a fresh interpreter (pgserver keeps handles per process)."""
    return subprocess.run(
        [sys.executable, "-c", HELPER, str(data_dir), how],
        capture_output=True,
        text=True,
        timeout=HELPER_TIMEOUT_SECONDS,
        check=False,
    )


def test_a_later_command_stops_the_server_a_killed_command_left_listed(tmp_path: Path) -> None:
    data_dir = tmp_path / "pgdata"
    killed = _helper(data_dir, "kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    postmaster = int(killed.stdout.split()[0])
    listed = json.loads((data_dir / HANDLE_PIDS_FILE).read_text())
    # The killed process is still listed, and its server still runs.
    assert len(listed) == 1
    assert process_running(postmaster)
    try:
        stopped = _helper(data_dir, "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert int(stopped.stdout.split()[0]) == postmaster
        assert not process_running(postmaster)
        assert json.loads((data_dir / HANDLE_PIDS_FILE).read_text()) == []
    finally:
        if process_running(postmaster):
            os.kill(postmaster, signal.SIGKILL)


def test_a_live_holder_keeps_the_serverprocess_running(tmp_path: Path) -> None:
    """Only dead pids are forgotten: a handle still held keeps the server up."""
    data_dir = tmp_path / "pgdata"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            HELPER.replace("server.stop()", "sys.stdin.read()\nserver.stop()"),
            str(data_dir),
            "hold",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        postmaster = int(holder.stdout.readline().split()[0])
        stopped = _helper(data_dir, "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert process_running(postmaster)
        assert json.loads((data_dir / HANDLE_PIDS_FILE).read_text()) == [holder.pid]
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=HELPER_TIMEOUT_SECONDS)
    assert holder.returncode == 0
    assert not process_running(postmaster)
