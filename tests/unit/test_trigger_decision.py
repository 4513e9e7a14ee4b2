"""Table tests of `decide_trigger` (DESIGN section 5, steps 1 and 2), `check_invoke` (step 3)
and `delivery_reason` (the reason of a trigger refused after its acceptance).

The ids are those of the DESIGN section 11 test world: Alex and Robin are people, Lotse is
the operator of the thread in every row that has one, Texter is an organization guest and
Assistent a personal agent held by Robin. Each row builds its `TriggerFacts` directly, so
that it names exactly the fact it is about.
"""

from __future__ import annotations

import itertools
import uuid

import attrs
import pytest

from tests.support.domain_world import build_world, fixed_id
from turnkeeper.domain.delivery import DeliveryReason, delivery_reason, refused_invocation_end
from turnkeeper.domain.messaging import Origin
from turnkeeper.domain.runs import (
    NO_TRIGGER,
    AgentFacts,
    FailReason,
    InvokeFacts,
    OutcomeKind,
    RunState,
    TriggerFacts,
    TriggerOutcome,
    check_invoke,
    decide_trigger,
)
from turnkeeper.domain.world import BillingMode, ChannelBehavior, Level

WORLD = build_world()
ROBIN = WORLD.principal("robin").id
ALEX = WORLD.principal("alex").id
SAM = WORLD.principal("sam").id
LOTSE = WORLD.principal("lotse").id
TEXTER = WORLD.principal("texter").id
ASSISTENT = WORLD.principal("assistent").id
RUN = fixed_id(7, 1)

AGENTS = {
    LOTSE: AgentFacts(id=LOTSE),
    TEXTER: AgentFacts(id=TEXTER),
    ASSISTENT: AgentFacts(id=ASSISTENT, billing_mode=BillingMode.PERSONAL, holder_id=ROBIN),
}
NOT_HUMAN = [Origin.AGENT, Origin.APP, Origin.SYSTEM]


def facts(
    *,
    origin: Origin = Origin.HUMAN,
    mentions: tuple[uuid.UUID, ...] = (),
    operator: uuid.UUID | None = LOTSE,
    main: bool = False,
    free_response: bool = False,
    allow_mentioned: bool = False,
    require_mention: bool = False,
    guests: frozenset[uuid.UUID] = frozenset(),
    active: uuid.UUID | None = None,
) -> TriggerFacts:
    """Facts of a message by Alex; `active` is the agent of the thread's active run RUN."""
    return TriggerFacts(
        origin=origin,
        author_id=ALEX,
        mentions=mentions,
        agents=AGENTS,
        operator_id=operator,
        is_main_thread=main,
        behavior=ChannelBehavior(
            free_response=free_response,
            allow_mentioned_agents=allow_mentioned,
            thread_require_mention=require_mention,
        ),
        guests_with_write=guests,
        active_run_id=RUN if active is not None else None,
        active_run_agent_id=active,
    )


def invoke(agent: uuid.UUID, *, mentioned: bool) -> TriggerOutcome:
    return TriggerOutcome(kind=OutcomeKind.INVOKE, agent_id=agent, mentioned=mentioned)


def followup(agent: uuid.UUID, *, mentioned: bool) -> TriggerOutcome:
    return TriggerOutcome(
        kind=OutcomeKind.FOLLOWUP, agent_id=agent, mentioned=mentioned, run_id=RUN
    )


NOT_ALLOWED_HERE = TriggerOutcome(
    kind=OutcomeKind.FAILED, reason=FailReason.AGENT_NOT_ALLOWED_HERE, mentioned=True
)


def other_agent_active(candidate: uuid.UUID, *, mentioned: bool) -> TriggerOutcome:
    return TriggerOutcome(
        kind=OutcomeKind.FAILED,
        reason=FailReason.RUN_ACTIVE_OTHER_AGENT,
        agent_id=candidate,
        mentioned=mentioned,
    )


# Contexts in which a human message would trigger something; no other origin may.
TRIGGERING_CONTEXTS = {
    "mentions-operator": facts(mentions=(LOTSE,), require_mention=True),
    "mentions-allowed-guest": facts(
        mentions=(TEXTER,), allow_mentioned=True, guests=frozenset({TEXTER})
    ),
    "mentions-disallowed-guest": facts(mentions=(TEXTER,)),
    "thread-with-active-run-of-operator": facts(mentions=(LOTSE,), active=LOTSE),
    "thread-with-active-run-of-other-agent": facts(mentions=(LOTSE,), active=TEXTER),
    "free-response-main-thread": facts(main=True, free_response=True),
    "thread-without-require-mention": facts(),
}


@pytest.mark.parametrize("context", list(TRIGGERING_CONTEXTS), ids=str)
def test_the_contexts_trigger_for_a_human(context: str) -> None:
    # Guards the table below: each context really does something for a human message.
    assert decide_trigger(TRIGGERING_CONTEXTS[context]) != NO_TRIGGER


@pytest.mark.parametrize(
    ("origin", "context"),
    list(itertools.product(NOT_HUMAN, TRIGGERING_CONTEXTS)),
    ids=lambda v: str(v),
)
def test_origin_other_than_human_never_triggers(origin: Origin, context: str) -> None:
    message = attrs.evolve(TRIGGERING_CONTEXTS[context], origin=origin)
    assert decide_trigger(message) == NO_TRIGGER


NO_MENTION_ROWS = [
    pytest.param(
        facts(main=True, free_response=True),
        invoke(LOTSE, mentioned=False),
        id="main-free_response-invokes-operator",
    ),
    pytest.param(
        facts(main=True, free_response=True, require_mention=True),
        invoke(LOTSE, mentioned=False),
        id="main-free_response-ignores-thread_require_mention",
    ),
    pytest.param(facts(main=True), NO_TRIGGER, id="main-without-free_response-none"),
    pytest.param(
        facts(main=True, allow_mentioned=True),
        NO_TRIGGER,
        id="main-without-free_response-but-allow_mentioned-none",
    ),
    pytest.param(facts(), invoke(LOTSE, mentioned=False), id="thread-invokes-operator"),
    pytest.param(
        facts(free_response=True, require_mention=True),
        NO_TRIGGER,
        id="thread-require_mention-none-even-with-free_response",
    ),
    pytest.param(facts(require_mention=True), NO_TRIGGER, id="thread-require_mention-none"),
    pytest.param(facts(operator=None), NO_TRIGGER, id="thread-without-operator-none"),
    pytest.param(
        facts(operator=None, main=True, free_response=True),
        NO_TRIGGER,
        id="main-without-operator-none",
    ),
    pytest.param(
        facts(main=True, free_response=True, mentions=(SAM,)),
        invoke(LOTSE, mentioned=False),
        id="person-only-mention-counts-as-none-main-free_response",
    ),
    pytest.param(
        facts(mentions=(SAM, ROBIN)),
        invoke(LOTSE, mentioned=False),
        id="person-only-mentions-count-as-none-thread",
    ),
    pytest.param(
        facts(require_mention=True, mentions=(SAM,)),
        NO_TRIGGER,
        id="person-only-mention-does-not-satisfy-require_mention",
    ),
    pytest.param(
        facts(main=True, mentions=(SAM,)),
        NO_TRIGGER,
        id="person-only-mention-main-without-free_response-none",
    ),
]

MENTION_ROWS = [
    pytest.param(
        facts(mentions=(LOTSE,), require_mention=True),
        invoke(LOTSE, mentioned=True),
        id="operator-mentioned-in-require_mention-thread",
    ),
    pytest.param(
        facts(mentions=(LOTSE,), main=True),
        invoke(LOTSE, mentioned=True),
        id="operator-mentioned-in-main-without-free_response",
    ),
    pytest.param(
        facts(mentions=(LOTSE,), main=True, free_response=True),
        invoke(LOTSE, mentioned=True),
        id="operator-mentioned-in-free_response-main-is-mentioned",
    ),
    pytest.param(
        facts(mentions=(SAM, LOTSE), require_mention=True),
        invoke(LOTSE, mentioned=True),
        id="person-then-operator",
    ),
    pytest.param(
        facts(mentions=(TEXTER, LOTSE), allow_mentioned=True, guests=frozenset({TEXTER})),
        invoke(LOTSE, mentioned=True),
        id="allowed-guest-before-operator-operator-wins",
    ),
    pytest.param(
        facts(mentions=(TEXTER, LOTSE)),
        invoke(LOTSE, mentioned=True),
        id="disallowed-guest-before-operator-operator-wins",
    ),
    pytest.param(
        facts(mentions=(TEXTER,), allow_mentioned=True, guests=frozenset({TEXTER})),
        invoke(TEXTER, mentioned=True),
        id="guest-with-write-and-allow-invokes-guest",
    ),
    pytest.param(
        facts(
            mentions=(SAM, TEXTER),
            allow_mentioned=True,
            require_mention=True,
            guests=frozenset({TEXTER}),
        ),
        invoke(TEXTER, mentioned=True),
        id="person-then-allowed-guest-invokes-guest",
    ),
    pytest.param(
        facts(
            mentions=(TEXTER, ASSISTENT),
            allow_mentioned=True,
            guests=frozenset({ASSISTENT}),
        ),
        invoke(ASSISTENT, mentioned=True),
        id="first-guest-without-write-skipped-for-guest-with-write",
    ),
    pytest.param(
        facts(
            mentions=(TEXTER, ASSISTENT),
            allow_mentioned=True,
            guests=frozenset({TEXTER, ASSISTENT}),
        ),
        invoke(TEXTER, mentioned=True),
        id="first-of-two-allowed-guests",
    ),
    pytest.param(
        facts(
            operator=None,
            mentions=(LOTSE,),
            allow_mentioned=True,
            guests=frozenset({LOTSE}),
        ),
        invoke(LOTSE, mentioned=True),
        id="guest-with-write-in-thread-without-operator",
    ),
    pytest.param(
        facts(mentions=(TEXTER,), allow_mentioned=True),
        NOT_ALLOWED_HERE,
        id="guest-without-write-fails",
    ),
    pytest.param(
        facts(mentions=(TEXTER,), guests=frozenset({TEXTER})),
        NOT_ALLOWED_HERE,
        id="guest-with-write-without-allow-fails",
    ),
    pytest.param(
        facts(mentions=(TEXTER,), main=True, free_response=True),
        NOT_ALLOWED_HERE,
        id="disallowed-guest-in-free_response-main-fails-not-operator",
    ),
    pytest.param(
        facts(operator=None, mentions=(TEXTER,)),
        NOT_ALLOWED_HERE,
        id="agent-mentioned-in-thread-without-operator-fails",
    ),
    pytest.param(
        facts(mentions=(SAM, TEXTER), require_mention=True),
        NOT_ALLOWED_HERE,
        id="person-then-disallowed-guest-fails",
    ),
]

ACTIVE_RUN_ROWS = [
    pytest.param(
        facts(active=LOTSE),
        followup(LOTSE, mentioned=False),
        id="unmentioned-operator-own-run-followup",
    ),
    pytest.param(
        facts(main=True, free_response=True, active=LOTSE),
        followup(LOTSE, mentioned=False),
        id="free_response-main-own-run-followup",
    ),
    pytest.param(
        facts(mentions=(LOTSE,), require_mention=True, active=LOTSE),
        followup(LOTSE, mentioned=True),
        id="mentioned-operator-own-run-followup",
    ),
    pytest.param(
        facts(
            mentions=(TEXTER,),
            allow_mentioned=True,
            guests=frozenset({TEXTER}),
            active=TEXTER,
        ),
        followup(TEXTER, mentioned=True),
        id="mentioned-guest-own-run-followup",
    ),
    pytest.param(
        facts(active=TEXTER),
        other_agent_active(LOTSE, mentioned=False),
        id="unmentioned-operator-other-agent-run-fails",
    ),
    pytest.param(
        facts(main=True, free_response=True, active=TEXTER),
        other_agent_active(LOTSE, mentioned=False),
        id="free_response-main-other-agent-run-fails",
    ),
    pytest.param(
        facts(mentions=(LOTSE,), require_mention=True, active=TEXTER),
        other_agent_active(LOTSE, mentioned=True),
        id="mentioned-operator-other-agent-run-fails",
    ),
    pytest.param(
        facts(
            mentions=(TEXTER,),
            allow_mentioned=True,
            guests=frozenset({TEXTER}),
            active=LOTSE,
        ),
        other_agent_active(TEXTER, mentioned=True),
        id="mentioned-guest-operator-run-fails",
    ),
    pytest.param(
        facts(require_mention=True, active=LOTSE),
        NO_TRIGGER,
        id="no-candidate-with-active-run-none",
    ),
    pytest.param(
        facts(operator=None, active=TEXTER),
        NO_TRIGGER,
        id="no-operator-with-active-run-none",
    ),
    pytest.param(
        facts(mentions=(TEXTER,), active=TEXTER),
        NOT_ALLOWED_HERE,
        id="disallowed-guest-fails-before-its-own-active-run",
    ),
]


@pytest.mark.parametrize(("message", "expected"), NO_MENTION_ROWS)
def test_without_mention(message: TriggerFacts, expected: TriggerOutcome) -> None:
    assert decide_trigger(message) == expected


@pytest.mark.parametrize(("message", "expected"), MENTION_ROWS)
def test_with_mention(message: TriggerFacts, expected: TriggerOutcome) -> None:
    assert decide_trigger(message) == expected


@pytest.mark.parametrize(("message", "expected"), ACTIVE_RUN_ROWS)
def test_with_an_active_run(message: TriggerFacts, expected: TriggerOutcome) -> None:
    assert decide_trigger(message) == expected


def test_no_trigger_is_the_bare_none_outcome() -> None:
    assert TriggerOutcome(kind=OutcomeKind.NONE) == NO_TRIGGER


# --- check_invoke (DESIGN section 5 step 3) ------------------------------------------

PERSONAL = AGENTS[ASSISTENT]
ORGANIZATION = AGENTS[LOTSE]


def invoke_facts(
    *,
    origin: Origin = Origin.HUMAN,
    author: uuid.UUID = ALEX,
    level: Level = Level.TRIGGER,
    archived: bool = False,
    agent: AgentFacts = ORGANIZATION,
) -> InvokeFacts:
    return InvokeFacts(
        origin=origin, author_id=author, author_level=level, channel_archived=archived, agent=agent
    )


DISABLED = attrs.evolve(ORGANIZATION, enabled=False)
PERSONAL_WITHOUT_HOLDER = attrs.evolve(PERSONAL, holder_id=None)

CHECK_INVOKE_ROWS = [
    pytest.param(invoke_facts(), None, id="allow-trigger-enabled-organization"),
    pytest.param(
        invoke_facts(author=ROBIN, agent=PERSONAL), None, id="allow-personal-triggered-by-holder"
    ),
    *[
        pytest.param(invoke_facts(origin=o), FailReason.ORIGIN_NOT_HUMAN, id=f"origin-{o}")
        for o in NOT_HUMAN
    ],
    pytest.param(invoke_facts(archived=True), FailReason.CHANNEL_ARCHIVED, id="channel-archived"),
    *[
        pytest.param(
            invoke_facts(level=lv), FailReason.NO_TRIGGER_RIGHT, id=f"level-{lv.label}-no-trigger"
        )
        for lv in (Level.NONE, Level.READ, Level.WRITE)
    ],
    pytest.param(invoke_facts(agent=DISABLED), FailReason.AGENT_NOT_REACHABLE, id="agent-disabled"),
    pytest.param(
        invoke_facts(author=ALEX, agent=PERSONAL),
        FailReason.BILLING_MODE_PERSONAL_NOT_HOLDER,
        id="personal-not-holder",
    ),
    pytest.param(
        invoke_facts(author=ROBIN, agent=PERSONAL_WITHOUT_HOLDER),
        FailReason.BILLING_MODE_PERSONAL_NOT_HOLDER,
        id="personal-without-any-holder",
    ),
    pytest.param(
        invoke_facts(author=ALEX, agent=attrs.evolve(ORGANIZATION, holder_id=ROBIN)),
        None,
        id="organization-agent-ignores-holder",
    ),
]


@pytest.mark.parametrize(("invoke_check", "expected"), CHECK_INVOKE_ROWS)
def test_check_invoke_each_reason_alone(
    invoke_check: InvokeFacts, expected: FailReason | None
) -> None:
    assert check_invoke(invoke_check) is expected


#: The order `check_invoke` reports denials in when several apply (pinned; DESIGN section 5
#: lists the conditions but not their priority): origin, archive, level, reachability,
#: billing holder.
CHECK_ORDER = [
    FailReason.ORIGIN_NOT_HUMAN,
    FailReason.CHANNEL_ARCHIVED,
    FailReason.NO_TRIGGER_RIGHT,
    FailReason.AGENT_NOT_REACHABLE,
    FailReason.BILLING_MODE_PERSONAL_NOT_HOLDER,
]


def with_faults(faults: frozenset[FailReason]) -> InvokeFacts:
    agent = attrs.evolve(
        PERSONAL if FailReason.BILLING_MODE_PERSONAL_NOT_HOLDER in faults else ORGANIZATION,
        enabled=FailReason.AGENT_NOT_REACHABLE not in faults,
    )
    return invoke_facts(
        origin=Origin.AGENT if FailReason.ORIGIN_NOT_HUMAN in faults else Origin.HUMAN,
        archived=FailReason.CHANNEL_ARCHIVED in faults,
        level=Level.WRITE if FailReason.NO_TRIGGER_RIGHT in faults else Level.TRIGGER,
        agent=agent,
    )


FAULT_SETS = [
    frozenset(combo)
    for size in range(len(CHECK_ORDER) + 1)
    for combo in itertools.combinations(CHECK_ORDER, size)
]


@pytest.mark.parametrize(
    "faults",
    FAULT_SETS,
    ids=lambda fs: "+".join(r.value for r in CHECK_ORDER if r in fs) or "none",
)
def test_check_invoke_reports_the_first_fault_in_order(faults: frozenset[FailReason]) -> None:
    expected = next((r for r in CHECK_ORDER if r in faults), None)
    assert check_invoke(with_faults(faults)) is expected


# --- delivery_reason (seed followups-steer-and-queue, design note 13) -----------------

#: The delivery mapping of agent.invoke's reasons, one row per `FailReason`.
DELIVERY_ROWS = [
    pytest.param(
        FailReason.NO_TRIGGER_RIGHT, DeliveryReason.ACCESS_REVOKED, id="lost-trigger-right"
    ),
    pytest.param(
        FailReason.BILLING_MODE_PERSONAL_NOT_HOLDER,
        DeliveryReason.ACCESS_REVOKED,
        id="personal-not-holder",
    ),
    pytest.param(
        FailReason.AGENT_NOT_REACHABLE, DeliveryReason.AGENT_DISABLED, id="agent-disabled"
    ),
    pytest.param(
        FailReason.CHANNEL_ARCHIVED, DeliveryReason.CHANNEL_READ_ONLY, id="channel-archived"
    ),
    pytest.param(
        FailReason.ORIGIN_NOT_HUMAN, DeliveryReason.ORIGIN_NOT_HUMAN, id="origin-unchanged"
    ),
    # The trigger decision's own reasons never come from check_invoke; still no acceptance
    # word may reach a message refused after its acceptance.
    pytest.param(
        FailReason.AGENT_NOT_ALLOWED_HERE,
        DeliveryReason.ACCESS_REVOKED,
        id="decision-agent-not-allowed-here",
    ),
    pytest.param(
        FailReason.RUN_ACTIVE_OTHER_AGENT,
        DeliveryReason.ACCESS_REVOKED,
        id="decision-run-active-other-agent",
    ),
]


@pytest.mark.parametrize(("reason", "expected"), DELIVERY_ROWS)
def test_delivery_reason_maps_each_invoke_reason(
    reason: FailReason, expected: DeliveryReason
) -> None:
    assert delivery_reason(reason) is expected


def test_the_delivery_table_names_every_fail_reason_once() -> None:
    named = [row.values[0] for row in DELIVERY_ROWS]
    assert len(named) == len(set(named))
    assert set(named) == set(FailReason)


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        pytest.param(invoke_facts(level=Level.WRITE), "access_revoked", id="trigger-downgraded"),
        pytest.param(invoke_facts(level=Level.NONE), "access_revoked", id="grant-revoked"),
        pytest.param(invoke_facts(agent=DISABLED), "agent_disabled", id="agent-disabled"),
        pytest.param(invoke_facts(archived=True), "channel_read_only", id="channel-archived"),
    ],
)
def test_a_recheck_after_acceptance_shows_the_seeds_words(
    facts: InvokeFacts, expected: str
) -> None:
    reason = check_invoke(facts)
    assert reason is not None
    assert delivery_reason(reason) == expected


#: How a queued run ends when its invocation is refused at delivery, per agent.invoke reason.
REFUSED_INVOCATION_ENDS = {
    FailReason.NO_TRIGGER_RIGHT: (RunState.FAILED, "access_revoked"),
    FailReason.BILLING_MODE_PERSONAL_NOT_HOLDER: (RunState.FAILED, "access_revoked"),
    FailReason.CHANNEL_ARCHIVED: (RunState.FAILED, "channel_read_only"),
    FailReason.AGENT_NOT_ALLOWED_HERE: (RunState.FAILED, "access_revoked"),
    FailReason.RUN_ACTIVE_OTHER_AGENT: (RunState.FAILED, "access_revoked"),
    FailReason.ORIGIN_NOT_HUMAN: (RunState.FAILED, "origin_not_human"),
    # Found by an audit: a disabled agent's poll ended its queued run failed, the job
    # cancelled (DESIGN.md section 6: agent disabled, cancelled / agent_disabled).
    FailReason.AGENT_NOT_REACHABLE: (RunState.CANCELLED, "agent_disabled"),
}


@pytest.mark.parametrize(
    ("reason", "expected"),
    REFUSED_INVOCATION_ENDS.items(),
    ids=[r.value for r in REFUSED_INVOCATION_ENDS],
)
def test_a_refused_invocation_ends_its_run_as_the_rules_say(
    reason: FailReason, expected: tuple[RunState, str]
) -> None:
    assert refused_invocation_end(reason) == expected


def test_the_refused_invocation_table_names_every_reason() -> None:
    assert set(REFUSED_INVOCATION_ENDS) == set(FailReason)
