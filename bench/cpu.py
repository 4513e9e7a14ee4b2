"""CPU time of the processes a measurement involves: this one, PostgreSQL's, the server's.

A `CpuProbe` reads, at the start and at the end of a timed phase, the CPU seconds of

- this Python process (``time.process_time``: every thread of the process);
- every process of the PostgreSQL server: the postmaster and all its children (backends,
  WAL writer, checkpointer...), found from a backend's pid, so it works for the embedded
  server and for any server on this machine;
- optionally one more process with its children (the ``turnkeeper serve`` of the HTTP
  side, and its worker processes when it runs several).

Other processes' CPU comes from ``/proc/<pid>/task/<tid>/schedstat`` (nanoseconds run on
a CPU, every thread), or from ``/proc/<pid>/stat`` (utime + stime in clock ticks, 10 ms)
where schedstat is missing. A server on another machine has no pids here: its CPU is
then unknown (None), never a guess.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import attrs
import psycopg

#: Nanoseconds per second (schedstat counts nanoseconds).
NS_PER_SECOND = 1_000_000_000
#: Position of the parent pid among the fields after the command in /proc/<pid>/stat.
_STAT_PPID = 1
#: Positions of utime and stime among those fields.
_STAT_UTIME = 11
_STAT_STIME = 12


def _stat_fields(pid: int | str) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command may hold spaces and parentheses: the fields follow the last ")".
    return stat[stat.rfind(")") + 2 :].split()


def process_cpu(pid: int) -> float | None:
    """CPU seconds a process has used so far, all its threads together.

    Args:
        pid: the process.

    Returns:
        Seconds, or None when the process cannot be read (gone, or not on this machine).
    """
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    found = False
    for task in tasks:
        try:
            line = Path(f"/proc/{pid}/task/{task}/schedstat").read_text()
        except OSError:
            continue
        total += int(line.split()[0])
        found = True
    if found:
        return total / NS_PER_SECOND
    fields = _stat_fields(pid)
    if fields is None:
        return None
    ticks = int(fields[_STAT_UTIME]) + int(fields[_STAT_STIME])
    return ticks / os.sysconf("SC_CLK_TCK")


def children(parent: int) -> list[int]:
    """The pids whose parent is `parent`.

    Args:
        parent: the parent pid.

    Returns:
        The children's pids (a snapshot: processes come and go).
    """
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(entry)
        if fields is not None and len(fields) > _STAT_PPID and int(fields[_STAT_PPID]) == parent:
            found.append(int(entry))
    return found


def tree_cpu(root: int) -> float | None:
    """CPU seconds of a process and its children so far.

    Args:
        root: the parent process (the postmaster).

    Returns:
        Seconds, or None when the root cannot be read.
    """
    own = process_cpu(root)
    if own is None:
        return None
    return own + sum(process_cpu(pid) or 0.0 for pid in children(root))


async def postmaster_pid(conninfo: str) -> int | None:
    """The pid of the postmaster of a server, when it runs on this machine.

    A backend's parent is the postmaster; a pid that is no ``postgres`` process here
    (a server on another machine) gives None.

    Args:
        conninfo: any database of the server.

    Returns:
        The postmaster's pid, or None.
    """
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        cur = await conn.execute("SELECT pg_backend_pid()")
        row = await cur.fetchone()
        # Read while the backend lives: it exits when the connection closes.
        return None if row is None else _postgres_parent(int(row[0]))


def _postgres_parent(backend: int) -> int | None:
    fields = _stat_fields(backend)
    if fields is None:
        return None
    parent = int(fields[_STAT_PPID])
    try:
        command = Path(f"/proc/{parent}/cmdline").read_bytes()
    except OSError:
        return None
    return parent if b"postgres" in command else None


@attrs.frozen(kw_only=True)
class Cpu:
    """CPU seconds used during one timed phase (None: not measured or not readable).

    Attributes:
        python: this process.
        postgres: every process of the PostgreSQL server.
        server: the HTTP server process and its children.
        client: the load client process (reported by the client itself).
    """

    python: float | None = None
    postgres: float | None = None
    server: float | None = None
    client: float | None = None


@attrs.frozen
class _Reading:
    python: float
    postgres: float | None
    server: float | None


class CpuProbe:
    """Reads the CPU of the processes of a measurement, before and after.

    Args:
        postmaster: the PostgreSQL postmaster's pid (None: PostgreSQL not measured).
        server: the HTTP server's pid (None: none); its children count too.
    """

    def __init__(self, postmaster: int | None, server: int | None = None) -> None:
        self._postmaster = postmaster
        self._server = server

    def with_server(self, server: int | None) -> CpuProbe:
        """The same probe, also measuring an HTTP server process.

        Args:
            server: its pid.

        Returns:
            A new probe.
        """
        return CpuProbe(self._postmaster, server)

    def read(self) -> _Reading:
        """One reading; this process's own clock is read last, after the /proc scans.

        Returns:
            An opaque reading for `since`.
        """
        postgres = None if self._postmaster is None else tree_cpu(self._postmaster)
        server = None if self._server is None else tree_cpu(self._server)
        return _Reading(python=time.process_time(), postgres=postgres, server=server)

    def since(self, start: _Reading, *, client: float | None = None) -> Cpu:
        """The CPU used since a reading.

        This process's clock is read first, before the /proc scans, so that the scans
        are not counted as the measured side's work.

        Args:
            start: the reading at the start.
            client: the load client's own figure, when there is one.

        Returns:
            The differences.
        """
        python = time.process_time() - start.python
        end_postgres = None if self._postmaster is None else tree_cpu(self._postmaster)
        end_server = None if self._server is None else tree_cpu(self._server)
        return Cpu(
            python=python,
            postgres=_delta(start.postgres, end_postgres),
            server=_delta(start.server, end_server),
            client=client,
        )


def _delta(start: float | None, end: float | None) -> float | None:
    if start is None or end is None:
        return None
    # A backend that ended during the phase takes its seconds with it: never below 0.
    return max(0.0, end - start)


__all__ = [
    "Cpu",
    "CpuProbe",
    "children",
    "postmaster_pid",
    "process_cpu",
    "tree_cpu",
]
