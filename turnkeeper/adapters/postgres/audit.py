"""PostgreSQL audit log: denials aggregated per window, administrative changes one by one."""

from __future__ import annotations

import uuid
from datetime import datetime

from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.postgres.base import PostgresRepository
from turnkeeper.application.ports import AdminChange, DenialRecord


class PostgresAuditLog(PostgresRepository):
    """Aggregated denials and administrative changes; satisfies `AuditLog`."""

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

    async def record_change(self, change: AdminChange) -> None:
        """Keep an administrative change (one INSERT in the unit of the change).

        Args:
            change: the record.
        """
        await q.insert_audit_change(
            self._conn,
            id=change.id,
            actor_id=change.actor_id,
            action=change.action,
            subject_id=change.subject_id,
            before=change.before,
            after=change.after,
            at=change.at,
        )

    async def changes(self, subject_id: uuid.UUID) -> list[AdminChange]:
        """The changes of a grant or token, oldest first.

        Args:
            subject_id: the grant or token.

        Returns:
            The records.
        """
        rows = await q.list_audit_changes(self._conn, subject_id=subject_id)
        return [
            AdminChange(
                id=row.id,
                actor_id=row.actor_id,
                action=row.action,
                subject_id=row.subject_id,
                at=row.at,
                before=row.before,
                after=row.after,
            )
            for row in rows
        ]
