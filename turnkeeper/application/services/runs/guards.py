"""Who may act on a run: agents only, and only the run's own agent.

A denial is an `AccessDenied` (audited by the transactor); a run the caller may not
read is not_found, like an unknown id.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta

import attrs

from turnkeeper.application.errors import Unauthenticated
from turnkeeper.application.ports import Clock, ResolvedToken, UnitOfWork
from turnkeeper.application.ports.audit import AuditAction
from turnkeeper.application.services.access import authorized_thread, thread_target, uphold
from turnkeeper.application.services.identity import BearerToken, record_use
from turnkeeper.application.services.runs.views import RunView
from turnkeeper.application.transactions import AccessDenied, Later, Transactor
from turnkeeper.domain.authorization import AccessTarget, Action, archive_decision
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


async def refuse_non_agent(tx: Transactor, principal: Principal, action: AuditAction) -> None:
    """`require_agent` outside a unit, its denial audited as a refusal inside one is.

    The twin of `turnkeeper.application.services.access.require_owner`.

    Args:
        tx: the transactor (records the denial).
        principal: the caller.
        action: the refused action.

    Raises:
        AccessDenied: forbidden / agents_only for anyone but an agent.
    """
    try:
        require_agent(principal, action)
    except AccessDenied as denied:
        await tx.record_denial(denied)
        raise


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


@attrs.frozen(kw_only=True)
class OwnedRun:
    """A run locked for its own agent (`own_run`).

    Attributes:
        agent: the caller, as given or as read by its token.
        run: the run, locked FOR UPDATE until the unit ends.
        token: the token the agent was read by (its use to be recorded after the unit),
            or None when the agent was given.
    """

    agent: Principal
    run: Run
    token: ResolvedToken | None = None


async def own_run(
    uow: UnitOfWork, actor: Principal | BearerToken, run_id: uuid.UUID, *, goes_on: bool
) -> OwnedRun:
    """The run, locked FOR UPDATE, when the caller is its agent.

    A caller known by its bearer token only is read in the round trip of the lock
    (ADR 0026), and the answers keep the order of a request authenticated first: 401
    for an unknown or revoked token, then 404 and 403 in the order of docs/rights.md
    (an archived channel before the caller's role).

    Args:
        uow: the unit of work.
        actor: the caller, or the request's bearer token.
        run_id: the run.
        goes_on: True for a move that goes on with the run (refused in an archived
            channel, `run_target`), False for its end.

    Returns:
        The caller, the locked run and the token the caller was read by.

    Raises:
        Unauthenticated: for an unknown or revoked token.
        NotFound: for an unknown run (or one whose thread the caller may not read).
        AccessDenied: channel_read_only / channel_archived for a move that goes on in an
            archived channel; forbidden / not_run_agent for a reader who is not its agent.
    """
    token: ResolvedToken | None = None
    if isinstance(actor, Principal):
        agent, run = actor, await uow.runs.lock(run_id)
    else:
        found = await uow.runs.lock_for_token(run_id, actor.digest)
        if found is None:
            raise Unauthenticated()
        agent, run, token = found.caller.principal, found.run, found.caller
    if run is None:
        raise NotFound()
    if run.agent_id != agent.id:
        target = await readable_target(uow, agent, run)
        if goes_on:
            uphold(agent, AuditAction.RUN_UPDATE, archive_decision(target))
        raise AccessDenied(
            code="forbidden",
            reason="not_run_agent",
            principal_id=agent.id,
            action=AuditAction.RUN_UPDATE,
        )
    return OwnedRun(agent=agent, run=run, token=token)


async def run_target(uow: UnitOfWork, agent: Principal, run: Run) -> AccessTarget:
    """The access target of a run its agent goes on with: refused in an archived channel.

    An archived channel is read-only for everyone (docs/rights.md): a delivery there is
    refused, and so is every move of a run by its agent but its end (start, also with an
    invocation token delivered before the archive, which would otherwise make the start
    depend on when the agent last polled; await-input, resume, a run patch). The end
    stays open to it, so that a run there ends rather than wait for the jobs; its
    follow-ups then fail ``channel_read_only``. Every move that goes on reads it on every
    path, before it refuses for another reason and also when it changes nothing (a start
    repeated): the archive is the first refusal of docs/rights.md.

    Args:
        uow: the unit of work.
        agent: the run's agent.
        run: the run.

    Returns:
        The thread's access target, for the change's events.

    Raises:
        AccessDenied: channel_read_only / channel_archived.
    """
    target = await thread_target(uow, run.thread_id)
    uphold(agent, AuditAction.RUN_UPDATE, archive_decision(target))
    return target


#: An agent's move of its run, given the unit, the agent and the run locked for it: what
#: reads the run's view once the unit committed.
MoveStep = Callable[[UnitOfWork, Principal, Run], Awaitable[Later[RunView]]]


async def move_own_run(
    tx: Transactor,
    actor: Principal | BearerToken,
    run_id: uuid.UUID,
    step: MoveStep,
    *,
    goes_on: bool,
    clock: Clock,
    token_interval: timedelta,
) -> RunView:
    """Run an agent's move of its run in one unit, the run locked first (`own_run`).

    A bearer token is resolved in the round trip of the run's lock, and its last use
    recorded after the unit as `IdentityService.authenticate` records it (ADR 0026). The
    run's view (its follow-ups) is read with the COMMIT (`Transactor.run_then`, ADR 0034).

    Args:
        tx: the transactor.
        actor: the run's agent, or the request's bearer token.
        run_id: the run.
        step: the move; its use case names the unit's span.
        goes_on: see `own_run` (a move that goes on reads `run_target` on every path).
        clock: the time of the token's use.
        token_interval: ``auth.token_last_used_interval``.

    Returns:
        The run's view after the move.

    Raises:
        Unauthenticated: for a bearer token that is unknown or revoked.
        NotFound: for an unknown run (or one whose thread the caller may not read).
        AccessDenied: forbidden / not_run_agent for a reader who is not its agent.
    """

    async def work(uow: UnitOfWork) -> Later[tuple[RunView, ResolvedToken | None]]:
        owned = await own_run(uow, actor, run_id, goes_on=goes_on)
        view = await step(uow, owned.agent, owned.run)

        async def answer() -> tuple[RunView, ResolvedToken | None]:
            return await view(), owned.token

        return answer

    view, caller = await tx.run_then(work, named=step)
    if caller is not None:
        await record_use(tx, caller, clock, token_interval)
    return view


__all__ = [
    "MoveStep",
    "OwnedRun",
    "move_own_run",
    "own_run",
    "readable_target",
    "refuse_non_agent",
    "require_agent",
    "run_target",
]
