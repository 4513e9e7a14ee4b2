"""Whole databases on a server: create, drop, or hold a migrated scratch database.

Test runs and benchmarks use them: `create_database` (empty or from a template),
`drop_database`, and `scratch_database` for the length of a block.

The role of the conninfo needs CREATEDB. ``CREATE DATABASE`` and ``DROP DATABASE``
cannot run inside a transaction block, so each runs on its own autocommit connection.

Example:
    >>> async with scratch_database(server_conninfo) as conninfo:  # doctest: +SKIP
    ...     async with postgres_backend(conninfo, settings, key) as backend:
    ...         ...
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from turnkeeper.adapters.postgres.migrations import migrate

#: Hex digits of the random part of a new database's name.
_NAME_DIGITS = 16


def database_conninfo(server_conninfo: str, dbname: str) -> str:
    """The conninfo of another database on the same server.

    Args:
        server_conninfo: any conninfo of the server.
        dbname: the database.

    Returns:
        The conninfo with `dbname` replaced.
    """
    return make_conninfo(server_conninfo, dbname=dbname)


async def _admin(server_conninfo: str, statement: sql.Composed) -> None:
    async with await psycopg.AsyncConnection.connect(server_conninfo, autocommit=True) as conn:
        await conn.execute(statement)


async def create_database(
    server_conninfo: str, *, prefix: str = "turnkeeper_", template: str | None = None
) -> str:
    """Create a uniquely named database, optionally cloned from a template.

    Args:
        server_conninfo: conninfo of a database of the server (its admin database).
        prefix: the start of the new name (a random hex part follows).
        template: the template database, or None for an empty one.

    Returns:
        The new database's name.
    """
    name = f"{prefix}{uuid.uuid4().hex[:_NAME_DIGITS]}"
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        statement = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(template)
        )
    await _admin(server_conninfo, statement)
    return name


async def drop_database(server_conninfo: str, name: str) -> None:
    """Drop a database, closing connections left open on it (no error when it is gone).

    Args:
        server_conninfo: conninfo of another database of the server.
        name: the database.
    """
    await _admin(
        server_conninfo,
        sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)),
    )


@asynccontextmanager
async def scratch_database(
    server_conninfo: str, *, prefix: str = "turnkeeper_"
) -> AsyncIterator[str]:
    """A new database with every migration applied, dropped when the block ends.

    Args:
        server_conninfo: conninfo of a database of the server.
        prefix: the start of the database's name.

    Yields:
        The conninfo of the scratch database.
    """
    name = await create_database(server_conninfo, prefix=prefix)
    try:
        conninfo = database_conninfo(server_conninfo, name)
        await migrate(conninfo)
        yield conninfo
    finally:
        await drop_database(server_conninfo, name)
