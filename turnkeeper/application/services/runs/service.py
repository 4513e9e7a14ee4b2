"""`RunsService`: one handle on every runs use case, delegating to its module.

Each use case lives in the module of its job (`agent_feed`, `lifecycle`, `run_patch`,
`run_jobs`); this facade only forwards, for callers that want one object for runs (the
command line, tests, embedding programs). The HTTP adapter takes each service alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence

from turnkeeper.application.services.identity import BearerToken
from turnkeeper.application.services.runs.agent_feed import (
    AgentEventPage,
    AgentFeedService,
    PolledPage,
)
from turnkeeper.application.services.runs.lifecycle import RunLifecycleService
from turnkeeper.application.services.runs.run_jobs import RunJobsService
from turnkeeper.application.services.runs.run_patch import FollowupOp, RunPatchService
from turnkeeper.application.services.runs.views import RunView
from turnkeeper.domain.runs import RunState
from turnkeeper.domain.world import Principal


class RunsService:
    """Every runs use case behind one object (each method is its service's).

    Args:
        feed: the agent feed.
        lifecycle: the run lifecycle.
        patcher: the run patch.
        jobs: the periodic jobs.
    """

    def __init__(
        self,
        feed: AgentFeedService,
        lifecycle: RunLifecycleService,
        patcher: RunPatchService,
        jobs: RunJobsService,
    ) -> None:
        self._feed = feed
        self._lifecycle = lifecycle
        self._patcher = patcher
        self._jobs = jobs

    async def poll(
        self,
        agent: Principal | BearerToken,
        *,
        after: int | None = None,
        limit: int | None = None,
    ) -> AgentEventPage:
        """`AgentFeedService.poll`."""
        return await self._feed.poll(agent, after=after, limit=limit)

    async def poll_as(
        self,
        agent: Principal | BearerToken,
        *,
        after: int | None = None,
        limit: int | None = None,
        check: Callable[[Principal], None] | None = None,
    ) -> PolledPage:
        """`AgentFeedService.poll_as`."""
        return await self._feed.poll_as(agent, after=after, limit=limit, check=check)

    async def check_poll(
        self, agent: Principal, *, after: int | None = None, limit: int | None = None
    ) -> None:
        """`AgentFeedService.check_poll`."""
        await self._feed.check_poll(agent, after=after, limit=limit)

    async def ack(self, agent: Principal | BearerToken, through_seq: int) -> None:
        """`AgentFeedService.ack`."""
        await self._feed.ack(agent, through_seq)

    async def heartbeat(self, agent: Principal, followups: str | None) -> None:
        """`AgentFeedService.heartbeat`."""
        await self._feed.heartbeat(agent, followups)

    async def get(self, actor: Principal, run_id: uuid.UUID) -> RunView:
        """`RunLifecycleService.get`."""
        return await self._lifecycle.get(actor, run_id)

    async def start(self, agent: Principal | BearerToken, run_id: uuid.UUID, token: str) -> RunView:
        """`RunLifecycleService.start`."""
        return await self._lifecycle.start(agent, run_id, token)

    async def await_input(self, agent: Principal | BearerToken, run_id: uuid.UUID) -> RunView:
        """`RunLifecycleService.await_input`."""
        return await self._lifecycle.await_input(agent, run_id)

    async def resume(
        self, agent: Principal | BearerToken, run_id: uuid.UUID, token: str
    ) -> RunView:
        """`RunLifecycleService.resume`."""
        return await self._lifecycle.resume(agent, run_id, token)

    async def finish(
        self,
        agent: Principal | BearerToken,
        run_id: uuid.UUID,
        state: RunState,
        reason: str | None,
    ) -> RunView:
        """`RunLifecycleService.finish`."""
        return await self._lifecycle.finish(agent, run_id, state, reason)

    async def cancel(self, person: Principal, run_id: uuid.UUID) -> RunView:
        """`RunLifecycleService.cancel`."""
        return await self._lifecycle.cancel(person, run_id)

    async def patch(
        self,
        agent: Principal | BearerToken,
        run_id: uuid.UUID,
        base_version: int,
        ops: Sequence[FollowupOp],
    ) -> RunView:
        """`RunPatchService.patch`."""
        return await self._patcher.patch(agent, run_id, base_version, ops)

    async def expire_queued(self) -> int:
        """`RunJobsService.expire_queued`."""
        return await self._jobs.expire_queued()

    async def cancel_timeouts(self) -> int:
        """`RunJobsService.cancel_timeouts`."""
        return await self._jobs.cancel_timeouts()

    async def stall_check(self) -> int:
        """`RunJobsService.stall_check`."""
        return await self._jobs.stall_check()

    async def end_runs_of_disabled_agents(self) -> int:
        """`RunJobsService.end_runs_of_disabled_agents`."""
        return await self._jobs.end_runs_of_disabled_agents()

    async def run_jobs_once(self) -> dict[str, int]:
        """`RunJobsService.run_jobs_once`."""
        return await self._jobs.run_jobs_once()


__all__ = ["RunsService"]
