"""The embedded PostgreSQL server of the pgserver wheel, for `turnkeeper serve` and tests.

When ``TURNKEEPER_DATABASE_URL`` is not set, turnkeeper runs its own PostgreSQL from the
binaries shipped in the ``pgserver`` wheel, with its data in ``pgdata`` under the data
directory: ``TURNKEEPER_DATA_DIR``, default ``.turnkeeper`` in the working directory (the
folder of ``turnkeeper serve``). It listens on a Unix socket only: in its folder, or in
pgserver's runtime directory when that path is too long for a socket or holds whitespace.

Example:
    >>> server = EmbeddedPostgres.start()  # doctest: +SKIP
    >>> await migrate(server.conninfo)
    >>> server.stop()
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from turnkeeper.application.errors import StoreUnavailable
from turnkeeper.application.logs import get_logger

_log = get_logger("turnkeeper.embedded")

#: Environment variable naming the data directory (the parent of `EMBEDDED_SUBDIR`).
DATA_DIR_ENV = "TURNKEEPER_DATA_DIR"
#: The data directory without ``TURNKEEPER_DATA_DIR``, in the working directory.
DEFAULT_DATA_DIR = ".turnkeeper"
#: The embedded server's folder in the data directory.
EMBEDDED_SUBDIR = "pgdata"
#: pgserver's list of the processes that hold a handle on the server, in its folder.
HANDLE_PIDS_FILE = ".handle_pids.json"
#: PostgreSQL's lock file in its folder; its first line is the server's pid.
POSTMASTER_PID_FILE = "postmaster.pid"
#: The name of a PostgreSQL server process (what the operating system reports).
POSTGRES_PROCESS_NAME = "postgres"
#: How far a process's start time may be off: the kernel counts it from a boot time
#: given in whole seconds.
START_TIME_TOLERANCE_SECONDS = 2.0

#: What a user without the embedded server reads: both ways to get a database.
MISSING_EMBEDDED = (
    "no database: set TURNKEEPER_DATABASE_URL to a PostgreSQL URL, or install the "
    "embedded server with: pip install 'turnkeeper[embedded]' (Python 3.11 or 3.12: "
    "pgserver has no wheel for later versions)"
)


class EmbeddedServerMissing(RuntimeError):
    """The embedded server was asked for, but the ``embedded`` extra is not installed."""

    def __init__(self) -> None:
        super().__init__(MISSING_EMBEDDED)


def embedded_available() -> bool:
    """Whether the ``turnkeeper[embedded]`` extra (pgserver) is installed."""
    return importlib.util.find_spec("pgserver") is not None


def require_embedded() -> None:
    """Refuse before anything is made when the ``embedded`` extra is not installed.

    Raises:
        EmbeddedServerMissing: pgserver is not installed.
    """
    if not embedded_available():
        raise EmbeddedServerMissing


#: Cleanup modes of pgserver: "stop" stops the server when the last handle is released,
#: None leaves it running for the next process, "delete" also removes the data.
CLEANUP_MODES = frozenset({"stop", "delete", None})


@contextmanager
def _quiet_runtime_dir() -> Iterator[None]:
    """Hide platformdirs' XDG_RUNTIME_DIR warning, which pgserver triggers on import.

    pgserver keeps its lock file in the user runtime directory; in containers and CI
    XDG_RUNTIME_DIR is often unset and platformdirs falls back to /tmp with a warning
    that says nothing actionable to a turnkeeper user.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*XDG_RUNTIME_DIR.*")
        yield


def default_data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where the embedded server keeps its data.

    Args:
        environ: the environment (default ``os.environ``).

    Returns:
        ``$TURNKEEPER_DATA_DIR/pgdata``, or ``./.turnkeeper/pgdata``: the folder
        ``turnkeeper serve`` uses, so that both find the same database.
    """
    env = os.environ if environ is None else environ
    base = env.get(DATA_DIR_ENV)
    return (Path(base) if base else Path.cwd() / DEFAULT_DATA_DIR) / EMBEDDED_SUBDIR


class EmbeddedPostgres:
    """A running embedded PostgreSQL server.

    Use `start`; `stop` releases it (stopping the server unless another handle in this
    process still uses the same data directory, or the cleanup mode is None).

    Args:
        server: the pgserver handle.
        data_dir: its data directory.
    """

    def __init__(self, server: Any, data_dir: Path) -> None:
        self._server = server
        self.data_dir = data_dir
        self._stopped = False

    @classmethod
    def start(
        cls, data_dir: Path | None = None, *, cleanup_mode: str | None = "stop"
    ) -> EmbeddedPostgres:
        """Initialise the data directory if needed and start (or join) the server.

        Args:
            data_dir: the data directory (default `default_data_dir()`).
            cleanup_mode: ``"stop"`` (default), ``"delete"`` or None (leave it running).

        Returns:
            The running server.

        Raises:
            ValueError: for an unknown cleanup mode.
            EmbeddedServerMissing: when the ``embedded`` extra is not installed.
            StoreUnavailable: when the server cannot be started.
        """
        if cleanup_mode not in CLEANUP_MODES:
            raise ValueError(f"cleanup_mode must be one of stop, delete or None: {cleanup_mode}")
        require_embedded()
        folder = (data_dir or default_data_dir()).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        with _quiet_runtime_dir():
            # Imported late: pgserver warns and probes the runtime directory on import.
            import pgserver.postgres_server as pgserver_server
            from pgserver.postgres_server import get_server

            chooser = getattr(pgserver_server, _SOCKET_DIR_CHOOSER)
            if not isinstance(chooser, _SocketDirWithoutWhitespace):
                setattr(pgserver_server, _SOCKET_DIR_CHOOSER, _SocketDirWithoutWhitespace(chooser))
            # Under pgserver's own lock, so that no other process starts the server or
            # joins it between the look and the removal. The holders are looked at
            # before this process joins them, which writes their list anew.
            with pgserver_server.PostgresServer._lock:
                _forget_stale_postmaster(folder)
                _forget_dead_holders(folder / HANDLE_PIDS_FILE)
            try:
                server = get_server(folder, cleanup_mode=cleanup_mode)
            except Exception as exc:  # pgserver raises plain exceptions of several kinds
                raise StoreUnavailable(f"embedded PostgreSQL did not start in {folder}") from exc
        return cls(server, folder)

    @property
    def conninfo(self) -> str:
        """The URI of the ``postgres`` database (Unix socket in the data directory)."""
        return self.uri("postgres")

    def uri(self, database: str) -> str:
        """The URI of a database on this server.

        Args:
            database: the database name.

        Returns:
            A libpq URI.
        """
        return str(self._server.get_uri(database))

    def stop(self) -> None:
        """Release the server (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        with _quiet_runtime_dir():
            # pgserver stops the server only when this is the last listed holder: a holder
            # killed outright (SIGKILL, out of memory) never unlisted itself, and would
            # leave the server running with no one left to stop it.
            with self._server._lock:
                _forget_dead_holders(self.data_dir / HANDLE_PIDS_FILE)
            self._server.cleanup()


#: pgserver's function that picks the server's socket directory (wrapped below).
_SOCKET_DIR_CHOOSER = "find_suitable_socket_dir"


class _SocketDirWithoutWhitespace:
    """pgserver's choice of the socket directory, never a path that holds whitespace.

    pgserver hands the directory to postgres unquoted (``pg_ctl -o '-k <dir>'``), and
    postgres split a path with a space in it and refused to start: ``turnkeeper serve``
    from any folder whose path has a space failed. Such a data directory gets its socket
    in pgserver's runtime directory, named as pgserver names one there for a path too
    long for a socket.

    Args:
        choose: pgserver's own ``find_suitable_socket_dir``.
    """

    def __init__(self, choose: Callable[[Path, Path], Path]) -> None:
        self._choose = choose

    def __call__(self, pgdata: Path, runtime_path: Path) -> Path:
        """The socket directory of the server in `pgdata`."""
        if not any(ch.isspace() for ch in str(pgdata)):
            return self._choose(pgdata, runtime_path)
        identifier = f"{pgdata}-{pgdata.stat().st_ino}"
        folder = runtime_path / hashlib.sha256(identifier.encode()).hexdigest()[:10]
        folder.mkdir(parents=True, exist_ok=True)
        return folder


def _forget_dead_holders(path: Path) -> None:
    """Drop the pids of processes that no longer run from pgserver's list of holders.

    A pid that a process started after the list was last written holds it now (a reboot
    reuses pids): that process is not the holder the list names, and is dropped too.

    Args:
        path: the list (`HANDLE_PIDS_FILE` in the server's folder); absent: nothing to do.
    """
    if not path.exists():
        return
    written = path.stat().st_mtime
    pids = json.loads(path.read_text())
    alive = [pid for pid in pids if _named_process_runs(pid, written)]
    if alive != pids:
        path.write_text(json.dumps(alive))


def _forget_stale_postmaster(folder: Path) -> None:
    """Remove a ``postmaster.pid`` whose pid a process other than its server holds now.

    pgserver takes any live process the file names for the server: after a crash and a
    reboot that reused the pid, it joined an unrelated process, failed to reach it, and
    killed it when the command ended. PostgreSQL removes a lock file whose process is
    gone by itself; one whose pid is alive but is no ``postgres`` process, a ``postgres``
    of another folder, or one that started after the file was last written, is as
    stale, and is removed here.

    Args:
        folder: the server's folder.
    """
    path = folder / POSTMASTER_PID_FILE
    try:
        written = path.stat().st_mtime
        first = path.read_text(encoding="utf-8").split("\n", 1)[0].strip()
    except (OSError, UnicodeDecodeError):
        return
    if not first.isdigit():
        return
    import psutil  # the embedded extra's, with pgserver

    try:
        process = psutil.Process(int(first))
        stale = (
            process.name() != POSTGRES_PROCESS_NAME
            or _started_after(process, written)
            or not _serves(process, folder)
        )
    except psutil.NoSuchProcess:
        return  # PostgreSQL's own case: a lock file of a process that is gone
    except psutil.AccessDenied:
        return  # cannot tell: left as it is
    if stale:
        _log.warning("embedded_stale_postmaster_pid_removed", folder=str(folder))
        path.unlink(missing_ok=True)


def _serves(process: Any, folder: Path) -> bool:
    """Whether a ``postgres`` process serves this folder (its command line names it).

    A postmaster is started with ``-D <folder>``; one that cannot be inspected is taken
    for this folder's, as before.
    """
    import psutil  # the embedded extra's, with pgserver

    try:
        return str(folder) in process.cmdline()
    except psutil.AccessDenied:
        return True


def _named_process_runs(pid: int, written: float) -> bool:
    """Whether the process a file written at `written` names by `pid` still runs."""
    import psutil  # the embedded extra's, with pgserver

    try:
        return not _started_after(psutil.Process(pid), written)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # another user's process: it exists, and cannot be told apart


def _started_after(process: Any, written: float) -> bool:
    """Whether a process started after a file was last written (so the file cannot name it).

    Args:
        process: a ``psutil.Process``.
        written: the file's modification time (seconds since the epoch).
    """
    # The kernel gives a start time to a second or so: a process that wrote the file
    # right after it started is never taken for a newer one.
    return float(process.create_time()) > written + START_TIME_TOLERANCE_SECONDS
