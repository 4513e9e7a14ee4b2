"""Properties of `choose_follow_on`, on the shipped strategies (`turnkeeper.domain.strategies`).

Every candidate lands in exactly one place (denied, trigger or moved) in its order; every
denied author is refused by agent.invoke with the reason it gives; the trigger's author
passes; the input is not changed.
"""

from __future__ import annotations

import uuid

import attrs
from hypothesis import given
from hypothesis import strategies as st

from turnkeeper.domain.followups import OpenFollowup, choose_follow_on
from turnkeeper.domain.runs import FailReason, InvokeFacts, check_invoke
from turnkeeper.domain.strategies import invoke_facts, open_followups


@st.composite
def candidates_with_facts(
    draw: st.DrawFn,
) -> tuple[list[OpenFollowup], dict[uuid.UUID, InvokeFacts]]:
    """Candidates in thread order and the agent.invoke facts of each of their authors."""
    candidates = sorted(draw(open_followups()), key=lambda f: f.thread_seq)
    invoke = {
        author: attrs.evolve(draw(invoke_facts()), author_id=author)
        for author in {c.author_id for c in candidates}
    }
    return candidates, invoke


@given(candidates_with_facts(), st.booleans())
def test_every_candidate_lands_once_in_order(
    drawn: tuple[list[OpenFollowup], dict[uuid.UUID, InvokeFacts]], answers: bool
) -> None:
    candidates, invoke = drawn
    choice = choose_follow_on(candidates, invoke, agent_answers=answers)
    trigger = [] if choice.trigger is None else [choice.trigger]
    assert [d.followup for d in choice.denied] + trigger + list(choice.moved) == candidates


@given(candidates_with_facts())
def test_denied_before_the_trigger_and_only_then(
    drawn: tuple[list[OpenFollowup], dict[uuid.UUID, InvokeFacts]],
) -> None:
    candidates, invoke = drawn
    choice = choose_follow_on(candidates, invoke, agent_answers=True)
    for denied in choice.denied:
        assert denied.reason is not None
        assert check_invoke(invoke[denied.followup.author_id]) is denied.reason
    if choice.trigger is None:
        assert not choice.moved
        assert len(choice.denied) == len(candidates)
    else:
        assert check_invoke(invoke[choice.trigger.author_id]) is None


@given(candidates_with_facts())
def test_the_facts_and_candidates_are_not_changed(
    drawn: tuple[list[OpenFollowup], dict[uuid.UUID, InvokeFacts]],
) -> None:
    candidates, invoke = drawn
    before = (list(candidates), dict(invoke))
    choose_follow_on(candidates, invoke, agent_answers=True)
    assert (candidates, invoke) == before


@given(candidates_with_facts())
def test_an_agent_that_no_longer_answers_opens_no_follow_on_run(
    drawn: tuple[list[OpenFollowup], dict[uuid.UUID, InvokeFacts]],
) -> None:
    candidates, invoke = drawn
    choice = choose_follow_on(candidates, invoke, agent_answers=False)
    assert choice.trigger is None
    assert not choice.moved
    for denied in choice.denied:
        own = check_invoke(invoke[denied.followup.author_id])
        assert denied.reason is (own or FailReason.AGENT_NOT_ALLOWED_HERE)
