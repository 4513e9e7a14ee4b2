"""The reasons a trigger shows when agent.invoke refuses it after its acceptance.

A message accepted as a trigger or follow-up is checked again at its delivery and as the
trigger of a follow-on run; what it shows then is the delivery mapping of the
`turnkeeper.domain.runs.FailReason` that `check_invoke` answered, and a queued run
refused at the delivery of its invocation ends as `refused_invocation_end` says. Pure
rules, no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from turnkeeper.domain.runs import EndReason, FailReason, RunState


class DeliveryReason(enum.StrEnum):
    """Reasons a trigger fails when agent.invoke refuses it after its acceptance.

    A message accepted as a trigger or follow-up is checked again at its delivery and as
    the trigger of a follow-on run (seed followups-steer-and-queue, design note 13:
    "refused at delivery" and "refused as trigger of the follow-on run" take the delivery
    mapping of M2-08 note 6). What was allowed then and is refused now has lost something
    since; these are the words of the seed's note 7 for that loss. The message's
    ``trigger_state_reason`` and the run's ``state_reason`` carry one of them, while the
    audit and the denial metric keep the `FailReason` of the authorization decision.
    """

    ACCESS_REVOKED = "access_revoked"
    AGENT_DISABLED = "agent_disabled"
    CHANNEL_READ_ONLY = "channel_read_only"
    ORIGIN_NOT_HUMAN = "origin_not_human"


#: The delivery mapping (seed design note 13, M2-08 note 6), total over `FailReason`.
#: `check_invoke` never answers agent_not_allowed_here or run_active_other_agent (those
#: are the trigger decision's, taken once at acceptance); they map to access_revoked so
#: that no acceptance word can ever reach a message refused after its acceptance.
_DELIVERY_REASON_OF: Mapping[FailReason, DeliveryReason] = {
    FailReason.AGENT_NOT_ALLOWED_HERE: DeliveryReason.ACCESS_REVOKED,
    FailReason.RUN_ACTIVE_OTHER_AGENT: DeliveryReason.ACCESS_REVOKED,
    FailReason.NO_TRIGGER_RIGHT: DeliveryReason.ACCESS_REVOKED,
    FailReason.BILLING_MODE_PERSONAL_NOT_HOLDER: DeliveryReason.ACCESS_REVOKED,
    FailReason.AGENT_NOT_REACHABLE: DeliveryReason.AGENT_DISABLED,
    FailReason.CHANNEL_ARCHIVED: DeliveryReason.CHANNEL_READ_ONLY,
    # A message's origin never changes after its acceptance, which only takes human ones.
    FailReason.ORIGIN_NOT_HUMAN: DeliveryReason.ORIGIN_NOT_HUMAN,
}


def delivery_reason(reason: FailReason) -> DeliveryReason:
    """The reason a message refused after its acceptance shows (the delivery mapping).

    Applies wherever agent.invoke is checked again after acceptance: the delivery of
    agent.invocation (the trigger message and its queued run), the delivery of
    agent.followup, and a candidate of the follow-on run (seed followups-steer-and-queue,
    design note 13; M2-08 note 6). The acceptance itself keeps the `FailReason`.

    Args:
        reason: what `check_invoke` answered now.

    Returns:
        access_revoked for a lost trigger right or a personal agent's other person,
        agent_disabled for an agent no longer reachable, channel_read_only for an
        archived channel, origin_not_human unchanged.

    Example:
        >>> delivery_reason(FailReason.NO_TRIGGER_RIGHT)
        <DeliveryReason.ACCESS_REVOKED: 'access_revoked'>
    """
    return _DELIVERY_REASON_OF[reason]


def refused_invocation_end(reason: FailReason) -> tuple[RunState, str]:
    """How a queued run ends when the delivery of its agent.invocation is refused.

    A disabled agent's run ends as the agent-disabled job ends it (DESIGN.md section 6:
    cancelled / agent_disabled), so the end does not depend on which comes first, the
    agent's poll or the job. Every other refusal ends it failed with the delivery reason
    (`delivery_reason`).

    Args:
        reason: what `check_invoke` answered at the delivery.

    Returns:
        The end state and the run's ``state_reason`` (its trigger message follows the
        state, with the same reason).
    """
    if reason is FailReason.AGENT_NOT_REACHABLE:
        return RunState.CANCELLED, EndReason.AGENT_DISABLED.value
    return RunState.FAILED, delivery_reason(reason).value
