"""Properties of the trigger report: shaped as the contract says, stable on replay."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from turnkeeper.domain import strategies as ds
from turnkeeper.domain.followups import FollowupMode, followup_event_needed
from turnkeeper.domain.messaging import TriggerState
from turnkeeper.domain.runs import RunState
from turnkeeper.domain.trigger_report import (
    AcceptedFollowup,
    TriggerLinks,
    TriggerOutcomeKind,
    applied_followup_mode,
    report_trigger,
)

trigger_states = st.none() | st.sampled_from(TriggerState)
reasons = st.none() | st.sampled_from(["no_trigger_right", "user_cancelled", "stale"])
accepted = st.builds(AcceptedFollowup, run_id=ds.run_ids, mode=ds.followup_modes)
links = st.builds(TriggerLinks, opened_run_id=st.none() | ds.run_ids, followup=st.none() | accepted)
active_states = st.sampled_from([RunState.QUEUED, RunState.RUNNING, RunState.WAITING_INPUT])


@given(trigger_states, reasons, links)
def test_the_report_has_the_members_of_its_outcome(
    state: TriggerState | None, reason: str | None, linked: TriggerLinks
) -> None:
    report = report_trigger(state, reason, linked)
    assert (report.run_id is not None) == (
        report.outcome in {TriggerOutcomeKind.RUN_OPENED, TriggerOutcomeKind.FOLLOWUP}
    )
    assert (report.mode is not None) == (report.outcome is TriggerOutcomeKind.FOLLOWUP)
    if report.outcome is not TriggerOutcomeKind.REFUSED:
        assert report.reason is None
    if report.outcome is TriggerOutcomeKind.REFUSED:
        assert (state, report.reason) == (TriggerState.FAILED, reason)


@given(trigger_states, reasons, trigger_states, reasons, links)
def test_a_linked_message_reports_the_same_whatever_its_state_becomes(
    first: TriggerState | None,
    first_reason: str | None,
    later: TriggerState | None,
    later_reason: str | None,
    linked: TriggerLinks,
) -> None:
    # A message with a run or a follow-up row: the run and the follow-up change its
    # trigger_state later; the replay reports what the first answer did.
    if linked.opened_run_id is None and linked.followup is None:
        return
    assert report_trigger(first, first_reason, linked) == report_trigger(
        later, later_reason, linked
    )


@given(trigger_states, reasons, links)
def test_a_followup_row_always_wins(
    state: TriggerState | None, reason: str | None, linked: TriggerLinks
) -> None:
    report = report_trigger(state, reason, linked)
    if linked.followup is not None:
        assert (report.outcome, report.run_id, report.mode) == (
            TriggerOutcomeKind.FOLLOWUP,
            linked.followup.run_id,
            linked.followup.mode,
        )


@given(ds.followup_modes, active_states)
def test_steer_is_recorded_exactly_when_the_agent_gets_it_now(
    mode: FollowupMode, run_state: RunState
) -> None:
    applied = applied_followup_mode(mode, run_state)
    assert (applied is FollowupMode.STEER) == followup_event_needed(mode, run_state)
    if applied is not FollowupMode.STEER:
        assert applied is mode
