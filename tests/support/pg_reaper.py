"""Stops a test process's embedded PostgreSQL when that process dies without its teardown.

The session fixture `pg_server` stops its embedded server at the end of the run, which a
run killed outright never reaches (``timeout`` sends SIGTERM, an out-of-memory kill sends
SIGKILL, an xdist worker dies with its controller): the server kept running with its
temporary directory. `guard` starts a small watcher process that holds the read end of
a pipe whose write end only the test process holds: when that process ends, by any means,
the watcher reads end of file, stops a server still running in the folder, and removes
the folder. After a normal teardown it finds nothing left and exits.

Run as ``python -m tests.support.pg_reaper <base> <data_dir>`` with the pipe on stdin.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from turnkeeper.adapters.postgres.embedded import POSTGRES_PROCESS_NAME, POSTMASTER_PID_FILE

#: How long the watcher waits for the stopped server's postmaster to exit, in seconds:
#: an immediate shutdown takes well under a second; the bound only keeps a stuck one from
#: holding the watcher for ever.
POSTMASTER_EXIT_TIMEOUT_SECONDS = 30.0
#: How long a teardown waits for the watcher to exit after the pipe is closed, in seconds.
WATCHER_EXIT_TIMEOUT_SECONDS = 30.0


def guard(base: Path, data_dir: Path) -> Callable[[], None]:
    """Start the watcher of a server in `data_dir` under the temporary folder `base`.

    Args:
        base: the folder the watcher removes once its owner is gone.
        data_dir: the server's data directory (holds ``postmaster.pid`` while it runs).

    Returns:
        The release to call after the server was stopped: closes the pipe and waits for
        the watcher to exit.
    """
    read_end, write_end = os.pipe()
    watcher = subprocess.Popen(
        [sys.executable, "-m", __name__, str(base), str(data_dir)],
        stdin=read_end,
        # Its own session: a Ctrl-C or a signal to the run's process group does not end
        # the watcher before its owner, which is what it waits for.
        start_new_session=True,
    )
    os.close(read_end)

    def release() -> None:
        os.close(write_end)
        watcher.wait(timeout=WATCHER_EXIT_TIMEOUT_SECONDS)

    return release


def reap(base: Path, data_dir: Path) -> None:
    """Stop the postmaster still serving `data_dir`, if any, and remove `base`.

    Args:
        base: the temporary folder of the server.
        data_dir: the server's data directory.
    """
    import psutil  # the embedded extra's, with pgserver

    try:
        first = (data_dir / POSTMASTER_PID_FILE).read_text(encoding="utf-8").split("\n", 1)[0]
    except (OSError, UnicodeDecodeError):
        first = ""
    if first.strip().isdigit():
        try:
            postmaster = psutil.Process(int(first))
            # A pid the file names may belong to another process by now: only a
            # postgres serving this folder is stopped.
            if postmaster.name() == POSTGRES_PROCESS_NAME and str(data_dir) in postmaster.cmdline():
                # SIGQUIT is PostgreSQL's immediate shutdown: the folder is removed next,
                # so nothing is worth writing out first.
                postmaster.send_signal(signal.SIGQUIT)
                postmaster.wait(timeout=POSTMASTER_EXIT_TIMEOUT_SECONDS)
        except (psutil.NoSuchProcess, psutil.TimeoutExpired):
            pass
    shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    """Wait for the owner to end (end of file on stdin), then `reap`."""
    base, data_dir = (Path(argument) for argument in sys.argv[1:3])
    # A signal to the run's process group is not meant for the watcher.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.stdin.buffer.read()
    reap(base, data_dir)


if __name__ == "__main__":
    main()
