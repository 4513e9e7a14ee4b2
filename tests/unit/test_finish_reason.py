"""A person's stop is a stop: the reason an agent's finish stores (`finish_reason`).

Table test over every end state, with and without a person's cancel request, and the
agent's reason given as the seed's, another one, or none. The server's reasons
(`EndReason`, and the `DeliveryReason` of an invocation refused at delivery) are not the
agent's to give, except a delivery reason for a cancel of its own (seed AG-13).
"""

from __future__ import annotations

from datetime import timedelta

import attrs
import pytest

from tests.support.domain_world import T0, fixed_id
from turnkeeper.domain.delivery import DeliveryReason
from turnkeeper.domain.errors import ValidationFailed
from turnkeeper.domain.finish import bounded_reason, finish, finish_reason, server_reason
from turnkeeper.domain.followups import OpenFollowup, RunEnd, plan_run_end
from turnkeeper.domain.runs import END_STATES, EndReason, Run, RunState

STOP = EndReason.USER_CANCELLED.value
#: Reasons only the server gives, whatever the end state.
END_REASONS = {reason.value for reason in EndReason}
#: The server's words for an invocation refused at delivery.
DELIVERY_REASONS = {reason.value for reason in DeliveryReason}
#: The end states in which a delivery reason is the server's: an invocation refused at
#: delivery ends failed with one; completed with one means nothing the agent could say.
DELIVERY_RESERVED_STATES = sorted(END_STATES - {RunState.CANCELLED})


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


@pytest.mark.parametrize("given", sorted(DeliveryReason))
@pytest.mark.parametrize("state", DELIVERY_RESERVED_STATES)
def test_a_delivery_reason_is_reserved_outside_a_cancel(
    given: DeliveryReason, state: RunState
) -> None:
    # failed / access_revoked is how the server ends an invocation refused at delivery:
    # an agent giving it would be counted and shown as that refusal.
    run = running(cancel_requested=False)
    with pytest.raises(ValidationFailed) as caught:
        finish_reason(run, state, given.value)
    assert [(e.pointer, e.code) for e in caught.value.errors] == [("/reason", "reserved")]
    with pytest.raises(ValidationFailed):
        finish(run, state, given.value, T0)


@pytest.mark.parametrize("given", sorted(DELIVERY_REASONS - END_REASONS))
def test_an_agent_may_cancel_for_the_loss_a_delivery_reason_names(given: str) -> None:
    # Seed AG-13: Lotse answers finishRun(cancelled, access_revoked) when Alex lost trigger.
    ended = finish(running(cancel_requested=False), RunState.CANCELLED, given, T0)
    assert ended is not None
    assert (ended.state, ended.state_reason) == (RunState.CANCELLED, given)
    assert not server_reason(RunState.CANCELLED, given)


@pytest.mark.parametrize("given", sorted(END_REASONS | DELIVERY_REASONS))
@pytest.mark.parametrize("state", DELIVERY_RESERVED_STATES)
def test_a_person_s_stop_comes_first_only_for_a_cancel(given: str, state: RunState) -> None:
    # The cancel_requested rule comes first: a confirmed stop takes any reason; any other
    # end of a run a person asked to stop is refused a server's reason as usual.
    run = running(cancel_requested=True)
    assert finish_reason(run, RunState.CANCELLED, given) == STOP
    with pytest.raises(ValidationFailed):
        finish_reason(run, state, given)


@pytest.mark.parametrize(
    ("state", "reason", "servers"),
    [
        *((s, r.value, True) for s in sorted(END_STATES) for r in EndReason),
        *((s, r.value, True) for s in DELIVERY_RESERVED_STATES for r in DeliveryReason),
        (RunState.CANCELLED, DeliveryReason.ACCESS_REVOKED.value, False),
        (RunState.CANCELLED, DeliveryReason.CHANNEL_READ_ONLY.value, False),
        (RunState.CANCELLED, DeliveryReason.AGENT_DISABLED.value, True),
        (RunState.FAILED, "no_trigger_right", False),
        (RunState.FAILED, "runtime_error", False),
        (RunState.COMPLETED, None, False),
    ],
)
def test_server_reason(state: RunState, reason: str | None, servers: bool) -> None:
    assert server_reason(state, reason) is servers


@pytest.mark.parametrize("state", sorted(END_STATES))
@pytest.mark.parametrize("given", ["crashed", "no_trigger_right", "Access revoked?", None])
def test_an_ordinary_agent_reason_is_kept(state: RunState, given: str | None) -> None:
    ended = finish(running(cancel_requested=False), state, given, T0)
    assert ended is not None
    assert (ended.state, ended.state_reason) == (state, given)


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


@pytest.mark.parametrize(
    ("state", "reason", "label"),
    [
        (RunState.COMPLETED, None, "none"),
        (RunState.FAILED, "stale", "stale"),
        (RunState.CANCELLED, "user_cancelled", "user_cancelled"),
        (RunState.CANCELLED, "cancel_timeout", "cancel_timeout"),
        (RunState.CANCELLED, "agent_disabled", "agent_disabled"),
        # An invocation refused at delivery ends failed with its delivery reason.
        (RunState.FAILED, "access_revoked", "access_revoked"),
        (RunState.FAILED, "channel_read_only", "channel_read_only"),
        # An agent may cancel for the loss a delivery reason names (seed AG-13): its own.
        (RunState.CANCELLED, "access_revoked", "agent"),
        (RunState.CANCELLED, "channel_read_only", "agent"),
        # agent.invoke's reasons are the denials', never a run's: an agent wrote them.
        (RunState.FAILED, "no_trigger_right", "agent"),
        (RunState.FAILED, "runtime_error", "agent"),
        (RunState.CANCELLED, "Alex asked me to stop", "agent"),
    ],
)
def test_a_bounded_reason_is_the_servers_or_agent(
    state: RunState, reason: str | None, label: str
) -> None:
    assert bounded_reason(state, reason) == label
