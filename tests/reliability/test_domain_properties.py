"""Property tests of the pure rules, drawn from the shipped `turnkeeper.domain.strategies`."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from turnkeeper.domain import strategies as ds
from turnkeeper.domain.authorization import AccessTarget, Action, authorize, effective_level
from turnkeeper.domain.followups import (
    FollowupMode,
    OpenFollowup,
    RunEnd,
    followup_event_needed,
    plan_run_end,
)
from turnkeeper.domain.freshness import MessageFreshnessFrontier, verdict
from turnkeeper.domain.messaging import Message, Origin
from turnkeeper.domain.runs import (
    AnswerRun,
    AnswerVerdict,
    FailReason,
    InvokeFacts,
    OutcomeKind,
    Run,
    RunState,
    TriggerFacts,
    answer_verdict,
    check_invoke,
)
from turnkeeper.domain.runs import decide_trigger as decide
from turnkeeper.domain.world import AGENT_GRANT_CAP, Channel, Grant, Level, Principal, Space, Thread

not_human = st.sampled_from([o for o in Origin if o is not Origin.HUMAN])


@given(ds.trigger_facts(origin=not_human))
def test_no_origin_but_human_ever_triggers(facts: TriggerFacts) -> None:
    assert decide(facts).kind is OutcomeKind.NONE


@given(ds.trigger_facts(origin=st.just(Origin.HUMAN)))
def test_a_trigger_candidate_is_always_a_known_agent(facts: TriggerFacts) -> None:
    outcome = decide(facts)
    if outcome.kind in (OutcomeKind.INVOKE, OutcomeKind.FOLLOWUP):
        assert outcome.agent_id in facts.agents


@given(ds.invoke_facts())
def test_a_personal_agent_is_invoked_only_for_its_holder(facts: InvokeFacts) -> None:
    reason = check_invoke(facts)
    agent = facts.agent
    if reason is None and agent.billing_mode.value == "personal":
        assert agent.holder_id == facts.author_id
    if facts.origin is not Origin.HUMAN:
        assert reason is FailReason.ORIGIN_NOT_HUMAN


@given(ds.run_ends, ds.open_followups())
def test_every_open_followup_lands_in_exactly_one_list(
    end: RunEnd, open_: list[OpenFollowup]
) -> None:
    plan = plan_run_end(end, open_)
    placed = [*plan.deleted, *plan.stopped, *plan.candidates]
    assert sorted(f.message_id for f in placed) == sorted(f.message_id for f in open_)
    seqs = [c.thread_seq for c in plan.candidates]
    assert seqs == sorted(seqs)


@given(ds.followup_modes, ds.end_states)
def test_no_followup_event_for_an_ended_run(mode: FollowupMode, state: RunState) -> None:
    assert not followup_event_needed(mode, state)


@given(ds.answer_runs(), ds.agent_ids, ds.thread_ids)
def test_an_answer_never_names_another_agents_run(
    run: AnswerRun, agent: uuid.UUID, thread: uuid.UUID
) -> None:
    result = answer_verdict(run, True, agent, thread)
    if run.agent_id != agent or run.thread_id != thread:
        assert result is AnswerVerdict.RUN_MISMATCH


@given(ds.freshness_frontiers())
def test_a_frontier_that_needs_a_refresh_holds(frontier: MessageFreshnessFrontier) -> None:
    local = verdict(frontier)
    if frontier.needs_refresh_until_seq:
        assert local.hold


@given(ds.agents(), ds.spaces(), ds.channels(), st.lists(ds.grants(), max_size=4))
def test_an_agent_never_gets_trigger_and_never_closes(
    agent: Principal, space: Space, channel: Channel, grants: list[Grant]
) -> None:
    target = AccessTarget(space=space, channel=channel)
    assert effective_level(agent, target, grants) <= AGENT_GRANT_CAP
    decision = authorize(agent, Action.RUN_CANCEL, target, grants)
    assert not decision.allowed
    assert Level.TRIGGER > AGENT_GRANT_CAP


@given(ds.messages(), ds.runs(), ds.threads(), ds.people())
def test_drawn_values_satisfy_their_own_rules(
    message: Message, run: Run, thread: Thread, person: Principal
) -> None:
    if message.trigger_state is not None:
        assert message.origin is Origin.HUMAN
    assert (message.kind.value == "run") == (message.run_id is not None)
    assert run.version >= 1
    assert not (thread.is_main and thread.operator_agent_id)
    assert not person.is_agent
