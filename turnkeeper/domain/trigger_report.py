"""What became of a message, as its create answer and every replay report it (API.md Trigger).

The report is derived from stored facts only, so that a replay computed later shows the
same thing as the first answer: the run the message triggered
(``runs.triggering_message_id``), its follow-up row (the run it was accepted into and the
mode recorded then, ``run_followups.accepted_run_id`` and ``mode``) and, for a refusal,
the message's own ``trigger_state`` and ``trigger_state_reason``. Later changes (the run
starts, ends, the follow-up is delivered, moved to a follow-on run or discarded) change
none of these facts.
"""

from __future__ import annotations

import enum
import uuid

import attrs

from turnkeeper.domain.followups import FollowupMode, followup_event_needed
from turnkeeper.domain.messaging import TriggerState
from turnkeeper.domain.runs import RunState


class TriggerOutcomeKind(enum.StrEnum):
    """The four outcomes a create answer reports."""

    RUN_OPENED = "run_opened"
    FOLLOWUP = "followup"
    REFUSED = "refused"
    NONE = "none"


@attrs.frozen(kw_only=True)
class AcceptedFollowup:
    """The stored facts of a follow-up's acceptance (they never change after it).

    Attributes:
        run_id: the active run the message was accepted into (also after it moved to a
            follow-on run).
        mode: the mode that applied to it at acceptance (`applied_followup_mode`).
    """

    run_id: uuid.UUID
    mode: FollowupMode


@attrs.frozen(kw_only=True)
class TriggerLinks:
    """What the store links to a message: the run it triggered and its follow-up row.

    Attributes:
        opened_run_id: the run whose ``triggering_message_id`` is the message, if any.
        followup: its acceptance as a follow-up, if it was one.
    """

    opened_run_id: uuid.UUID | None = None
    followup: AcceptedFollowup | None = None


#: A message nothing links to.
NO_LINKS = TriggerLinks()


@attrs.frozen(kw_only=True)
class MessageTrigger:
    """The ``trigger`` member of a create answer.

    Attributes:
        outcome: run_opened, followup, refused or none.
        run_id: run_opened: the run; followup: the run it was accepted into.
        mode: followup only: steer (the agent gets it now), queue (at its next input
            boundary) or none (only in the follow-on run).
        reason: refused only: the message's ``trigger_state_reason``.
    """

    outcome: TriggerOutcomeKind
    run_id: uuid.UUID | None = None
    mode: FollowupMode | None = None
    reason: str | None = None


#: The report of a message that set nothing in motion.
NO_TRIGGER_REPORT = MessageTrigger(outcome=TriggerOutcomeKind.NONE)


def applied_followup_mode(mode: FollowupMode, run_state: RunState) -> FollowupMode:
    """The mode recorded for a follow-up at its acceptance: how it reaches the agent.

    A follow-up that gets ``agent.followup`` at once (`followup_event_needed`: steer, or
    any mode while the run waits for input, where it is the answer) is ``steer``; else
    the agent's effective mode (queue: it takes it at its next input boundary; none:
    only the follow-on run sees it).

    Args:
        mode: the agent's effective mode at acceptance (`effective_followup_mode`).
        run_state: the state of the run it is accepted into.

    Returns:
        The mode to store with the follow-up.
    """
    if followup_event_needed(mode, run_state):
        return FollowupMode.STEER
    return mode


def report_trigger(
    trigger_state: TriggerState | None, reason: str | None, links: TriggerLinks
) -> MessageTrigger:
    """What became of a message, from its stored facts.

    A follow-up row wins over the run it may trigger later (the first candidate of an
    ended run becomes the trigger of the follow-on run: it was accepted as a follow-up).
    Without a run or a row, a ``failed`` trigger_state is a refusal at the decision (a
    mention that could not trigger); everything else triggered nothing.

    Args:
        trigger_state: the message's trigger_state now.
        reason: its trigger_state_reason now.
        links: the run it triggered and its follow-up row.

    Returns:
        The report; the same for every later state of the run and the follow-up.
    """
    if links.followup is not None:
        return MessageTrigger(
            outcome=TriggerOutcomeKind.FOLLOWUP,
            run_id=links.followup.run_id,
            mode=links.followup.mode,
        )
    if links.opened_run_id is not None:
        return MessageTrigger(outcome=TriggerOutcomeKind.RUN_OPENED, run_id=links.opened_run_id)
    if trigger_state is TriggerState.FAILED:
        return MessageTrigger(outcome=TriggerOutcomeKind.REFUSED, reason=reason)
    return NO_TRIGGER_REPORT


__all__ = [
    "NO_LINKS",
    "NO_TRIGGER_REPORT",
    "AcceptedFollowup",
    "MessageTrigger",
    "TriggerLinks",
    "TriggerOutcomeKind",
    "applied_followup_mode",
    "report_trigger",
]
