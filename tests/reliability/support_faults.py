"""A PostgreSQL of its own for fault tests: frozen (SIGSTOP), killed (SIGKILL), restarted.

The session's shared test server must never be frozen or killed (every other test uses
it), so each fault test starts an embedded server of the pgserver wheel in a temporary
directory, and stops and deletes it afterwards. The server's processes are the
postmaster (first line of ``postmaster.pid``) and its children, read from ``/proc``.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs
import psycopg
from psycopg.conninfo import conninfo_to_dict

from turnkeeper.adapters.postgres.embedded import EmbeddedPostgres

#: Seconds the processes of a killed server may take to disappear.
KILL_TIMEOUT_SECONDS = 10.0
#: Seconds ``pg_ctl start`` may take (crash recovery of a small cluster included).
RESTART_TIMEOUT_SECONDS = 30.0
#: Seconds between two looks at /proc while waiting for processes to end.
POLL_SECONDS = 0.02
#: The system user pgserver runs PostgreSQL as when the tests run as root.
PGSERVER_USER = "pgserver"


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # ended meanwhile
        # The command name is in parentheses and may hold spaces: fields follow the last ")".
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@attrs.define
class FaultyPostgres:
    """An embedded server that a test may freeze, thaw, kill and restart.

    Attributes:
        server: the running server.
        base: the temporary directory holding its data (deleted at the end).
    """

    server: EmbeddedPostgres
    base: Path
    frozen: list[int] = attrs.Factory(list)

    @property
    def data_dir(self) -> Path:
        """The cluster's data directory."""
        return self.server.data_dir

    def uri(self, database: str = "postgres") -> str:
        """The URI of a database on this server."""
        return self.server.uri(database)

    @property
    def socket_dir(self) -> str:
        """The directory of the server's Unix socket."""
        return str(conninfo_to_dict(self.uri())["host"])

    def postmaster(self) -> int:
        """The postmaster's process id."""
        return int((self.data_dir / "postmaster.pid").read_text().split()[0])

    def processes(self) -> list[int]:
        """The postmaster and its children."""
        postmaster = self.postmaster()
        return [postmaster, *_children(postmaster)]

    def freeze(self) -> None:
        """SIGSTOP every process of the server: it accepts bytes and answers nothing."""
        self.frozen = self.processes()
        for pid in self.frozen:
            os.kill(pid, signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT what `freeze` stopped."""
        for pid in self.frozen:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                continue
        self.frozen = []

    def kill(self) -> None:
        """SIGKILL every process of the server and wait until they are gone."""
        pids = self.processes()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + KILL_TIMEOUT_SECONDS
        while any(_alive(pid) for pid in pids):
            assert time.monotonic() < deadline, "the killed server's processes did not end"
            time.sleep(POLL_SECONDS)

    def stop(self) -> None:
        """Stop the server if it runs (pgserver only knows the first postmaster)."""
        pid_file = self.data_dir / "postmaster.pid"
        if not pid_file.exists() or not _alive(self.postmaster()):
            return
        self._pg_ctl(["-w", "-m", "immediate", "stop"])

    def _pg_ctl(self, args: list[str]) -> None:
        # pgserver makes its command functions at import time: mypy cannot see them.
        import pgserver._commands

        pg_ctl: Callable[..., str] = vars(pgserver._commands)["pg_ctl"]
        user = PGSERVER_USER if os.geteuid() == 0 else None
        pg_ctl(args, pgdata=self.data_dir, user=user, timeout=RESTART_TIMEOUT_SECONDS)

    def restart(self) -> None:
        """Start the killed server again on the same data directory and socket.

        Returns when it accepts connections (``pg_ctl -w``), after its crash recovery.
        """
        log = str(self.data_dir / "log")
        self._pg_ctl(["-w", "-o", '-h ""', "-o", f"-k {self.socket_dir}", "-l", log, "start"])
        with psycopg.connect(self.uri(), connect_timeout=int(RESTART_TIMEOUT_SECONDS)) as conn:
            conn.execute("SELECT 1")


@contextmanager
def faulty_postgres() -> Iterator[FaultyPostgres]:
    """A new embedded server for one test, thawed, stopped and deleted afterwards."""
    # Not under pytest's basetemp: see the pg_server fixture in tests/conftest.py.
    base = Path(tempfile.mkdtemp(prefix="turnkeeper-faults-"))
    server = EmbeddedPostgres.start(base / "data", cleanup_mode="delete")
    faulty = FaultyPostgres(server=server, base=base)
    try:
        yield faulty
    finally:
        faulty.thaw()
        faulty.stop()
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
