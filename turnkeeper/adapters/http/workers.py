"""Worker processes of ``turnkeeper serve``: several processes, one listening socket.

One Python process serves on one core. With ``http.workers`` (or ``--workers``) above
1, the parent does the one-time work (migrations, the owner and its token), binds the
listening socket once (`listening_socket`), then forks the workers (`run_workers`): each
runs its own event loop, pool and application on the inherited socket, and the kernel
hands each new connection to whichever worker accepts it first (ADR 0021).

The parent only supervises. SIGTERM or SIGINT to it is passed on to every worker as
SIGTERM, each of which shuts down as a one-process server does (its event streams end
first, then open answers complete); the parent exits when all have. A worker that ends
by itself (killed, crashed) ends the server: the parent stops the other workers the
same way and exits with 1, so that the service manager restarts the whole server with
its start-up checks, exactly as it restarts a one-process server that died. A parent
that is killed outright (SIGKILL) takes its workers with it on Linux: each asks the
kernel for SIGTERM when its parent ends (``prctl(PR_SET_PDEATHSIG)``) and shuts down as
on a stop.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from turnkeeper.application.logs import get_logger

#: Signals the parent passes on to its workers (as SIGTERM).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: Exit code of the parent when every worker stopped on request.
EXIT_OK = 0
#: Exit code of the parent when a worker ended by itself.
EXIT_WORKER_ENDED = 1
#: prctl(2)'s PR_SET_PDEATHSIG (linux/prctl.h): the signal for a process whose parent ends.
_PR_SET_PDEATHSIG = 1

_log = get_logger("turnkeeper.http")

#: A signal handler as `signal.signal` takes and returns it.
Handler = Callable[[int, FrameType | None], Any] | int | None
#: Runs worker number ``index`` (from 0) in the forked process; returns its exit code.
WorkerMain = Callable[[int], int]


class ListenFailed(Exception):
    """An address cannot be listened on (in use, not local, not resolvable).

    Its text is the one line the command prints: which address, and why.

    Args:
        what: what could not be done (``listen``).
        host: the address or host name.
        port: the port.
        cause: the error of the socket.
    """

    def __init__(self, what: str, host: str, port: int, cause: OSError) -> None:
        # gaierror and friends carry their text in strerror; the errno prefix helps nobody.
        reason = cause.strerror or str(cause) or type(cause).__name__
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        super().__init__(f"cannot {what} on {address}: {reason}")


def listening_socket(host: str, port: int, backlog: int) -> socket.socket:
    """Bind and listen, before anything is served (also for one process).

    Binding first makes a taken port or a wrong host fail at once, with one line,
    instead of after the migrations, inside uvicorn (which exits with its own code).

    Args:
        host: the address or host name (IPv6 when it holds a colon).
        port: the port (0: the kernel picks one, see ``getsockname``).
        backlog: the listen backlog.

    Returns:
        The listening socket.

    Raises:
        ListenFailed: the address cannot be bound (in use, not local, unknown name).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # A restarted server binds again while the old one's connections linger.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise ListenFailed("listen", host, port, exc) from exc
    return sock


def _signal_all(workers: dict[int, int], signum: int) -> None:
    for pid in workers:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            continue  # ended meanwhile: its exit is collected by the wait


def _end_with_parent(parent: int) -> None:
    """Have the kernel send this worker SIGTERM when its parent ends (Linux).

    A parent killed with SIGKILL cannot pass a stop on; without this its workers would
    go on serving the socket and holding database connections with nobody supervising
    them. Elsewhere (no ``prctl``) nothing changes.

    Args:
        parent: the parent's pid, read before the fork.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        # The parent ended between the fork and the request: the signal will not come.
        os.kill(os.getpid(), signal.SIGTERM)


def _run_child(
    index: int, worker: WorkerMain, defaults: dict[signal.Signals, Handler], parent: int
) -> None:
    """The forked process: default signal handling, the worker, then exit (no unwinding)."""
    code = EXIT_WORKER_ENDED
    try:
        for signum, handler in defaults.items():
            signal.signal(signum, handler)
        _end_with_parent(parent)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        code = worker(index)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        # The parent's context managers (the embedded database) belong to the parent.
        os._exit(code)


def run_workers(count: int, worker: WorkerMain) -> int:
    """Fork `count` workers and supervise them until all have ended.

    Args:
        count: worker processes (``http.workers``).
        worker: what each forked process runs.

    A stop that arrives while the parent forks ends the forking: the workers forked
    so far are stopped, and no more are forked.

    Returns:
        `EXIT_OK` when the workers stopped on request (SIGTERM or SIGINT to the
        parent), `EXIT_WORKER_ENDED` when one ended by itself first.
    """
    workers: dict[int, int] = {}
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        _signal_all(workers, signal.SIGTERM)

    sys.stdout.flush()
    sys.stderr.flush()  # or each worker would write the parent's buffered output again
    # Blocked while forking: a stop signal then waits until every pid is known.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    defaults: dict[signal.Signals, Handler] = {
        signum: signal.signal(signum, stop) for signum in STOP_SIGNALS
    }
    parent = os.getpid()
    try:
        for index in range(count):
            if _stop_pending():
                break  # stopped while forking: the workers forked so far are stopped
            pid = os.fork()
            if pid == 0:
                _run_child(index, worker, defaults, parent)
            workers[pid] = index
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        _log.info("http_workers_started", workers=len(workers))
        return _supervise(workers, lambda: stopping, lambda: stop(signal.SIGTERM, None))
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        for signum, handler in defaults.items():
            signal.signal(signum, handler)


def _stop_pending() -> bool:
    """Whether a stop signal arrived while the stop signals are blocked (forking)."""
    return not signal.sigpending().isdisjoint(STOP_SIGNALS)


def _supervise(
    workers: dict[int, int], stopping: Callable[[], bool], stop_all: Callable[[], None]
) -> int:
    ended_by_itself = False
    while workers:
        pid, status = os.waitpid(-1, 0)  # retried after a signal's handler (PEP 475)
        index = workers.pop(pid, None)
        if index is None:
            continue  # not a worker (a child the application started)
        if not stopping():
            _log.error(
                "http_worker_ended", worker=index, exit_code=os.waitstatus_to_exitcode(status)
            )
            ended_by_itself = True
            stop_all()
    return EXIT_WORKER_ENDED if ended_by_itself else EXIT_OK


__all__ = [
    "EXIT_OK",
    "EXIT_WORKER_ENDED",
    "ListenFailed",
    "WorkerMain",
    "listening_socket",
    "run_workers",
]
