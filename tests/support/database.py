"""Test databases on the PostgreSQL server, and raw SQL for tests that inspect or corrupt rows.

Creating and dropping databases needs a connection outside a transaction block; the
fixtures of tests/conftest.py and the model-based test build their databases with these.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

#: The prefix of every database the tests create (so that a leftover is recognisable).
TEST_DATABASE_PREFIX = "tk_test_"


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
    # CREATE/DROP DATABASE cannot run inside a transaction block.
    async with await psycopg.AsyncConnection.connect(server_conninfo, autocommit=True) as conn:
        await conn.execute(statement)


async def create_database(server_conninfo: str, template: str | None = None) -> str:
    """Create a uniquely named database, optionally cloned from a template.

    Args:
        server_conninfo: conninfo of the server's admin database.
        template: the template database, or None for an empty one.

    Returns:
        The new database's name.
    """
    name = f"{TEST_DATABASE_PREFIX}{uuid.uuid4().hex[:16]}"
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        statement = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(template)
        )
    await _admin(server_conninfo, statement)
    return name


async def drop_database(server_conninfo: str, name: str) -> None:
    """Drop a database, closing connections left open on it.

    Args:
        server_conninfo: conninfo of the server's admin database.
        name: the database.
    """
    await _admin(
        server_conninfo,
        sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)),
    )


async def execute(conninfo: str, statement: str, params: dict[str, Any] | None = None) -> int:
    """Run one raw statement in its own transaction (tests corrupt rows with it).

    Returns:
        The number of rows it affected.
    """
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        cursor = await conn.execute(statement.encode(), params)
        return int(cursor.rowcount)


async def fetch(conninfo: str, statement: str, params: dict[str, Any] | None = None) -> list[Any]:
    """The rows of one raw read-only query."""
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        cursor = await conn.execute(statement.encode(), params)
        return list(await cursor.fetchall())
