"""What every PostgreSQL repository shares: the connection type and `MissingRow`.

Each repository runs the generated statements of `turnkeeper.adapters.postgres.queries` on
the connection of its unit of work (so inside the unit's transaction) and maps rows to the
frozen domain values. Driver errors are translated by the unit (`wrap_errors`).
"""

from __future__ import annotations

from typing import Any

import psycopg

#: A connection of the pool; repositories run on their unit's one.
Conn = psycopg.AsyncConnection[Any]


class MissingRow(LookupError):
    """A statement that must touch one row found none (an unknown id: a caller bug)."""
