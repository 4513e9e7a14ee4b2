"""Follow-ups: human messages written while a run of their agent is active.

Pure rules (seed: followups-steer-and-queue): the effective mode of an agent, whether a
follow-up needs an event, the forward-only states an adapter may set, the plan of what
becomes of the open follow-ups when a run ends, and the choice of the follow-on run.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping, Sequence

import attrs

from turnkeeper.domain.errors import InvalidStateTransition
from turnkeeper.domain.runs import (
    END_STATES,
    EndReason,
    FailReason,
    InvokeFacts,
    RunState,
    check_invoke,
)


class FollowupState(enum.StrEnum):
    """States of a follow-up row."""

    QUEUED = "queued"
    DELIVERED = "delivered"
    ABSORBED = "absorbed"
    DEFERRED = "deferred"
    DISCARDED = "discarded"


#: Follow-ups still waiting to be processed by their run.
OPEN_STATES = frozenset({FollowupState.QUEUED, FollowupState.DELIVERED})


class FollowupMode(enum.StrEnum):
    """How an agent takes follow-ups during a run."""

    NONE = "none"
    STEER = "steer"
    QUEUE = "queue"


class FollowupTransitionError(InvalidStateTransition):
    """An adapter asked for a follow-up state change that is not forward (409)."""


def effective_followup_mode(permitted: bool | None, reported: str | None) -> FollowupMode:
    """The mode the server uses for an agent's follow-ups (fail closed).

    Args:
        permitted: the owner's ``supports_followups`` (None: absent, which allows).
        reported: the capability the agent reported by heartbeat.

    Returns:
        none when not permitted; steer or queue only when reported exactly so; none for
        an absent or unknown report.
    """
    if permitted is False:
        return FollowupMode.NONE
    if reported == FollowupMode.STEER.value:
        return FollowupMode.STEER
    if reported == FollowupMode.QUEUE.value:
        return FollowupMode.QUEUE
    return FollowupMode.NONE


def followup_event_needed(mode: FollowupMode, run_state: RunState) -> bool:
    """Whether a follow-up gets an agent.followup event now.

    A run waiting for input gets every follow-up (it is the answer to its question);
    steer gets them in every active state; nothing is sent to an ended run.

    Args:
        mode: the effective mode.
        run_state: the state of the run.

    Returns:
        True when agent.followup is to be appended.
    """
    if not run_state.active:
        return False
    if run_state is RunState.WAITING_INPUT:
        return True
    return mode is FollowupMode.STEER


_FORWARD = {
    (FollowupState.QUEUED, FollowupState.DELIVERED),
    (FollowupState.QUEUED, FollowupState.ABSORBED),
    (FollowupState.DELIVERED, FollowupState.ABSORBED),
}
_SAME = {FollowupState.DELIVERED, FollowupState.ABSORBED}


def advance_followup(from_: FollowupState, to: FollowupState) -> bool:
    """An adapter's acknowledgement of a follow-up: forward only.

    Args:
        from_: the stored state.
        to: the requested state (delivered or absorbed).

    Returns:
        True when the state changes, False for a repeated delivered or absorbed.

    Raises:
        FollowupTransitionError: for every other pair (backward, or out of deferred or
            discarded).
    """
    if (from_, to) in _FORWARD:
        return True
    if from_ is to and to in _SAME:
        return False
    raise FollowupTransitionError(f"follow-up {from_} -> {to}")


@attrs.frozen(kw_only=True)
class RunEnd:
    """How a run ended.

    Attributes:
        state: completed, failed or cancelled.
        reason: the end reason.
    """

    state: RunState
    reason: str | None = None


@attrs.frozen(kw_only=True)
class OpenFollowup:
    """An open (queued or delivered) follow-up at the end of its run.

    Attributes:
        message_id: the follow-up message.
        thread_seq: its place in the thread.
        author_id: its author.
        deleted: the message was deleted.
    """

    message_id: uuid.UUID
    thread_seq: int
    author_id: uuid.UUID
    deleted: bool = False


@attrs.frozen(kw_only=True)
class RunEndPlan:
    """What becomes of the open follow-ups of an ended run.

    Attributes:
        deleted: discarded, trigger_state unchanged.
        stopped: discarded with cancelled / user_cancelled (a person stopped the run).
        candidates: deferred, in thread order; the first allowed one triggers a new run.
    """

    deleted: tuple[OpenFollowup, ...] = ()
    stopped: tuple[OpenFollowup, ...] = ()
    candidates: tuple[OpenFollowup, ...] = ()


def plan_run_end(end: RunEnd, open_followups: Sequence[OpenFollowup]) -> RunEndPlan:
    """Plan the settlement of a run's open follow-ups.

    Args:
        end: the end state and reason.
        open_followups: the open follow-ups (any order; not changed).

    Returns:
        Every follow-up in exactly one list: deleted messages in `deleted`; after a stop
        by a person (cancelled / user_cancelled) all others in `stopped`; after every
        other end all others in `candidates`, ordered by thread_seq.

    Raises:
        ValueError: when the state is not an end state.
    """
    if end.state not in END_STATES:
        raise ValueError(f"{end.state} is not an end state")
    deleted = tuple(f for f in open_followups if f.deleted)
    alive = [f for f in open_followups if not f.deleted]
    stopped_by_person = (
        end.state is RunState.CANCELLED and end.reason == EndReason.USER_CANCELLED.value
    )
    if stopped_by_person:
        return RunEndPlan(deleted=deleted, stopped=tuple(alive))
    ordered = tuple(sorted(alive, key=lambda f: (f.thread_seq, f.message_id)))
    return RunEndPlan(deleted=deleted, candidates=ordered)


@attrs.frozen(kw_only=True)
class DeniedCandidate:
    """A candidate whose author no longer passes agent.invoke.

    Attributes:
        followup: the candidate.
        reason: why agent.invoke refuses its author now.
    """

    followup: OpenFollowup
    reason: FailReason


@attrs.frozen(kw_only=True)
class FollowOn:
    """The choice of the follow-on run among the candidates of an ended run.

    Attributes:
        denied: the candidates before the trigger, each refused (discarded, failed).
        trigger: the first candidate whose author passes agent.invoke: it triggers the
            follow-on run and stays deferred on the ended run (None: no author passes).
        moved: the candidates after the trigger, in order: they become queued
            follow-ups of the follow-on run.
    """

    denied: tuple[DeniedCandidate, ...] = ()
    trigger: OpenFollowup | None = None
    moved: tuple[OpenFollowup, ...] = ()


def choose_follow_on(
    candidates: Sequence[OpenFollowup],
    invoke: Mapping[uuid.UUID, InvokeFacts],
    *,
    agent_answers: bool,
) -> FollowOn:
    """Choose the follow-on run of an ended run (DESIGN.md section 7).

    The candidates are taken in order: each one whose author no longer passes
    agent.invoke is denied, the first one whose author passes triggers the follow-on
    run, and every candidate after it moves to that run (its author is checked again
    when it is delivered). When the run's agent may no longer be set in motion in the
    thread (`turnkeeper.domain.runs.answers_in_thread`), every candidate is denied: with
    its author's own reason when agent.invoke refuses the author too, else with
    agent_not_allowed_here (a run the agent could not even read would block the thread).

    Args:
        candidates: `RunEndPlan.candidates`, in thread order.
        invoke: the agent.invoke facts of each candidate's author now (the thread's
            target, the run's agent, no active run), by author id.
        agent_answers: whether the run's agent still answers in the thread.

    Returns:
        Every candidate in exactly one place: denied, trigger or moved; order kept.

    Raises:
        KeyError: when a candidate's author has no facts.
    """
    denied: list[DeniedCandidate] = []
    for index, candidate in enumerate(candidates):
        reason = check_invoke(invoke[candidate.author_id])
        if reason is None and not agent_answers:
            reason = FailReason.AGENT_NOT_ALLOWED_HERE
        if reason is None:
            return FollowOn(
                denied=tuple(denied),
                trigger=candidate,
                moved=tuple(candidates[index + 1 :]),
            )
        denied.append(DeniedCandidate(followup=candidate, reason=reason))
    return FollowOn(denied=tuple(denied))
