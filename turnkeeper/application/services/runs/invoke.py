"""The facts of the agent.invoke rule as the store holds them now.

`turnkeeper.domain.runs.check_invoke` decides; this module gathers what it needs (the
author's level on the thread today, the agent's status) for the trigger, the deliveries
and the follow-on choice, which all re-check with the rights of the moment.
"""

from __future__ import annotations

from turnkeeper.application.ports import UnitOfWork
from turnkeeper.domain.authorization import AccessTarget, effective_level
from turnkeeper.domain.followups import FollowupMode, effective_followup_mode
from turnkeeper.domain.messaging import Origin
from turnkeeper.domain.runs import AgentFacts, FailReason, InvokeFacts, check_invoke
from turnkeeper.domain.world import BillingMode, Principal


def agent_facts(agent: Principal) -> AgentFacts:
    """What the trigger rules know of an agent.

    Args:
        agent: the agent principal.

    Returns:
        Its id, status, billing mode and holder.
    """
    return AgentFacts(
        id=agent.id,
        enabled=agent.enabled,
        billing_mode=agent.billing_mode or BillingMode.ORGANIZATION,
        holder_id=agent.holder_id,
    )


def followup_mode(agent: Principal) -> FollowupMode:
    """The effective follow-up mode of an agent (owner config and reported capability).

    Args:
        agent: the agent principal.

    Returns:
        none, steer or queue.
    """
    return effective_followup_mode(agent.supports_followups, agent.reported_followups)


async def invoke_facts(
    uow: UnitOfWork,
    target: AccessTarget,
    author: Principal,
    agent: Principal,
    origin: Origin = Origin.HUMAN,
) -> InvokeFacts:
    """The facts of agent.invoke for an author and an agent in a thread, now.

    Args:
        uow: the unit of work.
        target: the thread with its channel and space.
        author: the person the run acts for.
        agent: the agent to set in motion.
        origin: the triggering message's origin (a follow-up's is always human).

    Returns:
        The facts (the author's grants are read now).
    """
    return InvokeFacts(
        origin=origin,
        author_id=author.id,
        author_level=effective_level(author, target, await uow.grants.for_principal(author.id)),
        channel_archived=target.channel.archived,
        agent=agent_facts(agent),
    )


async def invoke_denial(
    uow: UnitOfWork,
    target: AccessTarget,
    author: Principal,
    agent: Principal,
    origin: Origin = Origin.HUMAN,
) -> FailReason | None:
    """Why agent.invoke refuses an author and an agent now, or None when it allows.

    Args:
        uow: the unit of work.
        target: the thread with its channel and space.
        author: the person the run acts for.
        agent: the agent.
        origin: the triggering message's origin.

    Returns:
        The reason of the denial, or None.
    """
    return check_invoke(await invoke_facts(uow, target, author, agent, origin))


__all__ = ["agent_facts", "followup_mode", "invoke_denial", "invoke_facts"]
