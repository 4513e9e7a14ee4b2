"""Properties of the trigger decision, the run state machine and the answer verdict.

The strategies are built here for now (a later task moves them to turnkeeper/domain/strategies.py).
Ids come from small pools so that mentions, operators, guests and active runs collide often.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import attrs
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.world import T0, fixed_id
from turnkeeper.domain.errors import InvalidStateTransition
from turnkeeper.domain.messaging import Origin
from turnkeeper.domain.runs import (
    END_STATES,
    NO_TRIGGER,
    AgentFacts,
    AnswerRun,
    AnswerVerdict,
    OutcomeKind,
    Run,
    RunState,
    Transition,
    TriggerFacts,
    answer_verdict,
    decide_trigger,
    end,
    finish,
    move,
)
from turnkeeper.domain.world import BillingMode, ChannelBehavior

PEOPLE = [fixed_id(1, n) for n in range(1, 4)]
AGENT_IDS = [fixed_id(1, n) for n in range(4, 8)]
RUN_IDS = [fixed_id(7, n) for n in range(1, 3)]
THREAD_IDS = [fixed_id(5, n) for n in range(1, 3)]

people = st.sampled_from(PEOPLE)
agent_ids = st.sampled_from(AGENT_IDS)
run_states = st.sampled_from(RunState)
origins = st.sampled_from(Origin)
not_human = st.sampled_from([o for o in Origin if o is not Origin.HUMAN])


@st.composite
def agent_facts(draw: st.DrawFn, agent_id: uuid.UUID) -> AgentFacts:
    personal = draw(st.booleans())
    return AgentFacts(
        id=agent_id,
        enabled=draw(st.booleans()),
        billing_mode=BillingMode.PERSONAL if personal else BillingMode.ORGANIZATION,
        holder_id=draw(st.none() | people) if personal else None,
    )


behaviors = st.builds(
    ChannelBehavior,
    free_response=st.booleans(),
    allow_mentioned_agents=st.booleans(),
    thread_require_mention=st.booleans(),
)


@st.composite
def trigger_facts(draw: st.DrawFn, origin: st.SearchStrategy[Origin] = origins) -> TriggerFacts:
    """Facts as the application gathers them: `agents` holds every mentioned agent and the
    operator, people are absent from it; the active run, if any, has an agent."""
    mentions = tuple(draw(st.lists(people | agent_ids, max_size=4)))
    operator = draw(st.none() | agent_ids)
    known = {m for m in mentions if m in AGENT_IDS} | ({operator} if operator else set())
    agents = {a: draw(agent_facts(a)) for a in sorted(known)}
    has_run = draw(st.booleans())
    return TriggerFacts(
        origin=draw(origin),
        author_id=draw(people),
        mentions=mentions,
        agents=agents,
        operator_id=operator,
        is_main_thread=draw(st.booleans()),
        behavior=draw(behaviors),
        guests_with_write=frozenset(draw(st.sets(agent_ids))),
        active_run_id=draw(st.sampled_from(RUN_IDS)) if has_run else None,
        active_run_agent_id=draw(agent_ids) if has_run else None,
    )


@st.composite
def runs(draw: st.DrawFn, state: st.SearchStrategy[RunState] = run_states) -> Run:
    return Run(
        id=draw(st.sampled_from(RUN_IDS)),
        thread_id=draw(st.sampled_from(THREAD_IDS)),
        agent_id=draw(agent_ids),
        state=draw(state),
        state_reason=draw(st.none() | st.sampled_from(["stale", "user_cancelled"])),
        triggering_message_id=fixed_id(8, 1),
        triggered_by=draw(people),
        version=draw(st.integers(1, 1_000)),
        created_at=T0,
        updated_at=T0,
    )


# One step of a run's life: an agent move, an agent finish, or a server end.
steps = st.one_of(
    st.tuples(st.sampled_from(["start", "await_input", "resume"]), st.none()),
    st.tuples(st.sampled_from(["finish", "end"]), run_states),
)


def apply(run: Run, step: tuple[str, RunState | None], at: int) -> Run:
    """The run after one step; unchanged when the step is refused or a no-op."""
    operation, target = step
    when = T0 + timedelta(seconds=at)
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


@given(trigger_facts(origin=not_human))
def test_only_human_messages_trigger(facts: TriggerFacts) -> None:
    assert decide_trigger(facts) == NO_TRIGGER


@given(trigger_facts())
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


@given(trigger_facts(origin=st.just(Origin.HUMAN)))
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


@given(trigger_facts(origin=st.just(Origin.HUMAN)))
def test_a_mentioned_operator_always_wins(facts: TriggerFacts) -> None:
    outcome = decide_trigger(facts)
    if facts.operator_id is not None and facts.operator_id in facts.mentions:
        assert outcome.kind is not OutcomeKind.NONE
        assert outcome.agent_id == facts.operator_id
        assert outcome.mentioned


@given(trigger_facts(origin=st.just(Origin.HUMAN)))
def test_people_mentions_do_not_change_the_decision(facts: TriggerFacts) -> None:
    only_agents = tuple(m for m in facts.mentions if m in facts.agents)
    assert decide_trigger(facts) == decide_trigger(attrs.evolve(facts, mentions=only_agents))


# --- the run state machine -----------------------------------------------------------


@given(runs(state=st.sampled_from(sorted(END_STATES))), run_states)
def test_finish_never_moves_an_ended_run(run: Run, target: RunState) -> None:
    try:
        result = finish(run, target, "again", T0 + timedelta(hours=1))
    except InvalidStateTransition:
        return
    assert result is None
    assert target is run.state


@given(runs(), st.lists(steps, max_size=12))
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


@given(runs(), st.lists(steps, max_size=12))
def test_an_ended_run_stays_ended(run: Run, sequence: list[tuple[str, RunState | None]]) -> None:
    current = run
    for at, step in enumerate(sequence, start=1):
        after = apply(current, step, at)
        if current.state in END_STATES:
            assert after == current
        current = after


# --- answer_verdict -------------------------------------------------------------------


@given(
    st.none()
    | st.builds(
        AnswerRun,
        id=st.sampled_from(RUN_IDS),
        thread_id=st.sampled_from(THREAD_IDS),
        agent_id=agent_ids,
        state=run_states,
    ),
    st.booleans(),
    agent_ids,
    st.sampled_from(THREAD_IDS),
)
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
