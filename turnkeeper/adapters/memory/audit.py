"""The in-memory audit and rate-limit buckets; satisfy `AuditLog` and `RateLimitStore`."""

from __future__ import annotations

import uuid
from datetime import datetime

from turnkeeper.adapters.memory.tables import Tables
from turnkeeper.application.ports import AdminChange, DenialRecord
from turnkeeper.domain.ratelimit import take_token


class MemoryAuditLog:
    """Aggregated denials and administrative changes in the unit's tables.

    Args:
        t: the tables of the unit.
    """

    def __init__(self, t: Tables) -> None:
        self._t = t

    async def record_denial(
        self, principal_id: uuid.UUID, action: str, reason: str, window_start: datetime
    ) -> None:
        """Count a denial in its aggregated row (see the port)."""
        key = (principal_id, action, reason, window_start)
        self._t.denials[key] = self._t.denials.get(key, 0) + 1

    async def denials(self, principal_id: uuid.UUID) -> list[DenialRecord]:
        """A principal's aggregated denials (see the port)."""
        rows = [
            DenialRecord(principal_id=p, action=a, reason=r, window_start=w, count=c)
            for (p, a, r, w), c in self._t.denials.items()
            if p == principal_id
        ]
        return sorted(rows, key=lambda d: (d.window_start, d.action, d.reason))

    async def record_change(self, change: AdminChange) -> None:
        """Keep an administrative change (see the port)."""
        self._t.changes.append(change)

    async def changes(self, subject_id: uuid.UUID) -> list[AdminChange]:
        """The changes of one grant or token, by id (see the port)."""
        return sorted(
            (c for c in self._t.changes if c.subject_id == subject_id), key=lambda c: c.id
        )


class MemoryRateLimitStore:
    """Token buckets in the unit's tables, taken with the domain's `take_token`.

    Args:
        t: the tables of the unit.
    """

    def __init__(self, t: Tables) -> None:
        self._t = t

    async def take_token(
        self,
        principal_id: uuid.UUID,
        limit_class: str,
        now: datetime,
        *,
        burst: int,
        per_minute: int,
    ) -> int | None:
        """Take one token, or say how long to wait (see the port)."""
        key = (principal_id, limit_class)
        decision = take_token(self._t.buckets.get(key), now, burst=burst, per_minute=per_minute)
        self._t.buckets[key] = decision.bucket
        return decision.retry_after


__all__ = ["MemoryAuditLog", "MemoryRateLimitStore"]
