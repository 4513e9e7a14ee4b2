"""Properties of `finish_reason`: a confirmed stop always ends user_cancelled and stops.

Over every active run (with or without a person's cancel request), every end state and
any reason an agent may give, the server's own among them (`EndReason`, `DeliveryReason`).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnkeeper.domain import strategies as ds
from turnkeeper.domain.delivery import DeliveryReason
from turnkeeper.domain.errors import ValidationFailed
from turnkeeper.domain.finish import finish, finish_reason, server_reason
from turnkeeper.domain.followups import OpenFollowup, RunEnd, plan_run_end
from turnkeeper.domain.runs import EndReason, Run, RunState

END_REASONS = {reason.value for reason in EndReason}
DELIVERY_REASONS = {reason.value for reason in DeliveryReason}
reasons = (
    st.none()
    | st.text(max_size=20)
    | st.sampled_from(sorted(END_REASONS))
    | st.sampled_from(sorted(DELIVERY_REASONS))
)


def servers(state: RunState, reason: str | None) -> bool:
    """Only the server ends a run with its reasons; an agent may cancel for a lost right."""
    if reason in END_REASONS:
        return True
    return reason in DELIVERY_REASONS and state is not RunState.CANCELLED


@given(
    ds.runs(state=st.sampled_from([RunState.RUNNING, RunState.WAITING_INPUT])),
    ds.end_states,
    reasons,
    ds.open_followups(),
)
def test_a_confirmed_stop_is_a_stop(
    run: Run, state: RunState, reason: str | None, open_followups: list[OpenFollowup]
) -> None:
    confirmed_stop = state is RunState.CANCELLED and run.cancel_requested
    if servers(state, reason) and not confirmed_stop:
        # Only the server gives its reasons: refused, so that no agent fakes a stop or a
        # refused invocation (nor is counted as one).
        with pytest.raises(ValidationFailed) as caught:
            finish(run, state, reason, run.updated_at + timedelta(seconds=1))
        assert [(e.pointer, e.code) for e in caught.value.errors] == [("/reason", "reserved")]
        return
    stored = finish_reason(run, state, reason)
    ended = finish(run, state, reason, run.updated_at + timedelta(seconds=1))
    assert ended is not None
    assert ended.state_reason == stored
    plan = plan_run_end(RunEnd(state=state, reason=stored), open_followups)
    if confirmed_stop:
        assert stored == EndReason.USER_CANCELLED
        assert plan.candidates == ()
    else:
        # Without a person's stop the agent's own words are kept, unchanged.
        assert stored == reason
    # What an agent may store is never taken for the server's, except the stop it confirms.
    assert server_reason(state, stored) is confirmed_stop
