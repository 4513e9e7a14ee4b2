"""Properties of the follow-up rules (the seed's FuzzPlanRunEnd, as hypothesis properties).

`plan_run_end`: every open follow-up lands in exactly one list, candidates are in thread
order, stopped only after a stop by a person (cancelled / user_cancelled), candidates
only after every other end, the input is unchanged, non-end states raise.
`advance_followup`: no sequence of acknowledgements leads backward, and deferred and
discarded are final. Values come from `turnkeeper.domain.strategies`.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnkeeper.domain import strategies as ds
from turnkeeper.domain.followups import (
    FollowupMode,
    FollowupState,
    FollowupTransitionError,
    OpenFollowup,
    RunEnd,
    advance_followup,
    effective_followup_mode,
    followup_event_needed,
    plan_run_end,
)
from turnkeeper.domain.runs import END_STATES, RunState

#: Reasons an agent gives when it finishes (the seed's), next to the server's own.
AGENT_REASONS = [
    "access_revoked",
    "channel_read_only",
    "user_disabled",
    "interrupted",
    "runtime_error",
    "agent_unavailable",
]

#: Any reason at all: none, the server's, an agent's, or an arbitrary text.
reasons = st.none() | ds.end_reasons | st.sampled_from(AGENT_REASONS) | st.text(max_size=12)
run_ends = ds.run_ends | st.builds(RunEnd, state=ds.end_states, reason=reasons)
open_sets = ds.open_followups()


def stop_by_person(end: RunEnd) -> bool:
    return end.state is RunState.CANCELLED and end.reason == "user_cancelled"


class TestPlanRunEndProperties:
    @given(run_ends, open_sets)
    def test_every_open_followup_in_exactly_one_list(
        self, end: RunEnd, open_set: list[OpenFollowup]
    ) -> None:
        plan = plan_run_end(end, open_set)
        placed = Counter([*plan.deleted, *plan.stopped, *plan.candidates])
        assert placed == Counter(open_set)

    @given(run_ends, open_sets)
    def test_deleted_is_exactly_the_deleted_messages(
        self, end: RunEnd, open_set: list[OpenFollowup]
    ) -> None:
        plan = plan_run_end(end, open_set)
        assert set(plan.deleted) == {f for f in open_set if f.deleted}
        assert not any(f.deleted for f in (*plan.stopped, *plan.candidates))

    @given(run_ends, open_sets)
    def test_candidates_sorted_by_thread_seq(
        self, end: RunEnd, open_set: list[OpenFollowup]
    ) -> None:
        seqs = [c.thread_seq for c in plan_run_end(end, open_set).candidates]
        assert seqs == sorted(seqs)

    @given(run_ends, open_sets)
    def test_stopped_only_after_a_stop_candidates_only_after_other_ends(
        self, end: RunEnd, open_set: list[OpenFollowup]
    ) -> None:
        plan = plan_run_end(end, open_set)
        alive = [f for f in open_set if not f.deleted]
        if stop_by_person(end):
            assert plan.candidates == ()
            assert len(plan.stopped) == len(alive)
        else:
            assert plan.stopped == ()
            assert len(plan.candidates) == len(alive)

    @given(run_ends, open_sets)
    def test_input_unchanged(self, end: RunEnd, open_set: list[OpenFollowup]) -> None:
        before = list(open_set)
        plan_run_end(end, open_set)
        assert open_set == before

    @given(ds.active_run_states, reasons, open_sets)
    def test_non_end_state_raises(
        self, state: RunState, reason: str | None, open_set: list[OpenFollowup]
    ) -> None:
        with pytest.raises(ValueError, match="not an end state"):
            plan_run_end(RunEnd(state=state, reason=reason), open_set)


#: Progress of a follow-up as the adapter sees it; deferred and discarded are final.
RANK = {FollowupState.QUEUED: 0, FollowupState.DELIVERED: 1, FollowupState.ABSORBED: 2}
FINAL = {FollowupState.DEFERRED, FollowupState.DISCARDED}
states = ds.followup_states


class TestAdvanceFollowupProperties:
    @given(states, states)
    def test_a_change_always_moves_forward(self, from_: FollowupState, to: FollowupState) -> None:
        try:
            changed = advance_followup(from_, to)
        except FollowupTransitionError:
            return
        assert from_ not in FINAL
        assert to not in FINAL
        if changed:
            assert RANK[to] > RANK[from_]
        else:
            assert to is from_

    @given(st.sampled_from(sorted(FINAL)), states)
    def test_deferred_and_discarded_are_final(
        self, from_: FollowupState, to: FollowupState
    ) -> None:
        with pytest.raises(FollowupTransitionError):
            advance_followup(from_, to)

    @given(states, st.lists(states, max_size=10))
    def test_no_path_leads_backward(
        self, start: FollowupState, requests: list[FollowupState]
    ) -> None:
        current = start
        for to in requests:
            try:
                if advance_followup(current, to):
                    current = to
            except FollowupTransitionError:
                continue
            if start in FINAL:
                pytest.fail("a final state moved")
            assert RANK[current] >= RANK[start]
        if start in FINAL:
            assert current is start


class TestModeProperties:
    @given(st.sampled_from([None, True, False]), st.none() | st.text(max_size=8))
    def test_mode_is_none_unless_reported_exactly(
        self, permitted: bool | None, reported: str | None
    ) -> None:
        mode = effective_followup_mode(permitted, reported)
        if mode is not FollowupMode.NONE:
            assert permitted is not False
            assert reported == mode.value

    @given(ds.followup_modes, ds.run_states)
    def test_no_event_for_an_ended_run_and_always_for_a_waiting_one(
        self, mode: FollowupMode, state: RunState
    ) -> None:
        needed = followup_event_needed(mode, state)
        if state in END_STATES:
            assert needed is False
        if state is RunState.WAITING_INPUT:
            assert needed is True
