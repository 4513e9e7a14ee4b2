"""PostgreSQL audit log: denials aggregated per principal, action, reason and window."""

from __future__ import annotations

import uuid
from datetime import datetime

from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.postgres.base import Conn
from turnkeeper.application.ports import DenialRecord


class PostgresAuditLog:
    """Aggregated denials; satisfies `AuditLog`.

    Args:
        conn: the unit's connection.
    """

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def record_denial(
        self, principal_id: uuid.UUID, action: str, reason: str, window_start: datetime
    ) -> None:
        """Count a denial in its window's row (an atomic upsert).

        Args:
            principal_id: who was denied.
            action: the action.
            reason: why.
            window_start: the start of the aggregation window.
        """
        await q.record_denial(
            self._conn,
            principal_id=principal_id,
            action=action,
            reason=reason,
            window_start=window_start,
        )

    async def denials(self, principal_id: uuid.UUID) -> list[DenialRecord]:
        """The aggregated denials of a principal, oldest window first.

        Args:
            principal_id: the principal.

        Returns:
            The rows.
        """
        rows = await q.list_denials(self._conn, principal_id=principal_id)
        return [
            DenialRecord(
                principal_id=row.principal_id,
                action=row.action,
                reason=row.reason,
                window_start=row.window_start,
                count=row.count,
            )
            for row in rows
        ]
