"""Test databases on the PostgreSQL server, and raw SQL for tests that inspect or corrupt rows.

The fixtures of tests/conftest.py and the model-based test build their databases with
`turnkeeper.adapters.postgres.databases` (the benchmarks too), their names prefixed with
`TEST_DATABASE_PREFIX`.
"""

from __future__ import annotations

from typing import Any

import psycopg

from turnkeeper.adapters.postgres import databases
from turnkeeper.adapters.postgres.databases import database_conninfo, drop_database

#: The prefix of every database the tests create (so that a leftover is recognisable).
TEST_DATABASE_PREFIX = "tk_test_"

__all__ = [
    "TEST_DATABASE_PREFIX",
    "create_database",
    "database_conninfo",
    "drop_database",
    "execute",
    "fetch",
]


async def create_database(server_conninfo: str, template: str | None = None) -> str:
    """A new test database (named with `TEST_DATABASE_PREFIX`), optionally from a template.

    Args:
        server_conninfo: conninfo of the server's admin database.
        template: the template database, or None for an empty one.

    Returns:
        The new database's name.
    """
    return await databases.create_database(
        server_conninfo, prefix=TEST_DATABASE_PREFIX, template=template
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
