"""Schema migrations: apply sql/migrations/*.sql in order, once, and refuse drift.

Each migration file runs in its own transaction that first takes a transaction-scoped
advisory lock, so concurrent migrators (two servers starting at once) apply every file
exactly once: the second waits, then sees the version recorded and skips it. Every
applied file is recorded in ``schema_migrations`` with the SHA-256 of its bytes.

Before anything is applied, the ledger is compared with the files: an applied version
whose file is gone, or whose file changed since, stops the start with `MigrationError`
naming the file. A migration is never edited after it was applied; a new file is
written instead.

After the files, every migrate aligns the event seqs: a database restored into another
PostgreSQL cluster has a transaction id counter behind its events, and its seq offset is
raised above them before anything is served (ADR 0038).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import attrs
import psycopg

from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.postgres.errors import bounded_conninfo, require_conninfo, wrap_errors
from turnkeeper.application.errors import ApplicationError
from turnkeeper.application.logs import get_logger

#: The file every SQL directory holds; it tells the directory apart from an empty one.
_BOOTSTRAP = "bootstrap.sql"

_log = get_logger("turnkeeper.postgres")


@cache
def sql_dir() -> Path:
    """The directory holding bootstrap.sql, migrations/ and queries/.

    An installed wheel carries it inside the package as ``turnkeeper/sql`` (package data);
    an editable checkout has it at the repository root, beside the package. Both are found
    through `importlib.resources`, so the answer does not depend on the working directory.

    Returns:
        The directory.

    Raises:
        MigrationError: when neither place holds the SQL files (a broken install).
    """
    package = Path(str(resources.files("turnkeeper")))
    for candidate in (package / "sql", package.parent / "sql"):
        if (candidate / _BOOTSTRAP).is_file():
            return candidate
    raise MigrationError(
        f"the SQL files of turnkeeper are missing: neither {package / 'sql'} nor "
        f"{package.parent / 'sql'} holds {_BOOTSTRAP}; reinstall the package"
    )


#: The key of the advisory lock every migration transaction takes (an arbitrary constant
#: that no other part of turnkeeper uses: the first 8 bytes of sha256("turnkeeper.migrate")).
MIGRATION_LOCK_KEY = int.from_bytes(
    hashlib.sha256(b"turnkeeper.migrate").digest()[:8], "big", signed=True
)

_VERSION = re.compile(r"^(\d{4})_[a-z0-9_]+$")

#: The migration that brings the event seq offset (ADR 0038): a directory of files that
#: stops before it (an older schema) has no seqs to align.
ALIGNED_SEQS_VERSION = "0011_event_seqs_across_a_restore"


class MigrationError(ApplicationError):
    """The migrations cannot be applied: a drifted or missing file, or a failing one."""

    code = "internal"


@attrs.frozen(kw_only=True)
class Migration:
    """One migration file.

    Attributes:
        version: the file name without ``.sql`` (``0001_conversation_core``).
        path: the file.
        sql: its bytes, run as they are (several statements, no parameters).
        checksum: SHA-256 hex digest of `sql`.
    """

    version: str
    path: Path
    sql: bytes
    checksum: str


def discover(directory: Path | None = None) -> list[Migration]:
    """The migration files in version order.

    Args:
        directory: where the files are (default ``sql/migrations``).

    Returns:
        The migrations, sorted by version.

    Raises:
        MigrationError: for a file name that is not ``NNNN_snake_name.sql``, a number
            used twice, or a folder without any migration (a broken install).
    """
    folder = directory or sql_dir() / "migrations"
    found: list[Migration] = []
    numbers: dict[str, str] = {}
    for path in sorted(folder.glob("*.sql")):
        match = _VERSION.match(path.stem)
        if match is None:
            raise MigrationError(f"migration file {path.name}: name must be NNNN_snake_name.sql")
        if match.group(1) in numbers:
            raise MigrationError(
                f"migration files {numbers[match.group(1)]} and {path.name} share a number"
            )
        numbers[match.group(1)] = path.name
        data = path.read_bytes()
        found.append(
            Migration(
                version=path.stem,
                path=path,
                sql=data,
                checksum=hashlib.sha256(data).hexdigest(),
            )
        )
    if not found:
        raise MigrationError(f"no migration files in {folder}")
    return found


def verify(applied: Mapping[str, str], migrations: Sequence[Migration]) -> None:
    """Refuse a ledger that the files no longer describe.

    Args:
        applied: version -> recorded checksum.
        migrations: the files.

    Raises:
        MigrationError: naming the first applied version whose file is missing or changed.
    """
    files = {m.version: m for m in migrations}
    for version, checksum in sorted(applied.items()):
        migration = files.get(version)
        if migration is None:
            raise MigrationError(
                f"migration {version} is applied but sql/migrations/{version}.sql is missing"
            )
        if migration.checksum != checksum:
            raise MigrationError(
                f"migration file {migration.path.name} changed after it was applied "
                f"(recorded sha256 {checksum}, file sha256 {migration.checksum}); "
                "restore it and put the change in a new migration"
            )


async def _applied(conn: psycopg.AsyncConnection[Any]) -> dict[str, str]:
    if not await q.schema_migrations_exists(conn):
        return {}
    return {row.version: row.checksum for row in await q.list_applied_migrations(conn)}


async def migrate(
    conninfo: str, *, directory: Path | None = None, connect_within: float | None = None
) -> list[str]:
    """Apply every pending migration, each in one transaction under the advisory lock.

    Args:
        conninfo: libpq connection string or URI of the database.
        directory: the migration files (default ``sql/migrations``).
        connect_within: seconds the connection attempt may take (``database.request_timeout``;
            None: libpq's own bound, none by default). The migrations themselves are not
            bounded: one may rewrite a large table.

    Then raises the event seq offset when the database was restored into another
    cluster (ADR 0038).

    Returns:
        The versions this call applied (empty when the schema was current).

    Raises:
        MigrationError: drift (changed or missing file) or a failing migration, naming
            the file.
        StoreUnavailable: the database cannot be reached.
        ValueError: for a connection string that does not parse.
    """
    require_conninfo(conninfo)
    migrations = discover(directory)
    bootstrap = (sql_dir() / _BOOTSTRAP).read_bytes()
    applied_now: list[str] = []
    with wrap_errors():
        target = bounded_conninfo(conninfo, connect_within)
        conn = await psycopg.AsyncConnection.connect(target, autocommit=True)
        async with conn:
            async with conn.transaction():
                await q.take_migration_lock(conn, lock_key=MIGRATION_LOCK_KEY)
                await conn.execute(bootstrap)
                verify(await _applied(conn), migrations)
            for migration in migrations:
                async with conn.transaction():
                    await q.take_migration_lock(conn, lock_key=MIGRATION_LOCK_KEY)
                    applied = await _applied(conn)
                    if migration.version in applied:
                        # A concurrent migrator applied it while we waited for the lock.
                        verify(applied, migrations)
                        continue
                    try:
                        await conn.execute(migration.sql)
                    except psycopg.Error as exc:
                        raise MigrationError(
                            f"migration file {migration.path.name} failed: {exc}"
                        ) from exc
                    await q.record_migration(
                        conn, version=migration.version, checksum=migration.checksum
                    )
                applied_now.append(migration.version)
            raised = None
            if any(m.version == ALIGNED_SEQS_VERSION for m in migrations):
                async with conn.transaction():
                    await q.take_migration_lock(conn, lock_key=MIGRATION_LOCK_KEY)
                    raised = await q.align_event_seqs(conn)
    if raised:
        # Only a database restored into another cluster gets here (ADR 0038).
        _log.warning("event_seqs_aligned", transaction_ids=raised)
    return applied_now


async def pending(
    conn: psycopg.AsyncConnection[Any], *, directory: Path | None = None
) -> list[str]:
    """The versions not applied yet (read-only; for /readyz and ``turnkeeper check``).

    Args:
        conn: a connection to the database.
        directory: the migration files (default ``sql/migrations``).

    Returns:
        Pending versions in order.

    Raises:
        MigrationError: when an applied migration's file changed or is missing.
    """
    waiting, _ = await _ledger(conn, discover(directory), aligned=False)
    return waiting


async def _ledger(
    conn: psycopg.AsyncConnection[Any], migrations: Sequence[Migration], *, aligned: bool
) -> tuple[list[str], bool]:
    """The pending versions and, when asked, whether the event seqs are aligned.

    Both are read in one transaction; the alignment only once its migration is recorded
    (before, its function does not exist), and True when not asked.

    Raises:
        MigrationError: when an applied migration's file changed or is missing.
    """
    with wrap_errors():
        async with conn.transaction():
            applied = await _applied(conn)
            seqs_aligned = (
                not aligned
                or ALIGNED_SEQS_VERSION not in applied
                or bool(await q.event_seqs_aligned(conn))
            )
    verify(applied, migrations)
    return [m.version for m in migrations if m.version not in applied], seqs_aligned


async def is_current(conn: psycopg.AsyncConnection[Any], *, directory: Path | None = None) -> bool:
    """Whether every migration is applied, none drifted and the event seqs are aligned.

    Args:
        conn: a connection to the database.
        directory: the migration files (default ``sql/migrations``).

    Returns:
        True when the schema is exactly what the files describe and every transaction to
        come derives event seqs above the last event (False for a database restored into
        another cluster and not migrated since: ADR 0038).
    """
    try:
        waiting, seqs_aligned = await _ledger(conn, discover(directory), aligned=True)
    except MigrationError:
        return False
    return not waiting and seqs_aligned
