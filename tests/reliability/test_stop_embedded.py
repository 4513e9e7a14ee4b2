"""SIGTERM stops ``turnkeeper serve`` whole: the pool closes and the embedded server stops.

uvicorn raises a SIGTERM it handled again once serving ends, so that the process ends
as the signal's default would: at once, before the command closed its pool and stopped
the embedded PostgreSQL server it started, which then ran on without its server. The
command now returns from a stop, cleans up and exits 0 (docs/operations.md, Stopping
the server).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.reliability.support_server import (
    OWNER_TOKEN,
    SIGNING_KEY,
    STOP_TIMEOUT_SECONDS,
    Server,
)
from turnkeeper.adapters.postgres.embedded import EMBEDDED_SUBDIR

#: The signals a stop is asked with: SIGTERM from a supervisor, SIGINT from Ctrl-C.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _embedded_env(data_dir: Path) -> dict[str, str]:
    """A server environment without a database URL: the embedded server in `data_dir`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
    env.update(
        {
            "TURNKEEPER_DATA_DIR": str(data_dir),
            "TURNKEEPER_OWNER_TOKEN": OWNER_TOKEN,
            "TURNKEEPER_SIGNING_KEY": SIGNING_KEY,
        }
    )
    return env


def _running(pid: int) -> bool:
    """Whether the process runs (an exited one its parent has not reaped yet does not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


@pytest.mark.parametrize("stop", STOP_SIGNALS, ids=[s.name for s in STOP_SIGNALS])
async def test_a_stopped_server_exits_0_and_stops_its_embedded_postgres(
    tmp_path: Path, stop: signal.Signals
) -> None:
    server = Server(env=_embedded_env(tmp_path / "data"), log_dir=tmp_path)
    server.start()
    try:
        await server.wait_ready()
        pid_file = tmp_path / "data" / EMBEDDED_SUBDIR / "postmaster.pid"
        postmaster = int(pid_file.read_text().split()[0])
        assert _running(postmaster)
        assert server.process is not None
        server.process.send_signal(stop)
        assert server.process.wait(timeout=STOP_TIMEOUT_SECONDS) == 0, server.log()
        # The embedded server is stopped before the command returns (pg_ctl waits).
        assert not _running(postmaster), server.log()
    finally:
        if server.process is not None and server.process.poll() is None:
            server.kill()
