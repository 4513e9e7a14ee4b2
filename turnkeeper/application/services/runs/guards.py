"""Who may act on a run: agents only, and only the run's own agent.

A denial is an `AccessDenied` (audited by the transactor); a run the caller may not
read is not_found, like an unknown id.
"""

from __future__ import annotations

import uuid

from turnkeeper.application.ports import UnitOfWork
from turnkeeper.application.ports.audit import AuditAction
from turnkeeper.application.services.access import authorized_thread
from turnkeeper.application.transactions import AccessDenied
from turnkeeper.domain.authorization import AccessTarget, Action
from turnkeeper.domain.errors import NotFound
from turnkeeper.domain.runs import Run
from turnkeeper.domain.world import Principal


def require_agent(principal: Principal, action: AuditAction) -> None:
    """Refuse a person or app a use case of the agent runtime.

    Args:
        principal: the caller.
        action: the refused action (for the audit).

    Raises:
        AccessDenied: forbidden / agents_only.
    """
    if not principal.is_agent:
        raise AccessDenied(
            code="forbidden", reason="agents_only", principal_id=principal.id, action=action
        )


async def readable_target(uow: UnitOfWork, actor: Principal, run: Run) -> AccessTarget:
    """The target of a run's thread, for a caller who may read it.

    Args:
        uow: the unit of work.
        actor: the caller.
        run: the run.

    Returns:
        The thread with its channel and space.

    Raises:
        AccessDenied: not_found without read on the thread.
    """
    return await authorized_thread(uow, actor, Action.THREAD_READ, run.thread_id)


async def own_run(uow: UnitOfWork, agent: Principal, run_id: uuid.UUID) -> Run:
    """The run, locked FOR UPDATE, when the caller is its agent.

    Args:
        uow: the unit of work.
        agent: the caller.
        run_id: the run.

    Returns:
        The locked run.

    Raises:
        NotFound: for an unknown run (or one whose thread the caller may not read).
        AccessDenied: forbidden / not_run_agent for a reader who is not its agent.
    """
    run = await uow.runs.lock(run_id)
    if run is None:
        raise NotFound()
    if run.agent_id != agent.id:
        await readable_target(uow, agent, run)
        raise AccessDenied(
            code="forbidden",
            reason="not_run_agent",
            principal_id=agent.id,
            action=AuditAction.RUN_UPDATE,
        )
    return run


__all__ = ["own_run", "readable_target", "require_agent"]
