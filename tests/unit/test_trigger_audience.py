"""A restricted message sets in motion only agents in its audience."""

from __future__ import annotations

import uuid

import attrs
import pytest

from turnkeeper.domain.messaging import Origin
from turnkeeper.domain.runs import AgentFacts, OutcomeKind, TriggerFacts, decide_trigger
from turnkeeper.domain.world import ChannelBehavior

ALEX = uuid.UUID(int=1)
SAM = uuid.UUID(int=2)
LOTSE = uuid.UUID(int=10)
TEXTER = uuid.UUID(int=11)
FREE = ChannelBehavior(free_response=True, allow_mentioned_agents=True)


def facts(mentions: tuple[uuid.UUID, ...], audience: frozenset[uuid.UUID] | None) -> TriggerFacts:
    return TriggerFacts(
        origin=Origin.HUMAN,
        author_id=ALEX,
        mentions=mentions,
        agents={LOTSE: AgentFacts(id=LOTSE), TEXTER: AgentFacts(id=TEXTER)},
        operator_id=LOTSE,
        is_main_thread=True,
        behavior=FREE,
        guests_with_write=frozenset({TEXTER}),
        audience=audience,
    )


@pytest.mark.parametrize(
    ("mentions", "audience", "kind", "agent"),
    [
        ((), None, OutcomeKind.INVOKE, LOTSE),
        ((), frozenset({ALEX, SAM}), OutcomeKind.NONE, None),
        ((), frozenset({ALEX, LOTSE}), OutcomeKind.INVOKE, LOTSE),
        ((LOTSE,), frozenset({ALEX, SAM}), OutcomeKind.NONE, None),
        ((TEXTER,), frozenset({ALEX, TEXTER}), OutcomeKind.INVOKE, TEXTER),
        ((LOTSE, TEXTER), frozenset({ALEX, TEXTER}), OutcomeKind.INVOKE, TEXTER),
        ((TEXTER,), frozenset({ALEX}), OutcomeKind.NONE, None),
        # The message asked Texter alone: the operator it did not name stays out.
        ((TEXTER,), frozenset({ALEX, LOTSE}), OutcomeKind.NONE, None),
    ],
    ids=[
        "public",
        "operator-outside",
        "operator-inside",
        "mentioned-operator-outside",
        "guest-inside",
        "operator-outside-guest-inside",
        "guest-outside",
        "guest-outside-operator-inside",
    ],
)
def test_only_agents_in_the_audience_are_candidates(
    mentions: tuple[uuid.UUID, ...],
    audience: frozenset[uuid.UUID] | None,
    kind: OutcomeKind,
    agent: uuid.UUID | None,
) -> None:
    outcome = decide_trigger(facts(mentions, audience))
    assert (outcome.kind, outcome.agent_id) == (kind, agent)


def test_a_passed_over_mention_is_no_followup_of_the_operators_run() -> None:
    active = attrs.evolve(
        facts((TEXTER,), frozenset({ALEX, LOTSE})),
        active_run_id=uuid.UUID(int=99),
        active_run_agent_id=LOTSE,
    )
    assert decide_trigger(active).kind is OutcomeKind.NONE
