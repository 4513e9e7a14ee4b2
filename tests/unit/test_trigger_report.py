"""What became of a message (`report_trigger`, `applied_followup_mode`): table tests."""

from __future__ import annotations

import pytest

from tests.support.domain_world import fixed_id
from turnkeeper.domain.followups import FollowupMode
from turnkeeper.domain.messaging import TriggerState
from turnkeeper.domain.runs import RunState
from turnkeeper.domain.trigger_report import (
    NO_LINKS,
    AcceptedFollowup,
    MessageTrigger,
    TriggerLinks,
    TriggerOutcomeKind,
    applied_followup_mode,
    report_trigger,
)

RUN = fixed_id(7, 1)
FOLLOW_ON = fixed_id(7, 2)
S = TriggerState

OPENED = MessageTrigger(outcome=TriggerOutcomeKind.RUN_OPENED, run_id=RUN)


def followup(mode: FollowupMode) -> MessageTrigger:
    return MessageTrigger(outcome=TriggerOutcomeKind.FOLLOWUP, run_id=RUN, mode=mode)


ACCEPTED_QUEUE = AcceptedFollowup(run_id=RUN, mode=FollowupMode.QUEUE)


@pytest.mark.parametrize(
    ("state", "reason", "links", "expected"),
    [
        # Nothing decided: agent and system messages, or no candidate.
        (None, None, NO_LINKS, MessageTrigger(outcome=TriggerOutcomeKind.NONE)),
        # Refused at the decision: the message's own reason.
        (
            S.FAILED,
            "agent_not_allowed_here",
            NO_LINKS,
            MessageTrigger(outcome=TriggerOutcomeKind.REFUSED, reason="agent_not_allowed_here"),
        ),
        (
            S.FAILED,
            "run_active_other_agent",
            NO_LINKS,
            MessageTrigger(outcome=TriggerOutcomeKind.REFUSED, reason="run_active_other_agent"),
        ),
        # A run opened: every later state of its trigger message reports the same.
        (S.RECEIVED, None, TriggerLinks(opened_run_id=RUN), OPENED),
        (S.QUEUED, None, TriggerLinks(opened_run_id=RUN), OPENED),
        (S.WORKING, None, TriggerLinks(opened_run_id=RUN), OPENED),
        (S.DONE, None, TriggerLinks(opened_run_id=RUN), OPENED),
        (S.FAILED, "invoke_denied", TriggerLinks(opened_run_id=RUN), OPENED),
        (S.CANCELLED, "user_cancelled", TriggerLinks(opened_run_id=RUN), OPENED),
        # A follow-up: the run of its acceptance and its recorded mode, whatever follows.
        (S.RECEIVED, None, TriggerLinks(followup=ACCEPTED_QUEUE), followup(FollowupMode.QUEUE)),
        (
            S.FOLLOWUP_DELIVERED,
            None,
            TriggerLinks(followup=AcceptedFollowup(run_id=RUN, mode=FollowupMode.STEER)),
            followup(FollowupMode.STEER),
        ),
        (
            S.FAILED,
            "no_trigger_right",
            TriggerLinks(followup=AcceptedFollowup(run_id=RUN, mode=FollowupMode.NONE)),
            followup(FollowupMode.NONE),
        ),
        (
            S.CANCELLED,
            "user_cancelled",
            TriggerLinks(followup=ACCEPTED_QUEUE),
            followup(FollowupMode.QUEUE),
        ),
        # The first candidate of an ended run triggers the follow-on run: still a follow-up.
        (
            S.WORKING,
            None,
            TriggerLinks(opened_run_id=FOLLOW_ON, followup=ACCEPTED_QUEUE),
            followup(FollowupMode.QUEUE),
        ),
        # Defensive: a trigger_state without a run, a row or a failure reports nothing.
        (S.RECEIVED, None, NO_LINKS, MessageTrigger(outcome=TriggerOutcomeKind.NONE)),
    ],
)
def test_report_trigger(
    state: TriggerState | None, reason: str | None, links: TriggerLinks, expected: MessageTrigger
) -> None:
    assert report_trigger(state, reason, links) == expected


M = FollowupMode
R = RunState


@pytest.mark.parametrize(
    ("mode", "run_state", "applied"),
    [
        (M.STEER, R.QUEUED, M.STEER),
        (M.STEER, R.RUNNING, M.STEER),
        (M.STEER, R.WAITING_INPUT, M.STEER),
        (M.QUEUE, R.QUEUED, M.QUEUE),
        (M.QUEUE, R.RUNNING, M.QUEUE),
        # A waiting run gets every follow-up now, as the answer to its question.
        (M.QUEUE, R.WAITING_INPUT, M.STEER),
        (M.NONE, R.QUEUED, M.NONE),
        (M.NONE, R.RUNNING, M.NONE),
        (M.NONE, R.WAITING_INPUT, M.STEER),
    ],
)
def test_applied_followup_mode(
    mode: FollowupMode, run_state: RunState, applied: FollowupMode
) -> None:
    assert applied_followup_mode(mode, run_state) is applied
