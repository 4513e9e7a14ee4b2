"""Table tests of `answer_verdict` (DESIGN section 8): ownership before state.

Lotse answers in Allgemein/side. An unknown run, a run of another thread or of another
agent is run_mismatch (one uniform answer, whatever the run's state); Lotse's own ended run
is run_not_active; its own active run is ok.
"""

from __future__ import annotations

import itertools
import uuid

import pytest

from tests.support.domain_world import build_world, fixed_id
from turnkeeper.domain.runs import AnswerRun, AnswerVerdict, RunState, answer_verdict

WORLD = build_world()
LOTSE = WORLD.principal("lotse").id
TEXTER = WORLD.principal("texter").id
SIDE = WORLD.thread("Allgemein/side").id
MAIN = WORLD.thread("Allgemein/main").id
RUN = fixed_id(7, 1)

ACTIVE = [RunState.QUEUED, RunState.RUNNING, RunState.WAITING_INPUT]
ENDED = [RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED]


def named_run(state: RunState, *, thread: uuid.UUID = SIDE, agent: uuid.UUID = LOTSE) -> AnswerRun:
    return AnswerRun(id=RUN, thread_id=thread, agent_id=agent, state=state)


def verdict(run: AnswerRun | None, *, found: bool = True) -> AnswerVerdict:
    """The verdict for Lotse answering in Allgemein/side."""
    return answer_verdict(run, found, LOTSE, SIDE)


def test_unknown_run_is_mismatch() -> None:
    assert verdict(None, found=False) is AnswerVerdict.RUN_MISMATCH


@pytest.mark.parametrize("state", ACTIVE, ids=str)
def test_not_found_wins_over_a_stale_run_value(state: RunState) -> None:
    assert verdict(named_run(state), found=False) is AnswerVerdict.RUN_MISMATCH


def test_found_without_a_run_value_is_mismatch() -> None:
    assert verdict(None, found=True) is AnswerVerdict.RUN_MISMATCH


@pytest.mark.parametrize("state", ACTIVE, ids=str)
def test_own_active_run_is_ok(state: RunState) -> None:
    assert verdict(named_run(state)) is AnswerVerdict.OK


@pytest.mark.parametrize("state", ENDED, ids=str)
def test_own_ended_run_is_not_active(state: RunState) -> None:
    assert verdict(named_run(state)) is AnswerVerdict.RUN_NOT_ACTIVE


FOREIGN = {
    "other-thread": {"thread": MAIN},
    "other-agent": {"agent": TEXTER},
    "other-thread-and-agent": {"thread": MAIN, "agent": TEXTER},
}


@pytest.mark.parametrize(
    ("foreign", "state"), list(itertools.product(FOREIGN, RunState)), ids=lambda v: str(v)
)
def test_foreign_run_is_mismatch_in_every_state(foreign: str, state: RunState) -> None:
    # Ownership before state: an ended run of another agent or thread never tells
    # the writer that it ended.
    run = named_run(state, **FOREIGN[foreign])
    assert verdict(run) is AnswerVerdict.RUN_MISMATCH
