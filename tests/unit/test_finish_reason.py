"""A person's stop is a stop: the reason an agent's finish stores (`finish_reason`).

Table test over every end state, with and without a person's cancel request, and the
agent's reason given as the seed's, another one, or none.
"""

from __future__ import annotations

from datetime import timedelta

import attrs
import pytest

from tests.support.domain_world import T0, fixed_id
from turnkeeper.domain.errors import ValidationFailed
from turnkeeper.domain.followups import OpenFollowup, RunEnd, plan_run_end
from turnkeeper.domain.runs import END_STATES, EndReason, Run, RunState, finish, finish_reason

STOP = EndReason.USER_CANCELLED.value


def running(*, cancel_requested: bool) -> Run:
    return Run(
        id=fixed_id(7, 1),
        thread_id=fixed_id(3, 1),
        agent_id=fixed_id(2, 1),
        state=RunState.RUNNING,
        triggering_message_id=fixed_id(8, 1),
        triggered_by=fixed_id(1, 1),
        version=3,
        cancel_requested=cancel_requested,
        cancel_requested_at=T0 if cancel_requested else None,
        created_at=T0,
        updated_at=T0,
    )


@pytest.mark.parametrize(
    ("cancel_requested", "state", "given", "stored"),
    [
        (True, RunState.CANCELLED, STOP, STOP),
        (True, RunState.CANCELLED, "tool_stopped", STOP),
        (True, RunState.CANCELLED, None, STOP),
        (True, RunState.COMPLETED, None, None),
        (True, RunState.FAILED, "crashed", "crashed"),
        (False, RunState.CANCELLED, "gave_up", "gave_up"),
        (False, RunState.CANCELLED, None, None),
        (False, RunState.COMPLETED, None, None),
        (False, RunState.FAILED, "crashed", "crashed"),
    ],
)
def test_finish_reason(
    cancel_requested: bool, state: RunState, given: str | None, stored: str | None
) -> None:
    run = running(cancel_requested=cancel_requested)
    assert finish_reason(run, state, given) == stored
    ended = finish(run, state, given, T0 + timedelta(seconds=1))
    assert ended is not None
    assert (ended.state, ended.state_reason) == (state, stored)


@pytest.mark.parametrize("given", sorted(EndReason))
@pytest.mark.parametrize("state", sorted(END_STATES))
def test_a_servers_reason_is_reserved_outside_a_confirmed_stop(
    given: EndReason, state: RunState
) -> None:
    # No person asked to stop: an agent writing user_cancelled (or any reason of the
    # server's) would make the settlement discard the people's follow-ups.
    with pytest.raises(ValidationFailed) as caught:
        finish(running(cancel_requested=False), state, given.value, T0)
    assert [(e.pointer, e.code) for e in caught.value.errors] == [("/reason", "reserved")]


@pytest.mark.parametrize("given", [STOP, "tool_stopped", None])
def test_a_confirmed_stop_plans_no_follow_on(given: str | None) -> None:
    ended = finish(running(cancel_requested=True), RunState.CANCELLED, given, T0)
    assert ended is not None
    followup = OpenFollowup(message_id=fixed_id(8, 2), thread_seq=4, author_id=fixed_id(1, 2))
    plan = plan_run_end(RunEnd(state=ended.state, reason=ended.state_reason), [followup])
    assert (plan.stopped, plan.candidates) == ((followup,), ())


def test_the_run_is_not_changed() -> None:
    run = running(cancel_requested=True)
    before = attrs.evolve(run)
    finish_reason(run, RunState.CANCELLED, "x")
    assert run == before
