"""Properties of `authorize` and `effective_level` over generated worlds."""

from __future__ import annotations

import uuid

import attrs
from hypothesis import given
from hypothesis import strategies as st

from tests.support.domain_world import T0, fixed_id
from turnkeeper.domain.authorization import (
    AccessTarget,
    Action,
    Decision,
    DenyReason,
    authorize,
    effective_level,
)
from turnkeeper.domain.world import (
    Channel,
    ChannelType,
    Grant,
    Level,
    OperatorMode,
    Principal,
    PrincipalKind,
    ResourceKind,
    Space,
    Thread,
)

# A small pool of ids, so that grants, operators and targets collide often.
PRINCIPAL_IDS = [fixed_id(1, n) for n in range(1, 5)]
SPACE_IDS = [fixed_id(2, n) for n in range(1, 3)]
CHANNEL_IDS = [fixed_id(3, n) for n in range(1, 3)]
THREAD_IDS = [fixed_id(5, n) for n in range(1, 3)]

NOT_FOUND = Decision(allowed=False, code="not_found", reason=DenyReason.NO_GRANT)

principal_ids = st.sampled_from(PRINCIPAL_IDS)
maybe_principal_ids = st.none() | principal_ids


@st.composite
def principals(draw: st.DrawFn, kind: PrincipalKind | None = None) -> Principal:
    chosen = kind if kind is not None else draw(st.sampled_from(PrincipalKind))
    return Principal(
        id=draw(principal_ids),
        kind=chosen,
        handle="p",
        is_owner=chosen is PrincipalKind.PERSON and draw(st.booleans()),
        created_at=T0,
    )


@st.composite
def targets(draw: st.DrawFn, archived: bool | None = None) -> AccessTarget:
    space = Space(
        id=SPACE_IDS[0],
        name="s",
        default_operator_id=draw(maybe_principal_ids),
        created_by=PRINCIPAL_IDS[0],
        created_at=T0,
    )
    mode = draw(st.sampled_from(OperatorMode))
    channel = Channel(
        id=CHANNEL_IDS[0],
        space_id=space.id,
        name="c",
        type=draw(st.sampled_from(ChannelType)),
        operator_mode=mode,
        operator_id=draw(maybe_principal_ids) if mode is OperatorMode.AGENT else None,
        archived=draw(st.booleans()) if archived is None else archived,
        created_at=T0,
    )
    thread: Thread | None = None
    if draw(st.booleans()):
        is_main = draw(st.booleans())
        thread = Thread(
            id=THREAD_IDS[0],
            channel_id=channel.id,
            is_main=is_main,
            operator_agent_id=None if is_main else draw(maybe_principal_ids),
            created_by=PRINCIPAL_IDS[0],
            created_at=T0,
        )
    return AccessTarget(space=space, channel=channel, thread=thread)


@st.composite
def grants(draw: st.DrawFn) -> Grant:
    kind = draw(st.sampled_from(ResourceKind))
    pool = SPACE_IDS if kind is ResourceKind.SPACE else CHANNEL_IDS
    return Grant(
        id=uuid.UUID(int=draw(st.integers(0, 2**32))),
        principal_id=draw(principal_ids),
        resource_kind=kind,
        resource_id=draw(st.sampled_from(pool)),
        level=draw(st.sampled_from([Level.READ, Level.WRITE, Level.TRIGGER])),
        created_at=T0,
    )


grant_lists = st.lists(grants(), max_size=6)
actions = st.sampled_from(Action)


def is_operator(principal: Principal, target: AccessTarget) -> bool:
    channel, space, thread = target.channel, target.space, target.thread
    operators = {space.default_operator_id, channel.operator_id}
    if thread is not None:
        operators.add(thread.operator_agent_id)
    return principal.id in operators


@given(principals(PrincipalKind.AGENT), targets(), grant_lists)
def test_an_agent_never_gets_more_than_write(
    agent: Principal, target: AccessTarget, granted: list[Grant]
) -> None:
    assert effective_level(agent, target, granted) <= Level.WRITE


@given(principals(), targets(), grant_lists, grants())
def test_adding_a_grant_never_lowers_the_level(
    principal: Principal, target: AccessTarget, granted: list[Grant], extra: Grant
) -> None:
    before = effective_level(principal, target, granted)
    after = effective_level(principal, target, [*granted, extra])
    assert after >= before


@given(principals(), targets(), grant_lists, grants(), actions)
def test_adding_a_grant_never_turns_an_allow_into_a_denial(
    principal: Principal, target: AccessTarget, granted: list[Grant], extra: Grant, action: Action
) -> None:
    if authorize(principal, action, target, granted).allowed:
        assert authorize(principal, action, target, [*granted, extra]).allowed


@given(principals(), targets(archived=True), grant_lists, actions)
def test_an_archived_channel_never_allows_writing(
    principal: Principal, target: AccessTarget, granted: list[Grant], action: Action
) -> None:
    decision = authorize(principal, action, target, granted)
    if action.required_level > Level.READ:
        assert not decision.allowed
        assert decision.code in {"channel_read_only", "not_found"}
    else:
        assert decision.allowed == (effective_level(principal, target, granted) >= Level.READ)


@given(principals(), targets(), grant_lists, actions)
def test_without_grant_owner_role_or_operator_role_the_answer_is_not_found(
    principal: Principal, target: AccessTarget, granted: list[Grant], action: Action
) -> None:
    principal = attrs.evolve(principal, is_owner=False)
    if is_operator(principal, target):
        principal = attrs.evolve(principal, id=fixed_id(1, 99))
    others = [g for g in granted if g.principal_id != principal.id]
    assert authorize(principal, action, target, others) == NOT_FOUND
    assert effective_level(principal, target, others) is Level.NONE


@given(principals(), targets(), grant_lists, actions)
def test_every_not_found_is_the_same_answer(
    principal: Principal, target: AccessTarget, granted: list[Grant], action: Action
) -> None:
    decision = authorize(principal, action, target, granted)
    if decision.code == "not_found" or decision.reason is DenyReason.NO_GRANT:
        assert decision == NOT_FOUND
    assert (decision.code == "not_found") == (
        effective_level(principal, target, granted) < Level.READ
    )


@given(principals(), targets(), grant_lists, actions)
def test_an_allow_always_has_the_needed_level_and_no_code(
    principal: Principal, target: AccessTarget, granted: list[Grant], action: Action
) -> None:
    decision = authorize(principal, action, target, granted)
    if decision.allowed:
        assert (decision.code, decision.reason) == (None, None)
        assert effective_level(principal, target, granted) >= action.required_level
        assert not (target.channel.archived and action.required_level > Level.READ)
    else:
        assert decision.code in {"not_found", "forbidden", "channel_read_only"}


@given(principals(PrincipalKind.PERSON), targets(), grant_lists, actions)
def test_the_owner_is_refused_only_by_an_archive(
    person: Principal, target: AccessTarget, granted: list[Grant], action: Action
) -> None:
    owner = attrs.evolve(person, is_owner=True)
    decision = authorize(owner, action, target, granted)
    expect_refusal = target.channel.archived and action.required_level > Level.READ
    assert decision.allowed is not expect_refusal
