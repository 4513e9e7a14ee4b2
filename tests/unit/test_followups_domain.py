"""Table tests of the follow-up rules (DESIGN section 7, seed followups-steer-and-queue).

`effective_followup_mode` (fail closed), `followup_event_needed`, the forward-only
`advance_followup` over every pair of states, and `plan_run_end` over the seed's list of
run ends with shuffled open sets that contain one deleted message.
"""

from __future__ import annotations

import itertools
import random
import uuid

import pytest

from tests.support.domain_world import build_world, fixed_id
from turnkeeper.domain.errors import InvalidStateTransition
from turnkeeper.domain.followups import (
    FollowupMode,
    FollowupState,
    FollowupTransitionError,
    OpenFollowup,
    RunEnd,
    RunEndPlan,
    advance_followup,
    effective_followup_mode,
    followup_event_needed,
    plan_run_end,
)
from turnkeeper.domain.runs import RunState

WORLD = build_world()
ALEX = WORLD.principal("alex").id
SAM = WORLD.principal("sam").id
ROBIN = WORLD.principal("robin").id


PERMISSIONS = (None, True, False)
REPORTS = (None, "steer", "queue", "", "Steer", "QUEUE", " steer", "sometimes", "none")


class TestEffectiveFollowupMode:
    @pytest.mark.parametrize(
        ("permitted", "reported"), list(itertools.product(PERMISSIONS, REPORTS))
    )
    def test_steer_or_queue_only_when_permitted_and_reported_exactly(
        self, permitted: bool | None, reported: str | None
    ) -> None:
        expected = FollowupMode.NONE
        if permitted is not False and reported == "steer":
            expected = FollowupMode.STEER
        if permitted is not False and reported == "queue":
            expected = FollowupMode.QUEUE
        assert effective_followup_mode(permitted, reported) is expected

    def test_absent_permission_allows(self) -> None:
        assert effective_followup_mode(None, "steer") is FollowupMode.STEER
        assert effective_followup_mode(None, "queue") is FollowupMode.QUEUE

    def test_forbidden_wins_over_every_report(self) -> None:
        assert {effective_followup_mode(False, r) for r in REPORTS} == {FollowupMode.NONE}


EVENT_TABLE = [
    (FollowupMode.STEER, RunState.QUEUED, True),
    (FollowupMode.STEER, RunState.RUNNING, True),
    (FollowupMode.STEER, RunState.WAITING_INPUT, True),
    (FollowupMode.STEER, RunState.COMPLETED, False),
    (FollowupMode.STEER, RunState.FAILED, False),
    (FollowupMode.STEER, RunState.CANCELLED, False),
    (FollowupMode.QUEUE, RunState.QUEUED, False),
    (FollowupMode.QUEUE, RunState.RUNNING, False),
    (FollowupMode.QUEUE, RunState.WAITING_INPUT, True),
    (FollowupMode.QUEUE, RunState.COMPLETED, False),
    (FollowupMode.QUEUE, RunState.FAILED, False),
    (FollowupMode.QUEUE, RunState.CANCELLED, False),
    (FollowupMode.NONE, RunState.QUEUED, False),
    (FollowupMode.NONE, RunState.RUNNING, False),
    (FollowupMode.NONE, RunState.WAITING_INPUT, True),
    (FollowupMode.NONE, RunState.COMPLETED, False),
    (FollowupMode.NONE, RunState.FAILED, False),
    (FollowupMode.NONE, RunState.CANCELLED, False),
]


class TestFollowupEventNeeded:
    def test_table_covers_every_pair(self) -> None:
        assert {(m, s) for m, s, _ in EVENT_TABLE} == set(itertools.product(FollowupMode, RunState))

    @pytest.mark.parametrize(("mode", "state", "expected"), EVENT_TABLE)
    def test_table(self, mode: FollowupMode, state: RunState, expected: bool) -> None:
        assert followup_event_needed(mode, state) is expected


_Q, _D, _A, _F, _X = (
    FollowupState.QUEUED,
    FollowupState.DELIVERED,
    FollowupState.ABSORBED,
    FollowupState.DEFERRED,
    FollowupState.DISCARDED,
)
#: Pairs that change the state.
CHANGES = {(_Q, _D), (_Q, _A), (_D, _A)}
#: Pairs that are accepted without a change (06 2 "No effect").
SAME = {(_D, _D), (_A, _A)}


ALL_PAIRS = tuple(itertools.product(FollowupState, FollowupState))


class TestAdvanceFollowup:
    @pytest.mark.parametrize(("from_", "to"), sorted(CHANGES))
    def test_forward_changes(self, from_: FollowupState, to: FollowupState) -> None:
        assert advance_followup(from_, to) is True

    @pytest.mark.parametrize(("from_", "to"), sorted(SAME))
    def test_same_state_is_no_change(self, from_: FollowupState, to: FollowupState) -> None:
        assert advance_followup(from_, to) is False

    @pytest.mark.parametrize(
        ("from_", "to"), [p for p in ALL_PAIRS if p not in CHANGES and p not in SAME]
    )
    def test_every_other_pair_is_an_invalid_transition(
        self, from_: FollowupState, to: FollowupState
    ) -> None:
        with pytest.raises(FollowupTransitionError) as raised:
            advance_followup(from_, to)
        assert isinstance(raised.value, InvalidStateTransition)
        assert raised.value.code == "invalid_state_transition"

    def test_the_seed_cases_by_name(self) -> None:
        with pytest.raises(FollowupTransitionError):
            advance_followup(_A, _D)
        for final in (_F, _X):
            for to in (_D, _A):
                with pytest.raises(FollowupTransitionError):
                    advance_followup(final, to)
        # Queued to queued is no acknowledgement at all.
        with pytest.raises(FollowupTransitionError):
            advance_followup(_Q, _Q)


def followup(n: int, seq: int, *, author: uuid.UUID = SAM, deleted: bool = False) -> OpenFollowup:
    return OpenFollowup(
        message_id=fixed_id(6, n), thread_seq=seq, author_id=author, deleted=deleted
    )


#: The seed's ends (09 5.2) and the server's own reasons (domain.runs.EndReason).
STOP = RunEnd(state=RunState.CANCELLED, reason="user_cancelled")
OTHER_ENDS = [
    RunEnd(state=RunState.COMPLETED),
    RunEnd(state=RunState.FAILED, reason="stale"),
    RunEnd(state=RunState.FAILED, reason="interrupted"),
    RunEnd(state=RunState.FAILED, reason="runtime_error"),
    RunEnd(state=RunState.FAILED, reason="agent_unavailable"),
    RunEnd(state=RunState.FAILED, reason="queued_expired"),
    RunEnd(state=RunState.FAILED, reason="no_trigger_right"),
    RunEnd(state=RunState.CANCELLED, reason="cancel_timeout"),
    RunEnd(state=RunState.CANCELLED, reason="access_revoked"),
    RunEnd(state=RunState.CANCELLED, reason="agent_disabled"),
    RunEnd(state=RunState.CANCELLED, reason="channel_read_only"),
    RunEnd(state=RunState.CANCELLED, reason="user_disabled"),
    RunEnd(state=RunState.CANCELLED),
    # user_cancelled stops only together with cancelled.
    RunEnd(state=RunState.COMPLETED, reason="user_cancelled"),
    RunEnd(state=RunState.FAILED, reason="user_cancelled"),
]
#: Thread order: 10 < 20 < 30 < 40 < 50, written by Sam, Alex and Robin.
ALIVE = [
    followup(1, 30),
    followup(2, 10, author=ALEX),
    followup(3, 50, author=ROBIN),
    followup(4, 20),
    followup(5, 40, author=ALEX),
]
GONE = followup(9, 25, deleted=True)
IN_THREAD_ORDER = tuple(sorted(ALIVE, key=lambda f: f.thread_seq))


def shuffled(seed: int) -> list[OpenFollowup]:
    items = [*ALIVE, GONE]
    random.Random(seed).shuffle(items)
    return items


def end_id(end: RunEnd) -> str:
    return f"{end.state.value}-{end.reason or 'none'}"


class TestPlanRunEnd:
    @pytest.mark.parametrize("seed", range(6))
    def test_stop_by_a_person_discards_all_others(self, seed: int) -> None:
        open_set = shuffled(seed)
        plan = plan_run_end(STOP, open_set)
        assert plan.deleted == (GONE,)
        assert plan.candidates == ()
        assert sorted(plan.stopped, key=lambda f: f.message_id) == sorted(
            ALIVE, key=lambda f: f.message_id
        )

    @pytest.mark.parametrize("end", OTHER_ENDS, ids=end_id)
    @pytest.mark.parametrize("seed", range(4))
    def test_every_other_end_makes_candidates_in_thread_order(self, end: RunEnd, seed: int) -> None:
        plan = plan_run_end(end, shuffled(seed))
        assert plan == RunEndPlan(deleted=(GONE,), stopped=(), candidates=IN_THREAD_ORDER)
        assert [c.thread_seq for c in plan.candidates] == [10, 20, 30, 40, 50]

    @pytest.mark.parametrize("end", [STOP, *OTHER_ENDS], ids=end_id)
    def test_only_deleted(self, end: RunEnd) -> None:
        assert plan_run_end(end, [GONE]) == RunEndPlan(deleted=(GONE,))

    @pytest.mark.parametrize("end", [STOP, *OTHER_ENDS], ids=end_id)
    def test_empty_set_gives_an_empty_plan(self, end: RunEnd) -> None:
        assert plan_run_end(end, []) == RunEndPlan(deleted=(), stopped=(), candidates=())

    def test_input_is_unchanged(self) -> None:
        open_set = shuffled(3)
        before = list(open_set)
        plan_run_end(OTHER_ENDS[0], open_set)
        plan_run_end(STOP, open_set)
        assert open_set == before

    def test_a_tuple_is_accepted_as_input(self) -> None:
        plan = plan_run_end(OTHER_ENDS[0], tuple(shuffled(1)))
        assert plan.candidates == IN_THREAD_ORDER

    @pytest.mark.parametrize("state", [RunState.QUEUED, RunState.RUNNING, RunState.WAITING_INPUT])
    @pytest.mark.parametrize("open_set", [[], ALIVE], ids=["empty", "five"])
    def test_non_end_state_raises(self, state: RunState, open_set: list[OpenFollowup]) -> None:
        with pytest.raises(ValueError, match="not an end state"):
            plan_run_end(RunEnd(state=state, reason="user_cancelled"), open_set)
