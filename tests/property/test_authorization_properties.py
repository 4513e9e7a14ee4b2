"""Properties of `authorize` and `effective_level`, drawn from `turnkeeper.domain.strategies`.

Targets are consistent (the channel lives in the space, the thread in the channel);
operators, grants and principals share the strategies' small id pools, so that a grant
or an operator role often applies to the principal that asks.
"""

from __future__ import annotations

import uuid

import attrs
from hypothesis import given
from hypothesis import strategies as st

from turnkeeper.domain import strategies as ds
from turnkeeper.domain.authorization import (
    AccessTarget,
    Action,
    Decision,
    DenyReason,
    archive_decision,
    authorize,
    effective_level,
)
from turnkeeper.domain.world import AGENT_GRANT_CAP, Grant, Level, Principal, PrincipalKind

NOT_FOUND = Decision(allowed=False, code="not_found", reason=DenyReason.NO_GRANT)

#: An id outside every pool of the strategies: nobody's operator, nobody's grant.
OUTSIDER_ID = uuid.UUID(int=0)

#: Apps are principals too (reserved): never owners, never operators.
apps = ds.people(owner=st.just(False)).map(lambda p: attrs.evolve(p, kind=PrincipalKind.APP))
every_principal = ds.people() | ds.agents() | apps


@st.composite
def targets(draw: st.DrawFn, archived: bool | None = None) -> AccessTarget:
    """A space, one of its channels and, or not, one of the channel's threads."""
    space = draw(ds.spaces())
    channel = draw(ds.channels(space_id=st.just(space.id)))
    if archived is not None:
        channel = attrs.evolve(channel, archived=archived)
    thread = draw(st.none() | ds.threads(channel_id=st.just(channel.id)))
    return AccessTarget(space=space, channel=channel, thread=thread)


grant_lists = st.lists(ds.grants(), max_size=6)
actions = st.sampled_from(Action)


def is_operator(principal: Principal, target: AccessTarget) -> bool:
    channel, space, thread = target.channel, target.space, target.thread
    operators = {space.default_operator_id, channel.operator_id}
    if thread is not None:
        operators.add(thread.operator_agent_id)
    return principal.id in operators


@given(ds.agents(), targets(), grant_lists)
def test_an_agent_never_gets_more_than_write_and_never_cancels(
    agent: Principal, target: AccessTarget, granted: list[Grant]
) -> None:
    assert AGENT_GRANT_CAP is Level.WRITE
    assert effective_level(agent, target, granted) <= AGENT_GRANT_CAP
    assert not authorize(agent, Action.RUN_CANCEL, target, granted).allowed


@given(every_principal, targets(), grant_lists, ds.grants())
def test_adding_a_grant_never_lowers_the_level(
    principal: Principal, target: AccessTarget, granted: list[Grant], extra: Grant
) -> None:
    before = effective_level(principal, target, granted)
    after = effective_level(principal, target, [*granted, extra])
    assert after >= before


@given(every_principal, targets(), grant_lists, ds.grants(), actions)
def test_adding_a_grant_never_turns_an_allow_into_a_denial(
    principal: Principal, target: AccessTarget, granted: list[Grant], extra: Grant, action: Action
) -> None:
    if authorize(principal, action, target, granted).allowed:
        assert authorize(principal, action, target, [*granted, extra]).allowed


@given(every_principal, targets(archived=True), grant_lists, actions)
def test_an_archived_channel_never_allows_writing(
    principal: Principal, target: AccessTarget, granted: list[Grant], action: Action
) -> None:
    decision = authorize(principal, action, target, granted)
    if action.required_level > Level.READ:
        assert not decision.allowed
        assert decision.code in {"channel_read_only", "not_found"}
    else:
        assert decision.allowed == (effective_level(principal, target, granted) >= Level.READ)


@given(every_principal, targets(), grant_lists, actions)
def test_the_archive_part_of_authorize_is_archive_decision(
    principal: Principal, target: AccessTarget, granted: list[Grant], action: Action
) -> None:
    decision = authorize(principal, action, target, granted)
    assert archive_decision(target).allowed == (not target.channel.archived)
    if decision.code == "channel_read_only":
        assert decision == archive_decision(target)


@given(every_principal, targets(), grant_lists, actions)
def test_without_grant_owner_role_or_operator_role_the_answer_is_not_found(
    principal: Principal, target: AccessTarget, granted: list[Grant], action: Action
) -> None:
    principal = attrs.evolve(principal, is_owner=False)
    if is_operator(principal, target):
        principal = attrs.evolve(principal, id=OUTSIDER_ID)
    others = [g for g in granted if g.principal_id != principal.id]
    assert authorize(principal, action, target, others) == NOT_FOUND
    assert effective_level(principal, target, others) is Level.NONE


@given(every_principal, targets(), grant_lists, actions)
def test_every_not_found_is_the_same_answer(
    principal: Principal, target: AccessTarget, granted: list[Grant], action: Action
) -> None:
    decision = authorize(principal, action, target, granted)
    if decision.code == "not_found" or decision.reason is DenyReason.NO_GRANT:
        assert decision == NOT_FOUND
    assert (decision.code == "not_found") == (
        effective_level(principal, target, granted) < Level.READ
    )


@given(every_principal, targets(), grant_lists, actions)
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


@given(ds.people(), targets(), grant_lists, actions)
def test_the_owner_is_refused_only_by_an_archive(
    person: Principal, target: AccessTarget, granted: list[Grant], action: Action
) -> None:
    owner = attrs.evolve(person, is_owner=True)
    decision = authorize(owner, action, target, granted)
    expect_refusal = target.channel.archived and action.required_level > Level.READ
    assert decision.allowed is not expect_refusal
