"""Table tests of the run state machine: `move`, `finish`, `end` and `TRIGGER_STATE_OF`.

DESIGN section 6 and API section Runs: start (queued -> running), await input
(running -> waiting_input), resume (waiting_input -> running); finish from running and
waiting_input only; an ended run finished again with its own end state is a no-op, with
another one an error; every stored change raises the version by one.
"""

from __future__ import annotations

import itertools
from datetime import timedelta

import attrs
import pytest

from tests.support.domain_world import T0, build_world, fixed_id
from turnkeeper.domain.errors import InvalidStateTransition
from turnkeeper.domain.finish import finish
from turnkeeper.domain.messaging import TriggerState
from turnkeeper.domain.runs import (
    END_STATES,
    TRIGGER_STATE_OF,
    EndReason,
    Run,
    RunState,
    Transition,
    bump_version,
    end,
    move,
    request_cancel,
)

WORLD = build_world()
LATER = T0 + timedelta(minutes=5)
VERSION = 4

ACTIVE = [RunState.QUEUED, RunState.RUNNING, RunState.WAITING_INPUT]
ENDED = [RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED]
ALL_STATES = list(RunState)


def run_in(state: RunState, *, reason: str | None = None) -> Run:
    """A run of Lotse in Allgemein/side, triggered by Alex, at version VERSION."""
    return Run(
        id=fixed_id(7, 1),
        thread_id=WORLD.thread("Allgemein/side").id,
        agent_id=WORLD.principal("lotse").id,
        state=state,
        state_reason=reason,
        triggering_message_id=fixed_id(8, 1),
        triggered_by=WORLD.principal("alex").id,
        version=VERSION,
        invocation_jti="jti-1",
        created_at=T0,
        updated_at=T0,
    )


def test_the_state_sets() -> None:
    assert {s for s in RunState if s.active} == set(ACTIVE)
    assert set(END_STATES) == set(ENDED)


# --- move -----------------------------------------------------------------------------

MOVES = {
    Transition.START: (RunState.QUEUED, RunState.RUNNING),
    Transition.AWAIT_INPUT: (RunState.RUNNING, RunState.WAITING_INPUT),
    Transition.RESUME: (RunState.WAITING_INPUT, RunState.RUNNING),
}
ALLOWED_MOVES = [(op, source) for op, (source, _) in MOVES.items()]
REFUSED_MOVES = [
    (op, state)
    for op, state in itertools.product(MOVES, ALL_STATES)
    if (op, state) not in ALLOWED_MOVES
]


@pytest.mark.parametrize(("operation", "source"), ALLOWED_MOVES, ids=lambda v: str(v))
def test_move_allowed(operation: Transition, source: RunState) -> None:
    before = run_in(source)
    after = move(before, operation, LATER)
    target = MOVES[operation][1]
    assert after == attrs.evolve(before, state=target, version=VERSION + 1, updated_at=LATER)


@pytest.mark.parametrize(("operation", "source"), REFUSED_MOVES, ids=lambda v: str(v))
def test_move_refused(operation: Transition, source: RunState) -> None:
    with pytest.raises(InvalidStateTransition) as raised:
        move(run_in(source), operation, LATER)
    assert raised.value.code == "invalid_state_transition"


def test_move_table_covers_every_pair() -> None:
    assert len(ALLOWED_MOVES) + len(REFUSED_MOVES) == len(MOVES) * len(RunState)
    assert set(MOVES) == set(Transition)


# --- stored changes that are no transition ------------------------------------------------


@pytest.mark.parametrize("state", list(RunState), ids=str)
def test_bump_version_raises_the_version_and_nothing_else(state: RunState) -> None:
    before = run_in(state)
    assert bump_version(before, LATER) == attrs.evolve(
        before, version=VERSION + 1, updated_at=LATER
    )


@pytest.mark.parametrize("state", [RunState.RUNNING, RunState.WAITING_INPUT], ids=str)
def test_request_cancel_is_a_stored_change_with_its_time(state: RunState) -> None:
    before = run_in(state)
    assert request_cancel(before, LATER) == attrs.evolve(
        before,
        cancel_requested=True,
        cancel_requested_at=LATER,
        version=VERSION + 1,
        updated_at=LATER,
    )


# --- finish ---------------------------------------------------------------------------

FINISH_ENDS = [
    (source, target) for source in (RunState.RUNNING, RunState.WAITING_INPUT) for target in ENDED
]
FINISH_NOOPS = [(s, s) for s in ENDED]
FINISH_REFUSED = [
    *[(RunState.QUEUED, target) for target in ENDED],
    *[(source, target) for source in ENDED for target in ENDED if source is not target],
    *[(source, target) for source in ALL_STATES for target in ACTIVE],
]


def test_finish_table_covers_every_pair() -> None:
    pairs = [*FINISH_ENDS, *FINISH_NOOPS, *FINISH_REFUSED]
    assert sorted(pairs) == sorted(itertools.product(ALL_STATES, ALL_STATES))


@pytest.mark.parametrize(("source", "target"), FINISH_ENDS, ids=lambda v: str(v))
@pytest.mark.parametrize("reason", [None, "model_error"], ids=["no-reason", "reason"])
def test_finish_ends_an_active_run(source: RunState, target: RunState, reason: str | None) -> None:
    before = run_in(source)
    after = finish(before, target, reason, LATER)
    assert after == attrs.evolve(
        before, state=target, state_reason=reason, version=VERSION + 1, updated_at=LATER
    )


@pytest.mark.parametrize(("source", "target"), FINISH_NOOPS, ids=lambda v: str(v))
@pytest.mark.parametrize("reason", [None, "other_reason"], ids=["no-reason", "reason"])
def test_finish_again_with_the_same_end_is_a_noop(
    source: RunState, target: RunState, reason: str | None
) -> None:
    assert finish(run_in(source, reason="first"), target, reason, LATER) is None


@pytest.mark.parametrize(("source", "target"), FINISH_REFUSED, ids=lambda v: str(v))
def test_finish_refused(source: RunState, target: RunState) -> None:
    with pytest.raises(InvalidStateTransition):
        finish(run_in(source), target, None, LATER)


# --- end (the server's own end paths) ------------------------------------------------


@pytest.mark.parametrize(
    ("source", "target"), list(itertools.product(ACTIVE, ENDED)), ids=lambda v: str(v)
)
def test_end_ends_every_active_run(source: RunState, target: RunState) -> None:
    before = run_in(source)
    after = end(before, target, EndReason.USER_CANCELLED, LATER)
    assert after == attrs.evolve(
        before,
        state=target,
        state_reason=EndReason.USER_CANCELLED,
        version=VERSION + 1,
        updated_at=LATER,
    )


@pytest.mark.parametrize(
    ("source", "target"), list(itertools.product(ENDED, ALL_STATES)), ids=lambda v: str(v)
)
def test_end_refuses_an_ended_run(source: RunState, target: RunState) -> None:
    with pytest.raises(InvalidStateTransition):
        end(run_in(source), target, None, LATER)


@pytest.mark.parametrize(
    ("source", "target"), list(itertools.product(ACTIVE, ACTIVE)), ids=lambda v: str(v)
)
def test_end_refuses_a_state_that_is_no_end(source: RunState, target: RunState) -> None:
    with pytest.raises(InvalidStateTransition):
        end(run_in(source), target, None, LATER)


# --- trigger_state of the triggering message -----------------------------------------


def test_trigger_state_of_each_run_state() -> None:
    # A queued run has no single trigger_state: received until agent.invocation is
    # delivered, queued after; the application sets those itself.
    assert TRIGGER_STATE_OF == {
        RunState.RUNNING: TriggerState.WORKING,
        RunState.WAITING_INPUT: TriggerState.WORKING,
        RunState.COMPLETED: TriggerState.DONE,
        RunState.FAILED: TriggerState.FAILED,
        RunState.CANCELLED: TriggerState.CANCELLED,
    }
    assert RunState.QUEUED not in TRIGGER_STATE_OF
