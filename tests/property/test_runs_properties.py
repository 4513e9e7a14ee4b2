"""Properties of the trigger decision, agent.invoke, the run state machine and the answer verdict.

Values come from `turnkeeper.domain.strategies`: ids from small pools, so that mentions,
operators, guests and active runs collide often.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from turnkeeper.domain import strategies as ds
from turnkeeper.domain.delivery import DeliveryReason, delivery_reason
from turnkeeper.domain.errors import InvalidStateTransition
from turnkeeper.domain.finish import finish
from turnkeeper.domain.messaging import Origin
from turnkeeper.domain.runs import (
    END_STATES,
    NO_TRIGGER,
    AnswerRun,
    AnswerVerdict,
    FailReason,
    InvokeFacts,
    OutcomeKind,
    Run,
    RunState,
    Transition,
    TriggerFacts,
    answer_verdict,
    check_invoke,
    decide_trigger,
    end,
    move,
)
from turnkeeper.domain.world import BillingMode

not_human = st.sampled_from([o for o in Origin if o is not Origin.HUMAN])

# One step of a run's life: an agent move, an agent finish, or a server end.
steps = st.one_of(
    st.tuples(st.sampled_from(["start", "await_input", "resume"]), st.none()),
    st.tuples(st.sampled_from(["finish", "end"]), ds.run_states),
)


def apply(run: Run, step: tuple[str, RunState | None], at: int) -> Run:
    """The run after one step; unchanged when the step is refused or a no-op."""
    operation, target = step
    when = run.updated_at + timedelta(seconds=at)
    try:
        if operation == "finish":
            assert target is not None
            return finish(run, target, None, when) or run
        if operation == "end":
            assert target is not None
            return end(run, target, None, when)
        return move(run, Transition(operation), when)
    except InvalidStateTransition:
        return run


# --- decide_trigger -------------------------------------------------------------------


@given(ds.trigger_facts(origin=not_human))
def test_only_human_messages_trigger(facts: TriggerFacts) -> None:
    outcome = decide_trigger(facts)
    assert outcome == NO_TRIGGER
    assert outcome.kind is OutcomeKind.NONE


@given(ds.trigger_facts())
def test_outcomes_are_consistent(facts: TriggerFacts) -> None:
    outcome = decide_trigger(facts)
    if outcome.kind in (OutcomeKind.INVOKE, OutcomeKind.FOLLOWUP):
        assert outcome.agent_id is not None
        assert outcome.reason is None
    if outcome.kind is OutcomeKind.INVOKE:
        assert facts.active_run_id is None
        assert outcome.run_id is None
    if outcome.kind is OutcomeKind.FOLLOWUP:
        assert facts.active_run_id is not None
        assert outcome.run_id == facts.active_run_id
        assert outcome.agent_id == facts.active_run_agent_id
    if outcome.kind is OutcomeKind.FAILED:
        assert outcome.reason is not None
        assert outcome.run_id is None
    if outcome.kind is OutcomeKind.NONE:
        assert outcome == NO_TRIGGER


@given(ds.trigger_facts(origin=st.just(Origin.HUMAN)))
def test_the_candidate_is_the_operator_or_a_mentioned_agent(facts: TriggerFacts) -> None:
    outcome = decide_trigger(facts)
    if outcome.agent_id is None:
        return
    if outcome.agent_id != facts.operator_id:
        assert outcome.mentioned
        assert outcome.agent_id in facts.mentions
        assert facts.behavior.allow_mentioned_agents
        assert outcome.agent_id in facts.guests_with_write
    assert outcome.mentioned == any(m in facts.agents for m in facts.mentions)


@given(ds.trigger_facts(origin=st.just(Origin.HUMAN)))
def test_a_trigger_candidate_is_always_a_known_agent(facts: TriggerFacts) -> None:
    outcome = decide_trigger(facts)
    if outcome.kind in (OutcomeKind.INVOKE, OutcomeKind.FOLLOWUP):
        assert outcome.agent_id in facts.agents


@given(ds.trigger_facts(origin=st.just(Origin.HUMAN)))
def test_a_mentioned_operator_always_wins(facts: TriggerFacts) -> None:
    outcome = decide_trigger(facts)
    if facts.operator_id is not None and facts.operator_id in facts.mentions:
        assert outcome.kind is not OutcomeKind.NONE
        assert outcome.agent_id == facts.operator_id
        assert outcome.mentioned


@st.composite
def restricted_trigger_facts(draw: st.DrawFn) -> TriggerFacts:
    """`ds.trigger_facts` of a human message with an audience of some of the agents."""
    facts = draw(ds.trigger_facts(origin=st.just(Origin.HUMAN)))
    # Each agent in or out with even odds: the interesting cases mix both.
    audience = {agent for agent in sorted(facts.agents) if draw(st.booleans())}
    return attrs.evolve(facts, audience=frozenset({facts.author_id, *audience}))


#: Examples of the audience property: a mention outside the audience with the operator
#: inside and answering is a few percent of the drawn facts.
AUDIENCE_EXAMPLES = 1000


@settings(max_examples=AUDIENCE_EXAMPLES)
@given(restricted_trigger_facts())
def test_a_restricted_message_sets_in_motion_only_an_agent_it_may_ask(
    facts: TriggerFacts,
) -> None:
    outcome = decide_trigger(facts)
    assert facts.audience is not None
    if outcome.agent_id is not None:
        assert outcome.agent_id in facts.audience
    if outcome.kind in (OutcomeKind.INVOKE, OutcomeKind.FOLLOWUP) and any(
        m in facts.agents for m in facts.mentions
    ):
        # A message that names agents asks them, never the operator it did not name.
        assert outcome.agent_id in facts.mentions


@given(ds.trigger_facts(origin=st.just(Origin.HUMAN)))
def test_people_mentions_do_not_change_the_decision(facts: TriggerFacts) -> None:
    only_agents = tuple(m for m in facts.mentions if m in facts.agents)
    assert decide_trigger(facts) == decide_trigger(attrs.evolve(facts, mentions=only_agents))


# --- check_invoke ---------------------------------------------------------------------


@given(ds.invoke_facts())
def test_a_personal_agent_is_invoked_only_for_its_holder(facts: InvokeFacts) -> None:
    reason = check_invoke(facts)
    agent = facts.agent
    if reason is None and agent.billing_mode is BillingMode.PERSONAL:
        assert agent.holder_id == facts.author_id
    if facts.origin is not Origin.HUMAN:
        assert reason is FailReason.ORIGIN_NOT_HUMAN


#: The words only the acceptance gives: agent.invoke's and the trigger decision's, less
#: origin_not_human, which the delivery mapping keeps (a message's origin never changes).
ACCEPTANCE_ONLY = frozenset(r.value for r in FailReason) - {FailReason.ORIGIN_NOT_HUMAN.value}


@given(st.sampled_from(FailReason))
def test_delivery_reason_is_total_and_never_an_acceptance_word(reason: FailReason) -> None:
    shown = delivery_reason(reason)
    assert isinstance(shown, DeliveryReason)
    assert shown.value not in ACCEPTANCE_ONLY


@given(ds.invoke_facts(origin=st.just(Origin.HUMAN)))
def test_a_recheck_after_acceptance_shows_a_loss_not_the_origin(facts: InvokeFacts) -> None:
    # Acceptance takes human messages only, so a later check never fails on the origin.
    reason = check_invoke(facts)
    if reason is not None:
        assert delivery_reason(reason) in {
            DeliveryReason.ACCESS_REVOKED,
            DeliveryReason.AGENT_DISABLED,
            DeliveryReason.CHANNEL_READ_ONLY,
        }


# --- the run state machine -----------------------------------------------------------


@given(ds.runs(state=ds.end_states), ds.run_states)
def test_finish_never_moves_an_ended_run(run: Run, target: RunState) -> None:
    try:
        result = finish(run, target, "again", run.updated_at + timedelta(hours=1))
    except InvalidStateTransition:
        return
    assert result is None
    assert target is run.state


@given(ds.runs(), st.lists(steps, max_size=12))
def test_version_never_decreases(run: Run, sequence: list[tuple[str, RunState | None]]) -> None:
    current = run
    for at, step in enumerate(sequence, start=1):
        after = apply(current, step, at)
        if after.state is current.state:
            assert after.version == current.version
        else:
            assert after.version == current.version + 1
            assert current.state not in END_STATES
        current = after
    assert current.version >= run.version
    assert current.version - run.version <= len(sequence)


@given(ds.runs(), st.lists(steps, max_size=12))
def test_an_ended_run_stays_ended(run: Run, sequence: list[tuple[str, RunState | None]]) -> None:
    current = run
    for at, step in enumerate(sequence, start=1):
        after = apply(current, step, at)
        if current.state in END_STATES:
            assert after == current
        current = after


# --- answer_verdict -------------------------------------------------------------------


@given(st.none() | ds.answer_runs(), st.booleans(), ds.agent_ids, ds.thread_ids)
def test_answer_is_ok_only_for_an_active_own_run_of_the_same_thread(
    run: AnswerRun | None, found: bool, agent_id: uuid.UUID, thread_id: uuid.UUID
) -> None:
    result = answer_verdict(run, found, agent_id, thread_id)
    own = found and run is not None and run.agent_id == agent_id and run.thread_id == thread_id
    if not own:
        assert result is AnswerVerdict.RUN_MISMATCH
    else:
        assert run is not None
        expected = AnswerVerdict.OK if run.state.active else AnswerVerdict.RUN_NOT_ACTIVE
        assert result is expected
