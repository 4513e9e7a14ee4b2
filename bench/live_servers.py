"""The ``turnkeeper serve`` processes of the live benchmark (`bench.live`).

Two processes on one scratch database, with a fixed owner token and signing key (so that
both accept the same tokens), a rate limit the poster never reaches, and a stream limit
large enough for the idle measurement. CPU time and resident memory are read from
``/proc`` of the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import httpx

#: The console script of this environment.
TURNKEEPER = Path(sys.executable).with_name("turnkeeper")
#: The owner's token of the benchmark servers.
OWNER_TOKEN = "tk-owner-bench-example.com-0123456789"  # noqa: S105 (a test fixture)
#: The invocation token key shared by both processes.
SIGNING_KEY = "bench-signing-key-example.com-0123456789abcdef0123"
#: No rate limit gets in the way of the poster.
RATE_BURST = 1000000
#: Seconds a server may take to become ready, and a command to end.
START_SECONDS = 60.0
#: Seconds between two readiness polls.
READY_POLL_SECONDS = 0.05


@attrs.define
class Process:
    """One ``turnkeeper serve`` process."""

    env: dict[str, str]
    log: Path
    port: int
    popen: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The base URL (loopback only)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the process (output into its log file)."""
        args = [str(TURNKEEPER), "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        with self.log.open("wb") as out:
            self.popen = subprocess.Popen(  # noqa: S603 (our own console script)
                [*args, "--no-jobs"], env=self.env, stdout=out, stderr=subprocess.STDOUT
            )

    async def ready(self) -> None:
        """Wait until /readyz answers 200 (within `START_SECONDS`)."""
        deadline = time.monotonic() + START_SECONDS
        async with httpx.AsyncClient() as http:
            while time.monotonic() < deadline:
                assert self.popen is not None
                assert self.popen.poll() is None, self.log.read_text()
                with contextlib.suppress(httpx.TransportError):
                    if (await http.get(f"{self.url}/readyz")).status_code == 200:
                        return
                await asyncio.sleep(READY_POLL_SECONDS)
        raise RuntimeError(f"server on port {self.port} not ready")

    def stop(self) -> None:
        """SIGTERM, and SIGKILL when the process does not end in time."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=START_SECONDS)
            except subprocess.TimeoutExpired:
                self.popen.kill()

    def cpu_seconds(self) -> float:
        """User plus system CPU time of the process so far."""
        assert self.popen is not None
        fields = Path(f"/proc/{self.popen.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])
        return ticks / os.sysconf("SC_CLK_TCK")

    def rss_kib(self) -> int:
        """Resident memory of the process."""
        assert self.popen is not None
        for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(conninfo: str, data_dir: Path, max_streams: int) -> dict[str, str]:
    """The environment of a benchmark server on the database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
    env.update(
        {
            "TURNKEEPER_DATABASE_URL": conninfo,
            "TURNKEEPER_OWNER_TOKEN": OWNER_TOKEN,
            "TURNKEEPER_SIGNING_KEY": SIGNING_KEY,
            "TURNKEEPER_DATA_DIR": str(data_dir),
            "TURNKEEPER_RATELIMIT__RL__MESSAGE__BURST": str(RATE_BURST),
            "TURNKEEPER_STREAM__MAX_PER_PRINCIPAL": str(max_streams),
        }
    )
    return env


@contextlib.contextmanager
def processes(conninfo: str, folder: Path, max_streams: int) -> Iterator[tuple[Process, Process]]:
    """Processes A and B on the database, stopped when the block ends."""
    env = server_env(conninfo, folder, max_streams)
    started = [Process(env=env, log=folder / f"serve-{n}.log", port=free_port()) for n in "ab"]
    try:
        for process in started:
            process.start()
        yield started[0], started[1]
    finally:
        for process in started:
            process.stop()
