"""Statements in PostgreSQL's own placeholders, converted once for the pipeline link.

The generated statement functions (`turnkeeper.adapters.postgres.queries`) write psycopg's
placeholders (``%(name)s``); libpq takes ``$1``, ``$2``. `converted` rewrites a statement
and orders its parameters; the generated statements, a fixed set registered by
`keep_statements`, are converted once per process, and the pipeline link
(`turnkeeper.adapters.postgres.executor`) prepares them once per connection.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import psycopg

_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%|%s")
Params = Mapping[str, Any] | Sequence[Any] | None


class Query:
    """A statement in PostgreSQL's placeholders, with its parameters' order.

    ``%(name)s`` placeholders (the generated statements') take their values by name,
    ``%s`` ones by position.
    """

    __slots__ = ("names", "native")

    def __init__(self, query: str) -> None:
        names: list[str] = []
        positions = 0

        def native(match: re.Match[str]) -> str:
            nonlocal positions
            text = match.group(0)
            if text == "%%":
                return "%"
            name = match.group(1)
            if name is None:
                positions += 1
                return f"${positions}"
            if name not in names:
                names.append(name)
            return f"${names.index(name) + 1}"

        self.native = _PLACEHOLDER.sub(native, query).encode()
        if names and positions:
            raise psycopg.ProgrammingError("a query takes named or positional parameters")
        self.names = tuple(names)

    def values(self, params: Params) -> list[Any]:
        """The parameters in the statement's order."""
        if not params:
            return []
        if isinstance(params, Mapping):
            return [params[name] for name in self.names]
        return list(params)


#: Converted generated statements by their text (a fixed set; see `_query`).
_QUERIES: dict[str, Query] = {}


#: The generated statements: a fixed set, registered by `keep_statements`.
_GENERATED: set[str] = set()


def keep_statements(texts: Iterable[str]) -> None:
    """Register statements as generated: converted once, and prepared once per connection.

    The generated module (`turnkeeper.adapters.postgres.queries`) registers all of its
    statements when it is imported.

    Args:
        texts: the statements' texts, as their functions run them.
    """
    _GENERATED.update(texts)


def converted(text: str) -> tuple[Query, bool]:
    """A statement converted to PostgreSQL's placeholders.

    Only the generated statements are kept (converted once here, prepared once per
    connection by the link): they are a fixed set, while any other text (a statement
    run on a unit of work's connection) could grow both caches without bound, here and
    on the server.

    Args:
        text: the statement, in psycopg's placeholders.

    Returns:
        The converted statement, and whether it is one of the generated statements.
    """
    query = _QUERIES.get(text)
    if query is not None:
        return query, True
    query = Query(text)
    if text not in _GENERATED:
        return query, False
    _QUERIES[text] = query
    return query, True


__all__ = ["Params", "Query", "converted", "keep_statements"]
