"""Building the running application from configuration: store, services, readiness.

The infrastructure is chosen here, at the edge, once: the memory adapter, or PostgreSQL
(``TURNKEEPER_DATABASE_URL``, else the embedded server in the data directory) with a
connection pool and `PostgresUnitOfWorkFactory`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from datetime import timedelta
from pathlib import Path
from types import FrameType

import attrs
from psycopg_pool import AsyncConnectionPool

from turnkeeper.adapters.config import (
    ENV_DATA_DIR,
    ENV_SIGNING_KEY,
    MIN_SIGNING_KEY_BYTES,
    Config,
    ConfigError,
)
from turnkeeper.adapters.http.operations import Readiness, always_ready
from turnkeeper.adapters.http.workers import STOP_SIGNALS
from turnkeeper.adapters.memory import MemoryUnitOfWorkFactory
from turnkeeper.adapters.observability.metrics import attach_metrics
from turnkeeper.adapters.postgres.embedded import (
    EMBEDDED_SUBDIR,
    EmbeddedPostgres,
    require_embedded,
)
from turnkeeper.adapters.postgres.errors import require_conninfo
from turnkeeper.adapters.postgres.migrations import is_current
from turnkeeper.adapters.postgres.pool import PoolPolicy, connection_within
from turnkeeper.adapters.postgres.stream_places import PostgresStreamPlaces
from turnkeeper.adapters.postgres.uow import PostgresUnitOfWorkFactory, create_pool
from turnkeeper.adapters.postgres.wakeup import PostgresEventWaker
from turnkeeper.adapters.system import SystemClock, UuidV7Generator
from turnkeeper.adapters.tokens import JwtSigner
from turnkeeper.application.bootstrap import Services, build_services
from turnkeeper.application.settings import Settings

#: File in the data directory holding the invocation token key when none is configured.
SIGNING_KEY_FILE = "signing.key"
#: Random bytes of a generated signing key (HS256 wants at least 32).
SIGNING_KEY_BYTES = 32


@attrs.frozen(kw_only=True)
class Backend:
    """What the HTTP adapter and the command line need from the store.

    Attributes:
        services: the application services.
        readiness: the /readyz check.
    """

    services: Services
    readiness: Readiness


def require_database(config: Config) -> None:
    """Refuse a command that needs a database when it can have none, before it makes files.

    Without ``TURNKEEPER_DATABASE_URL`` the database is the embedded server, whose extra
    may be missing: the command is refused before the signing key or the server's folder
    is made in the data directory.

    Args:
        config: the process configuration.

    Raises:
        EmbeddedServerMissing: no database URL and no ``embedded`` extra.
    """
    if config.database_url is None:
        require_embedded()


def signing_key(config: Config) -> bytes:
    """The key of invocation tokens: configured, or kept in the data directory.

    The key file is made once, whole (written aside with owner-only permissions, then
    linked into place), so tokens stay valid across restarts of a deployment that uses
    one data directory, and processes that start together all take the first one made.
    Read it before the database is touched: a file that cannot hold a key stops the
    command first.

    Args:
        config: the process configuration.

    Returns:
        The key bytes.

    Raises:
        ConfigError: when the key file cannot be read or made, or holds fewer than
            `MIN_SIGNING_KEY_BYTES` bytes (an empty file left by a crash among them).
    """
    if config.signing_key is not None:
        return config.signing_key.encode("utf-8")
    path = config.data_dir / SIGNING_KEY_FILE
    if not path.exists():
        try:
            _write_secret(path, secrets.token_hex(SIGNING_KEY_BYTES))
        except OSError as exc:
            raise ConfigError(
                f"{ENV_DATA_DIR} cannot hold the signing key ({path}): "
                f"{exc.strerror or type(exc).__name__}"
            ) from exc
    try:
        key = path.read_text(encoding="utf-8").strip().encode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8"
        raise ConfigError(
            f"signing key file {str(path)!r} cannot be read ({reason or type(exc).__name__})"
        ) from exc
    if len(key) < MIN_SIGNING_KEY_BYTES:
        # Never repeated: a short key is still a secret. An empty or short file signs
        # nothing safely (PyJWT refuses an empty key at the first token).
        raise ConfigError(
            f"signing key file {str(path)!r} must hold at least {MIN_SIGNING_KEY_BYTES} "
            f"bytes, got {len(key)} (remove it to make a new key, or set {ENV_SIGNING_KEY})"
        )
    return key


def _write_secret(path: Path, text: str) -> None:
    """Make `path` hold `text`, whole, unless another process made it first.

    Written to a temporary file beside it (owner-only, synced), then hard-linked to
    `path`: a link never replaces a file, so the first process to link wins and the
    others read its key; a crash leaves no file or a whole one, never an empty one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    # mkstemp creates the file with owner-only permissions (0600).
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            return  # another process made it first: its key is the deployment's
        _sync_directory(path.parent)
    finally:
        os.unlink(temporary)


def _sync_directory(folder: Path) -> None:
    """Make a new entry of `folder` durable (its link survives a power loss)."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def memory_backend(settings: Settings, key: bytes | None = None) -> Backend:
    """Services over a fresh in-process store (data is lost with the process).

    Args:
        settings: the configuration.
        key: the invocation token key (a random one when None: nothing outlives the
            process anyway).

    Returns:
        The backend, always ready.

    Raises:
        ValueError: for a key shorter than `MIN_SIGNING_KEY_BYTES`.
    """
    signer = JwtSigner(secrets.token_bytes(SIGNING_KEY_BYTES) if key is None else key)
    services = build_services(
        MemoryUnitOfWorkFactory(), settings, SystemClock(), UuidV7Generator(), signer
    )
    if settings.metrics_enabled:
        # From the start, so that what happens before the app exists is counted too.
        attach_metrics(services.telemetry)
    return Backend(services=services, readiness=always_ready)


@contextmanager
def database(config: Config) -> Iterator[str]:
    """The configured database's connection string, for the duration of a block.

    Without ``TURNKEEPER_DATABASE_URL`` the embedded server is started in
    ``<data dir>/pgdata`` and stopped when the block ends (also on Ctrl-C). SIGTERM or
    SIGINT while it starts or stops takes effect once it has (`stop_signals_held`).

    Args:
        config: the process configuration.

    Yields:
        A libpq connection string or URI.

    Raises:
        ConfigError: when the data directory cannot hold the embedded server's files
            (a file, not writable).
        EmbeddedServerMissing: without a database URL, when the ``embedded`` extra is
            not installed (nothing is made).
        StoreUnavailable: when the embedded server does not start.
    """
    if config.database_url is not None:
        yield config.database_url
        return
    require_embedded()
    folder = config.data_dir / EMBEDDED_SUBDIR
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # A folder that exists already (a read-only mount of a data directory in use)
        # is made without a write: the server would fail later without a reason.
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise ConfigError(
            f"{ENV_DATA_DIR} cannot hold the embedded database ({folder}): "
            f"{exc.strerror or type(exc).__name__}"
        ) from exc
    with ExitStack() as stop:
        # A stop signal while the server starts would leave it running without this
        # process among its users, or this process's pid among them after it ended: it
        # waits until the server is up and its stop is registered, then takes effect.
        with stop_signals_held():
            server = EmbeddedPostgres.start(folder)
            stop.callback(_stop_embedded, server)
        yield server.conninfo


def _stop_embedded(server: EmbeddedPostgres) -> None:
    with stop_signals_held():
        server.stop()


def stop_as_ctrl_c(signum: int, frame: FrameType | None) -> None:
    """A SIGTERM handler that does what Ctrl-C (SIGINT) would do at that moment.

    Inside `asyncio.run` its SIGINT handler cancels the main task, which the loop cannot
    lose; a `KeyboardInterrupt` raised by the handler itself could fall in a finalizer
    (a weakref callback), where Python prints and drops it. Elsewhere it is Python's
    `KeyboardInterrupt`.

    Args:
        signum: the signal received.
        frame: the frame it interrupted.

    Raises:
        KeyboardInterrupt: when no SIGINT handler takes it.
    """
    on_sigint = signal.getsignal(signal.SIGINT)
    if callable(on_sigint) and on_sigint is not stop_as_ctrl_c:
        on_sigint(signal.SIGINT, frame)
        return
    raise KeyboardInterrupt


@contextmanager
def stop_signals_held() -> Iterator[None]:
    """Hold SIGTERM and SIGINT back while a block runs, then deliver them.

    A stop signal received during the block is noted instead of handled; when the block
    ends, the handlers from before are back and each noted signal is raised again, so
    that it does then what it would have done (a command's `KeyboardInterrupt`). Outside
    the main thread, where no handler can be set, the block runs as it is.

    Yields:
        Nothing; the block runs with the signals held.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    # A handler set outside Python (None) could not be set again afterwards: left alone.
    previous = {
        signum: handler
        for signum in STOP_SIGNALS
        if (handler := signal.getsignal(signum)) is not None
    }
    for signum in previous:
        signal.signal(signum, note)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    for noted in dict.fromkeys(received):
        signal.raise_signal(noted)


def postgres_readiness(pool: AsyncConnectionPool, settings: Settings) -> Readiness:
    """The /readyz check of a PostgreSQL backend.

    Args:
        pool: the backend's pool.
        settings: for ``database.readiness_timeout``, the bound of the whole check
            (waiting for a connection included, also when the database is frozen).

    Returns:
        A check answering None, ``database_unreachable`` or ``migrations_pending``.
    """
    bound = settings.readiness_timeout.total_seconds()

    async def check() -> str | None:
        try:
            async with connection_within(pool, bound) as conn:
                current = await is_current(conn)
        except Exception:  # any failure to talk to the database means "not ready"
            return "database_unreachable"
        return None if current else "migrations_pending"

    return check


@asynccontextmanager
async def postgres_backend(conninfo: str, settings: Settings, key: bytes) -> AsyncIterator[Backend]:
    """Services over PostgreSQL, with the pool closed when the block ends.

    Args:
        conninfo: the database (migrated beforehand).
        settings: the configuration.
        key: the invocation token key (see `signing_key`).

    Yields:
        The backend.

    Raises:
        ValueError: for a connection string that does not parse, or a key shorter than
            `MIN_SIGNING_KEY_BYTES`.
        StoreUnavailable: when no connection can be opened.
    """
    require_conninfo(conninfo)
    signer = JwtSigner(key)  # a short key is refused before any connection is opened
    policy = PoolPolicy.from_settings(settings)
    pool = await create_pool(
        conninfo, min_size=settings.pool_min_size, max_size=settings.pool_max_size, policy=policy
    )
    # One watching connection for the life of the process: events of every process wake
    # this one's long-polls and streams once they are readable.
    waker = PostgresEventWaker(
        conninfo,
        check_interval=settings.stream_heartbeat,
        watch_interval=timedelta(milliseconds=settings.stream_watch_interval_ms),
    )
    # The places of event streams: one connection per process, opened at the first stream.
    places = PostgresStreamPlaces(conninfo, policy)
    refresher: asyncio.Task[None] | None = None
    try:
        await waker.start()
        services = build_services(
            PostgresUnitOfWorkFactory(pool, policy=policy, waker=waker, places=places),
            settings,
            SystemClock(),
            UuidV7Generator(),
            signer,
        )
        if settings.metrics_enabled:
            # The pool's stats count as waiting only the units waiting now, not those
            # that gave up (`WaitCountingPool`).
            metrics = attach_metrics(services.telemetry, pool_stats=pool.get_stats)
            if metrics.shared is not None:
                # The other workers answer scrapes too: they read what this one wrote.
                refresher = asyncio.create_task(
                    metrics.refresh_pool_every(settings.metrics_pool_refresh)
                )
        yield Backend(services=services, readiness=postgres_readiness(pool, settings))
    finally:
        if refresher is not None:
            refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await refresher
        await waker.aclose()
        await places.aclose()
        await pool.close()
