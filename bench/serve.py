"""A real ``turnkeeper serve`` process for the HTTP side of the floor benchmark.

The server runs as it runs in production: ``python -m turnkeeper.adapters.cli serve``
with its configuration from the environment (the benchmark's database, the bench
world's rate-limit burst so that no worker is limited, a pool as large as the highest
concurrency), the request log on (into a file in a temporary directory), and without
the periodic jobs (``--no-jobs``), whose passes would land in random measurements.
It listens on 127.0.0.1 on a free port; the load client connects from another process.

`bare_server` runs uvicorn alone, on the same parser and loop, with the bare ASGI app of
`bench.bare_asgi`: the HTTP server without Litestar and turnkeeper.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import attrs

from bench.world import BENCH_BURST
from turnkeeper.adapters.config import ENV_DATA_DIR, ENV_DATABASE_URL, env_name

#: The directory that holds the ``bench`` package (the bare server's import path).
BENCH_ROOT = Path(__file__).resolve().parent.parent
#: Where the server listens (and the load client connects).
HOST = "127.0.0.1"
#: Seconds the server may take to answer /readyz after its start.
START_TIMEOUT = 60.0
#: Seconds between two /readyz probes while it starts.
READY_PROBE_INTERVAL = 0.1
#: Seconds it may take to stop after SIGTERM before it is killed.
STOP_TIMEOUT = 15.0


@attrs.frozen(kw_only=True)
class RunningServer:
    """A started ``turnkeeper serve``.

    Attributes:
        pid: its process id (for its CPU time).
        host: where it listens.
        port: its port.
        log: its log file (standard output and error).
    """

    pid: int
    host: str
    port: int
    log: Path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


async def _ready(port: int) -> bool:
    try:
        reader, writer = await asyncio.open_connection(HOST, port)
    except OSError:
        return False
    try:
        writer.write(f"GET /readyz HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        status = await reader.readline()
    except OSError:
        return False
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return status.split(b" ")[1:2] == [b"200"]


def server_environment(conninfo: str, data_dir: Path, pool_size: int) -> dict[str, str]:
    """The environment of the benchmark's server process.

    Args:
        conninfo: the database.
        data_dir: the server's data directory (its signing key file).
        pool_size: its connection pool (min and max).

    Returns:
        This process's environment with the server's configuration on top.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
    env.update(
        {
            ENV_DATABASE_URL: conninfo,
            ENV_DATA_DIR: str(data_dir),
            env_name("ratelimit.rl.message.burst"): str(BENCH_BURST),
            env_name("database.pool_min_size"): str(pool_size),
            env_name("database.pool_max_size"): str(pool_size),
        }
    )
    return env


@contextlib.asynccontextmanager
async def _serving(
    arguments: list[str], env: dict[str, str], base: Path, *, cwd: Path | None, label: str
) -> AsyncIterator[RunningServer]:
    """Run ``python -m <arguments> --host HOST --port P`` until it answers /readyz; stop it after.

    Args:
        arguments: the module and its arguments (the host and port are appended).
        env: its environment.
        base: a temporary directory of its own (its log; removed at the end).
        cwd: its working directory (None: this one).
        label: its name in the error message.

    Yields:
        The running server.

    Raises:
        RuntimeError: when it exits or is not ready within `START_TIMEOUT` (the message
            ends with the last lines of its log).
    """
    log_path = base / "serve.log"
    port = _free_port()
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            *arguments,
            "--host",
            HOST,
            "--port",
            str(port),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            cwd=None if cwd is None else str(cwd),
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not await _ready(port):
            if process.returncode is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace").splitlines()[-5:]
                raise RuntimeError(f"{label} did not start: " + " | ".join(tail))
            await asyncio.sleep(READY_PROBE_INTERVAL)
        yield RunningServer(pid=process.pid, host=HOST, port=port, log=log_path)
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), STOP_TIMEOUT)
            except TimeoutError:
                process.kill()
                await process.wait()
        shutil.rmtree(base, ignore_errors=True)


@contextlib.asynccontextmanager
async def turnkeeper_server(
    conninfo: str,
    pool_size: int,
    *,
    environment: Mapping[str, str] | None = None,
    tree: Path | None = None,
    label: str = "turnkeeper serve",
) -> AsyncIterator[RunningServer]:
    """Start ``turnkeeper serve`` on a migrated database with a world in it; stop it after.

    Args:
        conninfo: the database (the world must exist: the server creates no owner then).
        pool_size: its connection pool.
        environment: more environment variables (settings such as
            ``TURNKEEPER_HTTP__PARSER``), over those of `server_environment`.
        tree: another source tree to run the server from (its root first on the path and
            as the working directory), or None for this one.
        label: the server's name in the error message.

    Yields:
        The running server.

    Raises:
        RuntimeError: when it exits or is not ready within `START_TIMEOUT` (the message
            ends with the last lines of its log).
    """
    base = Path(tempfile.mkdtemp(prefix="turnkeeper-bench-serve-"))
    env = server_environment(conninfo, base, pool_size)
    env.update(environment or {})
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    arguments = ["turnkeeper.adapters.cli", "serve", "--no-jobs"]
    async with _serving(arguments, env, base, cwd=tree, label=label) as server:
        yield server


@contextlib.asynccontextmanager
async def bare_server(label: str = "bare uvicorn") -> AsyncIterator[RunningServer]:
    """Start uvicorn on httptools and uvloop with `bench.bare_asgi`'s app; stop it after.

    Args:
        label: the server's name in the error message.

    Yields:
        The running server (no access log, warnings only).

    Raises:
        RuntimeError: as `turnkeeper_server`.
    """
    base = Path(tempfile.mkdtemp(prefix="turnkeeper-bench-bare-"))
    env = dict(os.environ)
    # The app's module must import whatever the working directory of the benchmark.
    env["PYTHONPATH"] = str(BENCH_ROOT)
    arguments = [
        "uvicorn",
        "bench.bare_asgi:app",
        "--http",
        "httptools",
        "--loop",
        "uvloop",
        "--lifespan",
        "off",
        "--no-access-log",
        "--log-level",
        "warning",
    ]
    async with _serving(arguments, env, base, cwd=None, label=label) as server:
        yield server


__all__ = ["HOST", "RunningServer", "bare_server", "server_environment", "turnkeeper_server"]
