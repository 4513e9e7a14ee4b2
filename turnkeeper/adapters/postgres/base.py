"""What every PostgreSQL repository shares: its base class, the connection type, `MissingRow`.

Also the text form of an id array, which statements take where a ``uuid[]`` parameter
would cost psycopg an array dump (`uuid_array_text`).

Each repository runs the generated statements of `turnkeeper.adapters.postgres.queries` on
the connection of its unit of work (so inside the unit's transaction) and maps rows to the
frozen domain values. Driver errors are translated by the unit (`wrap_errors`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import psycopg

#: A connection of the pool; repositories run on their unit's one.
Conn = psycopg.AsyncConnection[Any]


class MissingRow(LookupError):
    """A statement that must touch one row found none (an unknown id: a caller bug)."""


class PostgresRepository:
    """Base of the repositories: each runs its statements on its unit's connection.

    Args:
        conn: the unit's connection.
    """

    def __init__(self, conn: Conn) -> None:
        self._conn = conn


def uuid_array_text(ids: Sequence[uuid.UUID] | None) -> str | None:
    """The text form of a ``uuid[]`` (``{a,b}``), None for NULL.

    Args:
        ids: the ids, or None.

    Returns:
        The array literal, or None.
    """
    if ids is None:
        return None
    return "{" + ",".join(str(i) for i in ids) + "}"
