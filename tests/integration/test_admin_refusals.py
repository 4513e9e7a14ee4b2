"""Refused administrative calls answer the same on both adapters and change nothing."""

from __future__ import annotations

import pytest

from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.transactions import AccessDenied
from turnkeeper.domain.errors import ValidationFailed
from turnkeeper.domain.world import OperatorMode, PrincipalKind


async def test_a_taken_handle_is_refused_at_its_member(
    services: Services, world: DemoWorld
) -> None:
    owner = world.owner.principal
    with pytest.raises(ValidationFailed) as caught:
        await services.admin.create_principal(owner, kind=PrincipalKind.PERSON, handle="robin")
    assert [(e.pointer, e.code) for e in caught.value.errors] == [("/handle", "taken")]
    async with services.uow.read_only() as uow:
        robin = await uow.principals.get(world.principal("robin").id)
    assert robin == world.principal("robin")


async def test_a_non_owner_setting_an_operator_is_refused_before_the_body_is_read(
    services: Services, world: DemoWorld
) -> None:
    alex = world.principal("alex")
    allgemein = world.channels["allgemein"]
    # The body is inconsistent too (mode agent without an operator): the owner check
    # comes first, so Alex learns only that the call is the owner's.
    with pytest.raises(AccessDenied) as caught:
        await services.admin.set_operator(alex, allgemein.id, mode=OperatorMode.AGENT)
    assert caught.value.reason == "owner_required"
    async with services.uow.read_only() as uow:
        denials = await uow.audit.denials(alex.id)
        unchanged = await uow.channels.get(allgemein.id)
    assert {(d.action, d.reason) for d in denials} == {("channel.operator", "owner_required")}
    assert unchanged == allgemein


async def test_the_owner_still_gets_the_operator_rule(services: Services, world: DemoWorld) -> None:
    with pytest.raises(ValidationFailed) as caught:
        await services.admin.set_operator(
            world.owner.principal, world.channels["allgemein"].id, mode=OperatorMode.AGENT
        )
    assert [(e.pointer, e.code) for e in caught.value.errors] == [
        ("/operator_id", "operator_mode_mismatch")
    ]
