"""An agent's finish of its run: the end it asks for and the reasons it may give.

The server's own reasons (`EndReason`, and the `DeliveryReason` of an invocation refused
at delivery) name what the server did; an agent may not give them, so that what people
see of a run's end, and what the settlement of its follow-ups does, is never an agent's
claim to be the server. Pure rules, no I/O.
"""

from __future__ import annotations

from datetime import datetime

from turnkeeper.domain.delivery import DeliveryReason
from turnkeeper.domain.errors import FieldError, InvalidStateTransition, ValidationFailed
from turnkeeper.domain.runs import END_STATES, EndReason, Run, RunState, end


def finish(run: Run, state: RunState, reason: str | None, at: datetime) -> Run | None:
    """The agent ends its run.

    Args:
        run: the run.
        state: completed, failed or cancelled.
        reason: optional reason.
        at: the time of the change.

    Returns:
        The ended run, or None when it already ended in that same state (a no-op).

    Raises:
        InvalidStateTransition: from queued, to a non-end state, or when the run ended
            in another state.
        ValidationFailed: ``/reason`` reserved (see `finish_reason`).
    """
    if state not in END_STATES:
        raise InvalidStateTransition(f"finish to {state}")
    if run.state in END_STATES:
        if run.state is state:
            return None
        raise InvalidStateTransition(f"{run.state} is final")
    if run.state is RunState.QUEUED:
        raise InvalidStateTransition("finish from queued")
    return end(run, state, finish_reason(run, state, reason), at)


#: The reasons only the server gives when it ends a run, in any end state.
_END_REASONS = frozenset(reason.value for reason in EndReason)
#: The server's words for an invocation refused at delivery (it ends the run failed).
_DELIVERY_REASONS = frozenset(reason.value for reason in DeliveryReason)
#: How a run ended without a reason is named where its reason is shown bounded.
REASON_NONE = "none"
#: How a reason of the agent's own (free text, or a delivery reason it cancelled for) is
#: named where its reason is shown bounded.
REASON_AGENT = "agent"


def server_reason(state: RunState, reason: str | None) -> bool:
    """Whether a run ended in this state with this reason was ended by the server.

    The `EndReason` values are the server's in every end state. A `DeliveryReason` is
    the server's too (`turnkeeper.domain.delivery.refused_invocation_end` ends a queued
    run ``failed`` with one), except with ``cancelled``: an agent may cancel its run for
    the loss such a reason names (seed followups-steer-and-queue, AG-13: the agent
    answers ``finishRun(cancelled, access_revoked)`` when its author lost trigger).
    `finish_reason` refuses the agent exactly these, so a stored reason for which this
    is true was given by the server (or is a stop a person asked for).

    Args:
        state: the end state.
        reason: the run's ``state_reason`` (None: none).

    Returns:
        True for a reason only the server gives in that end state.

    Example:
        >>> server_reason(RunState.FAILED, "access_revoked")
        True
        >>> server_reason(RunState.CANCELLED, "access_revoked")
        False
    """
    if reason in _END_REASONS:
        return True
    return reason in _DELIVERY_REASONS and state is not RunState.CANCELLED


def bounded_reason(state: RunState, reason: str | None) -> str:
    """A run's end reason for a metric label or a log line: never the agent's own words.

    The agent's reason is free text, which may hold what the run was about; what it
    wrote is shown in the thread and the run, and nowhere that operators collect.

    Args:
        state: the run's end state.
        reason: the run's ``state_reason``.

    Returns:
        The reason itself when the server gave it (`server_reason`), ``none`` without
        one, ``agent`` for any reason the agent gave.

    Example:
        >>> bounded_reason(RunState.FAILED, "access_revoked")
        'access_revoked'
        >>> bounded_reason(RunState.CANCELLED, "access_revoked")
        'agent'
    """
    if reason is None:
        return REASON_NONE
    return reason if server_reason(state, reason) else REASON_AGENT


def finish_reason(run: Run, state: RunState, reason: str | None) -> str | None:
    """The reason an agent's finish stores: a person's stop stays a stop.

    An agent that confirms a stop a person requested (``cancel_requested``) with
    ``cancelled`` ends the run ``user_cancelled`` whatever reason it gives, so that the
    settlement discards the open follow-ups and nothing new starts (`plan_run_end`).
    Otherwise the agent's own words are kept, but never one of the server's reasons
    (`server_reason`: `EndReason`, and a `DeliveryReason` outside ``cancelled``): an
    agent that wrote ``user_cancelled`` would discard the people's follow-ups as if one
    of them had stopped the run, and one that failed with ``access_revoked`` would be
    shown and counted as an invocation the server refused.

    Args:
        run: the run before the finish.
        state: the end state the agent asks for.
        reason: the reason it gives (None when it gives none).

    Returns:
        ``user_cancelled`` for a cancelled finish of a run a person asked to stop, else
        the agent's reason.

    Raises:
        ValidationFailed: ``/reason`` reserved for one of the server's reasons outside
            a confirmed stop.
    """
    if state is RunState.CANCELLED and run.cancel_requested:
        return EndReason.USER_CANCELLED.value
    if server_reason(state, reason):
        raise ValidationFailed([FieldError(pointer="/reason", code="reserved")])
    return reason
