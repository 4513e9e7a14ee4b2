"""What every PostgreSQL repository shares: its base class, the connection type, `MissingRow`.

Also the text form of an id array, which statements take where a ``uuid[]`` parameter
would cost psycopg an array dump (`uuid_array_text`), and one table's row out of a wider
row that holds its columns (`unprefixed`), and an enum's members by value
(`members_by_value`).

Each repository runs the generated statements of `turnkeeper.adapters.postgres.queries` on
the connection of its unit of work (so inside the unit's transaction) and maps rows to the
frozen domain values. Driver errors are translated by the unit (`wrap_errors`).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import attrs
import psycopg
from attrs import AttrsInstance

#: A connection of the pool; repositories run on their unit's one.
Conn = psycopg.AsyncConnection[Any]

_Row = TypeVar("_Row", bound=AttrsInstance)
_Enum = TypeVar("_Enum", bound=enum.Enum)


class MissingRow(LookupError):
    """A statement that must touch one row found none (an unknown id: a caller bug)."""


class PostgresRepository:
    """Base of the repositories: each runs its statements on its unit's connection.

    Args:
        conn: the unit's connection.
    """

    def __init__(self, conn: Conn) -> None:
        self._conn = conn


def members_by_value(kind: type[_Enum]) -> Mapping[Any, _Enum]:
    """An enum's members by their value, for the columns that store them.

    ``members_by_value(Origin)[row.origin]`` is ``Origin(row.origin)`` at the cost of a
    dictionary lookup: calling an enum class goes through ``EnumType.__call__``, about
    1 us each, paid for several columns of every row of a history page.

    Args:
        kind: the enum class.

    Returns:
        value -> member (an unknown value raises `KeyError`; the schema's checks keep
        such values out of the tables).
    """
    return {member.value: member for member in kind}


def unprefixed(row: object, prefix: str, kind: type[_Row]) -> _Row:
    """One table's row out of a wider row whose columns carry the table's names.

    Args:
        row: a result row of a join or of a statement that returns more columns.
        prefix: what precedes the table's column names in `row` (empty: none).
        kind: the generated row class of the table.

    Returns:
        The table's row.
    """
    return kind(**{f.name: getattr(row, prefix + f.name) for f in attrs.fields(kind)})


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
