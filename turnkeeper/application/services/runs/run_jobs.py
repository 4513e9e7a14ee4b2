"""The periodic jobs that end runs, driven by the clock (``turnkeeper jobs``).

Each job takes its due runs in batches of ``jobs.batch_size``, one unit of work per
batch (FOR UPDATE SKIP LOCKED: several runners never take the same run), and ends each
one through `RunEnder.end`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import attrs

from turnkeeper.application.ports import Clock, UnitOfWork
from turnkeeper.application.services.access import thread_target
from turnkeeper.application.services.runs.run_end import RunEnder
from turnkeeper.application.settings import Settings
from turnkeeper.application.transactions import Transactor
from turnkeeper.domain.runs import EndReason, Run, RunState

#: A job's query: the due runs before a time, at most a batch, locked for the unit.
_DueRuns = Callable[[UnitOfWork, datetime, int], Awaitable[list[Run]]]


@attrs.frozen(kw_only=True)
class _Job:
    """One job: which runs are due, since how long, and how they end."""

    due: _DueRuns
    window: Callable[[Settings], timedelta]
    state: RunState
    reason: EndReason


_QUEUED_EXPIRY = _Job(
    due=lambda uow, before, limit: uow.runs.lock_queued_before(before, limit),
    window=lambda settings: settings.queued_max_age,
    state=RunState.FAILED,
    reason=EndReason.QUEUED_EXPIRED,
)
_CANCEL_TIMEOUT = _Job(
    due=lambda uow, before, limit: uow.runs.lock_cancel_unconfirmed_before(before, limit),
    window=lambda settings: settings.cancel_grace,
    state=RunState.CANCELLED,
    reason=EndReason.CANCEL_TIMEOUT,
)
_STALL_CHECK = _Job(
    due=lambda uow, before, limit: uow.runs.lock_running_unchanged_before(before, limit),
    window=lambda settings: settings.stall_after,
    state=RunState.FAILED,
    reason=EndReason.STALE,
)
_AGENT_DISABLED = _Job(
    due=lambda uow, before, limit: uow.runs.lock_active_of_disabled_agents(limit),
    window=lambda settings: timedelta(0),
    state=RunState.CANCELLED,
    reason=EndReason.AGENT_DISABLED,
)


class RunJobsService:
    """Queued expiry, cancel timeout, stall check, and the runs of disabled agents.

    Args:
        tx: the transactor.
        ender: the one end-of-run function.
        clock: the time the windows count from.
        settings: ``run.queued_max_age``, ``agent.cancel_grace``, ``run.stall_after``,
            ``jobs.batch_size``.
    """

    def __init__(self, tx: Transactor, ender: RunEnder, clock: Clock, settings: Settings) -> None:
        self._tx = tx
        self._ender = ender
        self._clock = clock
        self._settings = settings

    async def expire_queued(self) -> int:
        """End runs queued longer than ``run.queued_max_age`` (failed / queued_expired).

        Returns:
            The runs ended.
        """
        return await self._run(_QUEUED_EXPIRY)

    async def cancel_timeouts(self) -> int:
        """End runs whose cancel was not confirmed within ``agent.cancel_grace``.

        Returns:
            The runs ended (cancelled / cancel_timeout).
        """
        return await self._run(_CANCEL_TIMEOUT)

    async def stall_check(self) -> int:
        """End running runs without a change for ``run.stall_after`` (failed / stale).

        Returns:
            The runs ended.
        """
        return await self._run(_STALL_CHECK)

    async def end_runs_of_disabled_agents(self) -> int:
        """End every active run of a disabled agent (cancelled / agent_disabled).

        Returns:
            The runs ended.
        """
        return await self._run(_AGENT_DISABLED)

    async def run_jobs_once(self) -> dict[str, int]:
        """One pass of every job.

        Returns:
            Runs ended per job.
        """
        return {
            "queued_expiry": await self.expire_queued(),
            "cancel_timeout": await self.cancel_timeouts(),
            "stall_check": await self.stall_check(),
            "agent_disabled": await self.end_runs_of_disabled_agents(),
        }

    async def _run(self, job: _Job) -> int:
        """End the job's due runs, batch by batch until a batch is not full."""
        batch = self._settings.jobs_batch_size
        window = job.window(self._settings)

        async def work(uow: UnitOfWork) -> int:
            runs = await job.due(uow, self._clock.now() - window, batch)
            for run in runs:
                target = await thread_target(uow, run.thread_id)
                await self._ender.end(uow, run, target, job.state, job.reason.value)
            return len(runs)

        total = 0
        while True:
            done = await self._tx.run(work)
            total += done
            if done < batch:
                return total


__all__ = ["RunJobsService"]
