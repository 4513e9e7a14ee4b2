"""The ``turnkeeper`` command line: serve, migrate, jobs, demo-world, check, mcp.

Exit codes: 0 success (also after Ctrl-C or SIGTERM), 2 bad usage or configuration (one line on
standard error; also a ``TURNKEEPER_OWNER_TOKEN`` that was revoked, a malformed
``TURNKEEPER_DATABASE_URL`` and a ``TURNKEEPER_DATA_DIR`` that cannot be a directory),
1 anything else (one line on standard error; also an address ``serve`` or ``mcp --http``
cannot listen on, which is bound before anything else is done).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
import sys
import tempfile
from collections.abc import Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn, TextIO

from turnkeeper.adapters.config import Config, ConfigError, decimal, load_config
from turnkeeper.adapters.http import create_app
from turnkeeper.adapters.http.server import (
    ACCEPT_BACKLOG,
    event_loop_factory,
    guarded_server,
    settle_heap,
)
from turnkeeper.adapters.http.workers import ListenFailed, listening_socket, run_workers
from turnkeeper.adapters.logging import configure_from_settings
from turnkeeper.adapters.mcp.command import add_command as add_mcp_command
from turnkeeper.adapters.mcp.command import port_number, run_mcp
from turnkeeper.adapters.observability.shared_metrics import (
    own_process_metrics,
    share_process_metrics,
)
from turnkeeper.adapters.observability.tracing import OtelTracing, process_tracing
from turnkeeper.adapters.postgres.embedded import EmbeddedServerMissing
from turnkeeper.adapters.postgres.invariants import check_database
from turnkeeper.adapters.postgres.migrations import migrate
from turnkeeper.adapters.wiring import (
    Backend,
    database,
    memory_backend,
    postgres_backend,
    require_database,
    signing_key,
    stop_as_ctrl_c,
)
from turnkeeper.adapters.world_setup import (
    check_demo_world,
    prepare_world,
    print_json,
    setting_up,
    store_demo_world,
    world_is_empty,
)
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.errors import StoreUnavailable
from turnkeeper.application.logs import get_logger
from turnkeeper.application.services.tokens import OwnerTokenRefused
from turnkeeper.application.settings import MAX_COUNT

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

#: The name prefix of the directory where the workers of a server share their metrics.
SHARED_METRICS_PREFIX = "turnkeeper-metrics-"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


class UsageError(Exception):
    """The command line is not valid."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse prints the whole usage; the contract is one line on stderr.
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``turnkeeper``.

    Returns:
        The parser with its sub-commands.
    """
    parser = _Parser(prog="turnkeeper", description="Keeps the turns of AI agents in threads.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    serve = commands.add_parser("serve", help="migrate, then serve the HTTP API")
    serve.add_argument("--host", default=DEFAULT_HOST, help="address to listen on")
    serve.add_argument(
        "--port", type=port_number, default=DEFAULT_PORT, help="port to listen on (0 to 65535)"
    )
    serve.add_argument(
        "--demo", action="store_true", help="create the demo world when the world is empty"
    )
    serve.add_argument("--no-jobs", action="store_true", help="do not run the periodic jobs")
    serve.add_argument(
        "--workers",
        type=_positive_int,
        default=None,
        help="worker processes sharing the socket (default: http.workers)",
    )
    serve.add_argument(
        "--memory",
        action="store_true",
        help="serve from an in-process store instead of PostgreSQL (lost on exit)",
    )
    commands.add_parser("migrate", help="apply pending database migrations")
    jobs = commands.add_parser("jobs", help="run the periodic jobs (every jobs.interval)")
    jobs.add_argument("--once", action="store_true", help="one pass, then exit")
    commands.add_parser("demo-world", help="create the demo world and print its tokens")
    commands.add_parser("check", help="check the database's invariants (exit 1 on a violation)")
    add_mcp_command(commands)
    return parser


def _positive_int(text: str) -> int:
    value = decimal(text, MAX_COUNT)
    if value is None or not 1 <= value <= MAX_COUNT:
        raise argparse.ArgumentTypeError(
            f"expected a whole number from 1 to {MAX_COUNT}, got {text!r}"
        )
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: the arguments (``sys.argv[1:]`` when None).

    Returns:
        The exit code.
    """
    own_process_metrics()
    try:
        args = build_parser().parse_args(argv)
        config = load_config()
    except UsageError as exc:
        return _fail(f"turnkeeper: error: {exc}", EXIT_USAGE)
    except ConfigError as exc:
        return _fail(f"turnkeeper: {exc}", EXIT_USAGE)
    configure_from_settings(config.settings)
    if args.command == "serve":
        return _serve_command(args, config)
    handlers: dict[str, Callable[[argparse.Namespace, Config], Coroutine[Any, Any, int]]] = {
        "migrate": _migrate,
        "jobs": _jobs,
        "demo-world": _demo_world,
        "check": _check,
        "mcp": run_mcp,
    }
    command = handlers[args.command]
    return _guarded(lambda: _stoppable(lambda: asyncio.run(command(args, config))))


class _StopSignal:
    """Whether a stop signal came while the command ran.

    A `KeyboardInterrupt` raised by a signal handler is lost when it falls in a
    finalizer (a weakref callback, a ``__del__``): Python prints it and goes on. What
    the command would then start next (the workers, uvicorn) asks here first.
    """

    def __init__(self) -> None:
        self.received = False


_stop_signal = _StopSignal()


def _stoppable(run: Callable[[], int]) -> int:
    """Run a command with SIGTERM stopping it as Ctrl-C does (exit 0, resources released).

    SIGTERM's default ends the process at once: ``jobs`` then left the embedded
    PostgreSQL it started running, with its dead pid among the server's users, so that
    no later command stopped it either. SIGTERM does what SIGINT would do at that
    moment: inside `asyncio.Runner`, cancel the command's task (the loop cannot lose
    that); elsewhere raise `KeyboardInterrupt`. Either unwinds the command (its pool
    closed, the embedded server stopped); the embedded server's start and stop hold a
    stop back until they are done (`stop_signals_held`), so that neither is cut in
    half. A server inside the command (``serve``, ``mcp --http``) installs its own
    handlers while it serves and restores these once it has stopped; ``serve`` with
    several workers passes a stop on to them while they run.
    """
    _stop_signal.received = False
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        return run()
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    _stop_signal.received = True
    stop_as_ctrl_c(signum, frame)


def _guarded(run: Callable[[], int]) -> int:
    """Run a command, mapping its failures to the exit codes of the module docstring."""
    try:
        return run()
    except KeyboardInterrupt:
        # Ctrl-C is the normal way to stop `serve`; every resource was released on the way.
        return EXIT_OK
    except (EmbeddedServerMissing, OwnerTokenRefused, ConfigError) as exc:
        return _fail(f"turnkeeper: {exc}", EXIT_USAGE)
    except ListenFailed as exc:
        return _fail(f"turnkeeper: {exc}", EXIT_FAILURE)
    except SystemExit as exc:
        # uvicorn exits with its own code (3) when the application does not start; the
        # command keeps to its codes and its one line.
        if exc.code in (None, EXIT_OK):
            return EXIT_OK
        return _fail("turnkeeper: the server did not start (see the log above)", EXIT_FAILURE)
    except Exception as exc:  # the last line of defence: one line, exit code 1
        return _fail(f"turnkeeper: {type(exc).__name__}: {exc}".splitlines()[0], EXIT_FAILURE)


def _fail(line: str, code: int, stream: TextIO | None = None) -> int:
    print(line, file=stream or sys.stderr)
    return code


def _connect_within(config: Config) -> float:
    """Seconds a command's connection attempt may take: ``database.request_timeout``."""
    return config.settings.request_timeout.total_seconds()


async def _migrated(conninfo: str, config: Config) -> list[str]:
    """`migrate`, its connection attempt bounded (`_connect_within`)."""
    return await migrate(conninfo, connect_within=_connect_within(config))


async def _migrate(args: argparse.Namespace, config: Config) -> int:
    with database(config) as conninfo:
        applied = await _migrated(conninfo, config)
    print_json({"applied": applied})
    return EXIT_OK


def _traced(backend: Backend, tracing: OtelTracing | None) -> Backend:
    """The backend with the process's traces attached (when they are configured)."""
    if tracing is not None:
        backend.services.telemetry.attach(tracing)
    return backend


async def _jobs(args: argparse.Namespace, config: Config) -> int:
    require_database(config)
    key = signing_key(config)  # a key file that cannot be used stops it before the database
    with database(config) as conninfo:
        await _migrated(conninfo, config)
        with process_tracing() as tracing:
            async with postgres_backend(conninfo, config.settings, key) as pg:
                return await _run_jobs(args, _traced(pg, tracing))


async def _run_jobs(args: argparse.Namespace, backend: Backend) -> int:
    if args.once:
        print_json(await backend.services.runs.run_jobs_once())
        return EXIT_OK
    interval = backend.services.settings.jobs_interval.total_seconds()
    # The line an operator (and a supervisor's readiness check) sees once the jobs run.
    get_logger("turnkeeper.jobs").info("jobs_started", interval_seconds=interval)
    await run_jobs_forever(backend.services)
    return EXIT_OK


async def run_jobs_forever(services: Services) -> None:
    """Run every job, then wait ``jobs.interval`` seconds, until cancelled.

    A failing pass is logged and the loop goes on: the next pass retries the same rows.

    Args:
        services: the services whose jobs run.
    """
    log = get_logger("turnkeeper.jobs")
    while True:
        try:
            ended = await services.runs.run_jobs_once()
            if any(ended.values()):
                log.info("jobs_pass", **ended)
        except StoreUnavailable:
            # Expected while the database is down: one line, no stack, every pass.
            log.warning("jobs_pass_unavailable")
        except Exception:
            log.exception("jobs_pass_failed")
        await asyncio.sleep(services.settings.jobs_interval.total_seconds())


async def _check(args: argparse.Namespace, config: Config) -> int:
    with database(config) as conninfo:
        violations = await check_database(conninfo, connect_within=_connect_within(config))
    for violation in violations:
        print(violation.line(), flush=True)
    return EXIT_FAILURE if violations else EXIT_OK


async def _demo_world(args: argparse.Namespace, config: Config) -> int:
    await check_demo_world(config.settings)
    require_database(config)
    key = signing_key(config)  # a key file that cannot be used stops it before the database
    with database(config) as conninfo:
        await _migrated(conninfo, config)
        async with (
            postgres_backend(conninfo, config.settings, key) as backend,
            setting_up(conninfo),
        ):
            if not await world_is_empty(backend):
                return _fail("turnkeeper: the world is not empty; demo-world needs a new one", 1)
            await store_demo_world(backend, config)
    return EXIT_OK


def _run_on_loop(main: Coroutine[Any, Any, int], config: Config) -> int:
    """Run a coroutine on the event loop of ``http.event_loop`` (uvloop when installed)."""
    with asyncio.Runner(loop_factory=event_loop_factory(config.settings.http_event_loop)) as run:
        return run.run(main)


def _serve_command(args: argparse.Namespace, config: Config) -> int:
    if args.memory and args.workers is not None and args.workers > 1:
        # Each worker would hold a store of its own: one world per process.
        return _fail(
            "turnkeeper: error: --memory serves from one process, not --workers", EXIT_USAGE
        )
    # Stoppable from the start: a stop while the embedded server starts, the migrations
    # run or the application is built (before uvicorn's own handlers, and in the parent
    # of several workers before it forks) releases what was started and exits 0.
    return _guarded(lambda: _stoppable(lambda: _serve_bound(args, config)))


def _worker_count(args: argparse.Namespace, config: Config) -> int:
    """``--workers``, else ``http.workers``, which ``--memory`` takes only as 1.

    Raises:
        ConfigError: ``http.workers`` (from the environment or the file) is above 1
            with ``--memory``.
    """
    if args.workers is not None:
        return int(args.workers)
    workers = config.settings.http_workers
    if args.memory and workers > 1:
        raise ConfigError(
            f"http.workers must be 1 with --memory (one store per process), got {workers}"
        )
    return workers


def _serve_bound(args: argparse.Namespace, config: Config) -> int:
    """Bind (a taken port fails first), read the key (before the database), then serve."""
    workers = _worker_count(args, config)
    with listening_socket(args.host, args.port, ACCEPT_BACKLOG) as sock:
        if args.memory:
            return _run_on_loop(_serve_memory(args, config, sock), config)
        require_database(config)
        key = signing_key(config)  # a key file that cannot be used stops it here
        if workers == 1:
            return _run_on_loop(_serve(args, config, key, sock), config)
        return _serve_workers(args, config, key, workers, sock)


def _serve_workers(
    args: argparse.Namespace, config: Config, key: bytes, workers: int, sock: socket.socket
) -> int:
    """Migrate and create the owner once, then fork the workers onto the one socket."""
    with database(config) as conninfo, _shared_metrics(config) as shared:
        asyncio.run(_prepare_once(args, config, conninfo, key))

        def worker(index: int) -> int:
            if _stop_signal.received:
                return EXIT_OK  # the parent's stop came as the worker began
            if shared is not None:
                share_process_metrics(shared)
            # Worker 0 runs the periodic jobs: one pass at a time for the server.
            jobs = index == 0 and not args.no_jobs
            serve = _serve_worker(args, config, conninfo, key, sock, jobs=jobs)
            return _guarded(lambda: _run_on_loop(serve, config))

        if _stop_signal.received:
            return EXIT_OK
        return run_workers(workers, worker)


@contextlib.contextmanager
def _shared_metrics(config: Config) -> Iterator[Path | None]:
    """A fresh directory for the workers' shared metrics, removed when the server ends.

    Yields:
        The directory, or None while ``metrics.enabled`` is false.
    """
    if not config.settings.metrics_enabled:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix=SHARED_METRICS_PREFIX) as directory:
        yield Path(directory)


async def _prepare_once(
    args: argparse.Namespace, config: Config, conninfo: str, key: bytes
) -> None:
    await _migrated(conninfo, config)
    async with postgres_backend(conninfo, config.settings, key) as pg:
        await prepare_world(config, pg, demo=args.demo, conninfo=conninfo)


async def _serve_worker(
    args: argparse.Namespace,
    config: Config,
    conninfo: str,
    key: bytes,
    sock: socket.socket,
    *,
    jobs: bool,
) -> int:
    with process_tracing() as tracing:
        async with postgres_backend(conninfo, config.settings, key) as pg:
            await _serve_app(args, config, _traced(pg, tracing), sock=sock, jobs=jobs)
    return EXIT_OK


async def _serve_memory(args: argparse.Namespace, config: Config, sock: socket.socket) -> int:
    with process_tracing() as tracing:
        await _run(args, config, _traced(memory_backend(config.settings), tracing), sock)
    return EXIT_OK


async def _serve(args: argparse.Namespace, config: Config, key: bytes, sock: socket.socket) -> int:
    with database(config) as conninfo:
        await _migrated(conninfo, config)
        # After the migrations, before the pool: the pool's connections are traced.
        with process_tracing() as tracing:
            async with postgres_backend(conninfo, config.settings, key) as pg:
                await _run(args, config, _traced(pg, tracing), sock, conninfo=conninfo)
    return EXIT_OK


async def _run(
    args: argparse.Namespace,
    config: Config,
    backend: Backend,
    sock: socket.socket,
    *,
    conninfo: str | None = None,
) -> None:
    await prepare_world(config, backend, demo=args.demo, conninfo=conninfo)
    await _serve_app(args, config, backend, jobs=not args.no_jobs, sock=sock)


async def _serve_app(
    args: argparse.Namespace,
    config: Config,
    backend: Backend,
    *,
    jobs: bool,
    sock: socket.socket,
) -> None:
    app = create_app(backend.services, config.settings, backend.readiness)
    # Ready to serve: the address as bound (with --port 0 the kernel picked the port).
    get_logger("turnkeeper.http").info("http_listening", host=args.host, port=sock.getsockname()[1])
    server = guarded_server(
        app,
        host=args.host,
        port=args.port,
        settings=config.settings,
        live=backend.services.live,
        sock=sock,
    )
    runner = asyncio.create_task(run_jobs_forever(backend.services)) if jobs else None
    settle_heap(config.settings.http_gc_threshold)
    try:
        # A stop whose KeyboardInterrupt was lost on the way ends start-up here: uvicorn
        # handles the signals only from the moment it serves.
        if not _stop_signal.received:
            await server.serve()
    finally:
        if runner is not None:
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner


def run() -> NoReturn:
    """Entry point of the console script."""
    sys.exit(main())


if __name__ == "__main__":
    run()
