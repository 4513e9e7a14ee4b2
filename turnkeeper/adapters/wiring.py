"""Building the running application from configuration: store, services, readiness.

The infrastructure is chosen here, at the edge, once: the memory adapter, or PostgreSQL
(``TURNKEEPER_DATABASE_URL``, else the embedded server in the data directory) with a
connection pool and `PostgresUnitOfWorkFactory`.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta
from pathlib import Path

import attrs
from psycopg_pool import AsyncConnectionPool

from turnkeeper.adapters.config import ENV_DATA_DIR, Config, ConfigError
from turnkeeper.adapters.http.operations import Readiness, always_ready
from turnkeeper.adapters.memory import MemoryUnitOfWorkFactory
from turnkeeper.adapters.observability.metrics import attach_metrics
from turnkeeper.adapters.postgres.embedded import EMBEDDED_SUBDIR, EmbeddedPostgres
from turnkeeper.adapters.postgres.errors import require_conninfo
from turnkeeper.adapters.postgres.migrations import is_current
from turnkeeper.adapters.postgres.pool import PoolPolicy, connection_within
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
_OWNER_ONLY = 0o600


@attrs.frozen(kw_only=True)
class Backend:
    """What the HTTP adapter and the command line need from the store.

    Attributes:
        services: the application services.
        readiness: the /readyz check.
    """

    services: Services
    readiness: Readiness


def signing_key(config: Config) -> bytes:
    """The key of invocation tokens: configured, or kept in the data directory.

    The key file is made once with owner-only permissions, so tokens stay valid
    across restarts of a deployment that uses one data directory.

    Args:
        config: the process configuration.

    Returns:
        The key bytes.
    """
    if config.signing_key is not None:
        return config.signing_key.encode("utf-8")
    path = config.data_dir / SIGNING_KEY_FILE
    if not path.exists():
        _write_secret(path, secrets.token_hex(SIGNING_KEY_BYTES))
    return path.read_text(encoding="utf-8").strip().encode("utf-8")


def _write_secret(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _OWNER_ONLY)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)


def memory_backend(settings: Settings, key: bytes | None = None) -> Backend:
    """Services over a fresh in-process store (data is lost with the process).

    Args:
        settings: the configuration.
        key: the invocation token key (a random one when None: nothing outlives the
            process anyway).

    Returns:
        The backend, always ready.
    """
    signer = JwtSigner(key or secrets.token_bytes(SIGNING_KEY_BYTES))
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
    ``<data dir>/pgdata`` and stopped when the block ends (also on Ctrl-C).

    Args:
        config: the process configuration.

    Yields:
        A libpq connection string or URI.

    Raises:
        ConfigError: when the data directory cannot hold the embedded server's files
            (a file, not writable).
        StoreUnavailable: when the embedded server does not start.
    """
    if config.database_url is not None:
        yield config.database_url
        return
    folder = config.data_dir / EMBEDDED_SUBDIR
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"{ENV_DATA_DIR} cannot hold the embedded database ({folder}): "
            f"{exc.strerror or type(exc).__name__}"
        ) from exc
    server = EmbeddedPostgres.start(folder)
    try:
        yield server.conninfo
    finally:
        server.stop()


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
        ValueError: for a connection string that does not parse.
        StoreUnavailable: when no connection can be opened.
    """
    require_conninfo(conninfo)
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
    try:
        await waker.start()
        services = build_services(
            PostgresUnitOfWorkFactory(pool, policy=policy, waker=waker),
            settings,
            SystemClock(),
            UuidV7Generator(),
            JwtSigner(key),
        )
        if settings.metrics_enabled:
            # The pool's stats count as waiting only the units waiting now, not those
            # that gave up (`WaitCountingPool`).
            attach_metrics(services.telemetry, pool_stats=pool.get_stats)
        yield Backend(services=services, readiness=postgres_readiness(pool, settings))
    finally:
        await waker.aclose()
        await pool.close()
