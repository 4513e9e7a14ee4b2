"""The one audit of denials: every refusal counted in its aggregated row.

A denial is counted in the row of its principal, action, reason and window
(``audit.deny_aggregate_window``). An `AccessDenied` rolls its unit back, so the
transactor counts it in a unit of its own; a refused trigger or delivery is counted in
the unit that records its outcome (the message's trigger_state), so that both commit
together.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from turnkeeper.application.ports import Clock, UnitOfWork
from turnkeeper.application.ports.audit import DeniedAction
from turnkeeper.application.settings import Settings


def window_start(at: datetime, window: timedelta) -> datetime:
    """The start of the aggregation window that contains a time.

    Args:
        at: the time of the denial.
        window: ``audit.deny_aggregate_window``.

    Returns:
        `at` rounded down to a multiple of the window since the epoch.
    """
    epoch = datetime(1970, 1, 1, tzinfo=at.tzinfo)
    # Whole-number arithmetic: floor division rounds down also before the epoch, and no
    # float ever loses a microsecond far from it.
    return epoch + ((at - epoch) // window) * window


class DenialAudit:
    """Counts denials in their aggregated rows.

    Args:
        clock: the time of the denial.
        settings: ``audit.deny_aggregate_window``.
    """

    def __init__(self, clock: Clock, settings: Settings) -> None:
        self._clock = clock
        self._window = settings.deny_aggregate_window

    async def record(
        self, uow: UnitOfWork, principal_id: uuid.UUID, action: DeniedAction, reason: str
    ) -> None:
        """Count one denial in the given unit (it is kept only if the unit commits).

        Args:
            uow: the unit of work.
            principal_id: who was denied.
            action: what was refused.
            reason: why.
        """
        start = window_start(self._clock.now(), self._window)
        await uow.audit.record_denial(principal_id, action, reason, start)


__all__ = ["DenialAudit", "window_start"]
