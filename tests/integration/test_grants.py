"""Grants on both adapters: one grant per principal and resource, changed in place, listed,
audited with the level before and after."""

from __future__ import annotations

import uuid

import pytest

from tests.support.fakes import FakeClock
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.ports import AdminChange
from turnkeeper.application.transactions import AccessDenied
from turnkeeper.domain.errors import NotFound, ValidationFailed
from turnkeeper.domain.messaging import MessageDraft
from turnkeeper.domain.world import Grant, Level, ResourceKind


async def _changes(
    services: Services, grant_id: uuid.UUID
) -> list[tuple[str, str | None, str | None]]:
    async with services.uow.read_only() as uow:
        found: list[AdminChange] = await uow.audit.changes(grant_id)
    return [(c.action, c.before, c.after) for c in found]


async def _sams_allgemein_grant(services: Services, world: DemoWorld) -> Grant:
    (grant,) = await services.grants.list_grants(
        world.owner.principal,
        principal_id=world.principal("sam").id,
        resource_id=world.channels["allgemein"].id,
    )
    return grant


async def test_a_second_grant_of_a_pair_changes_its_level(
    services: Services, world: DemoWorld
) -> None:
    # The case: Sam reads Allgemein and is raised to trigger.
    owner, sam = world.owner.principal, world.principal("sam")
    allgemein = world.channels["allgemein"]
    assert allgemein.main_thread_id is not None
    before = await _sams_allgemein_grant(services, world)
    assert before.level is Level.READ
    with pytest.raises(AccessDenied):
        await services.conversation.create_message(
            sam, allgemein.main_thread_id, MessageDraft(client_msg_id="s-1", content="hello")
        )

    change = await services.grants.set_grant(
        owner,
        principal_id=sam.id,
        resource_kind=ResourceKind.CHANNEL,
        resource_id=allgemein.id,
        level=Level.TRIGGER,
    )
    assert (change.created, change.before) == (False, Level.READ)
    assert change.grant.id == before.id
    assert change.grant.level is Level.TRIGGER
    assert change.grant.created_at == before.created_at
    assert await _sams_allgemein_grant(services, world) == change.grant
    # The new level is in force at once.
    posted = await services.conversation.create_message(
        sam, allgemein.main_thread_id, MessageDraft(client_msg_id="s-2", content="hello")
    )
    assert posted.message.author_id == sam.id
    assert await _changes(services, before.id) == [
        ("grant.created", None, "read"),
        ("grant.level_changed", "read", "trigger"),
    ]


async def test_an_unchanged_level_keeps_the_grant_and_is_audited(
    services: Services, world: DemoWorld
) -> None:
    grant = await _sams_allgemein_grant(services, world)
    again = await services.admin.create_grant(
        world.owner.principal,
        principal_id=grant.principal_id,
        resource_kind=grant.resource_kind,
        resource_id=grant.resource_id,
        level=Level.READ,
    )
    assert again == grant
    assert await _changes(services, grant.id) == [
        ("grant.created", None, "read"),
        ("grant.level_kept", "read", "read"),
    ]


async def test_a_new_pair_gets_a_new_grant(
    services: Services, world: DemoWorld, clock: FakeClock
) -> None:
    owner, sam = world.owner.principal, world.principal("sam")
    change = await services.grants.set_grant(
        owner,
        principal_id=sam.id,
        resource_kind=ResourceKind.SPACE,
        resource_id=world.spaces["research"].id,
        level=Level.WRITE,
    )
    assert (change.created, change.before) == (True, None)
    assert change.grant.created_at == clock.now()
    # A grant on the space and one on its channel are two pairs.
    channel = await services.grants.set_grant(
        owner,
        principal_id=sam.id,
        resource_kind=ResourceKind.CHANNEL,
        resource_id=world.channels["notizen"].id,
        level=Level.READ,
    )
    assert channel.created
    assert channel.grant.id != change.grant.id


async def test_grants_are_listed_by_principal_resource_both_or_none(
    services: Services, world: DemoWorld
) -> None:
    owner, sam = world.owner.principal, world.principal("sam")
    allgemein = world.channels["allgemein"].id
    everything = await services.grants.list_grants(owner)
    assert len(everything) == 5
    assert everything == sorted(everything, key=lambda g: g.id)
    sams = await services.grants.list_grants(owner, principal_id=sam.id)
    assert {(g.resource_id, g.level) for g in sams} == {
        (world.spaces["marketing"].id, Level.TRIGGER),
        (allgemein, Level.READ),
    }
    on_allgemein = await services.grants.list_grants(owner, resource_id=allgemein)
    assert {g.principal_id for g in on_allgemein} == {sam.id, world.principal("texter").id}
    assert (
        len(await services.grants.list_grants(owner, principal_id=sam.id, resource_id=allgemein))
        == 1
    )
    unknown = uuid.UUID("01900000-0000-7000-8000-0000000fffff")
    assert await services.grants.list_grants(owner, principal_id=unknown) == []


async def test_only_the_owner_lists_or_sets_grants(services: Services, world: DemoWorld) -> None:
    alex = world.principal("alex")
    with pytest.raises(AccessDenied) as caught:
        await services.grants.list_grants(alex)
    assert caught.value.reason == "owner_required"
    with pytest.raises(AccessDenied):
        await services.grants.set_grant(
            alex,
            principal_id=alex.id,
            resource_kind=ResourceKind.CHANNEL,
            resource_id=world.channels["allgemein"].id,
            level=Level.TRIGGER,
        )
    assert (await _sams_allgemein_grant(services, world)).level is Level.READ
    async with services.uow.read_only() as uow:
        denials = await uow.audit.denials(alex.id)
    assert {d.action for d in denials} == {"grant.list", "grant.create"}


async def test_a_deleted_grant_is_audited_with_its_level(
    services: Services, world: DemoWorld
) -> None:
    grant = await _sams_allgemein_grant(services, world)
    await services.admin.delete_grant(world.owner.principal, grant.id)
    with pytest.raises(NotFound):
        await services.admin.delete_grant(world.owner.principal, grant.id)
    assert await _changes(services, grant.id) == [
        ("grant.created", None, "read"),
        ("grant.deleted", "read", None),
    ]


async def test_bad_grants_change_nothing(services: Services, world: DemoWorld) -> None:
    owner, sam = world.owner.principal, world.principal("sam")
    grant = await _sams_allgemein_grant(services, world)
    with pytest.raises(ValidationFailed) as caught:
        await services.grants.set_grant(
            owner,
            principal_id=sam.id,
            resource_kind=ResourceKind.CHANNEL,
            resource_id=grant.resource_id,
            level=Level.NONE,
        )
    assert [(e.pointer, e.code) for e in caught.value.errors] == [("/level", "invalid_enum")]
    with pytest.raises(ValidationFailed) as caught:
        await services.grants.set_grant(
            owner,
            principal_id=sam.id,
            resource_kind=ResourceKind.SPACE,
            resource_id=grant.resource_id,
            level=Level.TRIGGER,
        )
    assert [(e.pointer, e.code) for e in caught.value.errors] == [
        ("/resource_id", "unknown_resource")
    ]
    assert await _sams_allgemein_grant(services, world) == grant
    assert len(await _changes(services, grant.id)) == 1


async def test_every_refused_administrative_call_is_audited(
    services: Services, world: DemoWorld
) -> None:
    alex = world.principal("alex")
    with pytest.raises(AccessDenied):
        await services.admin.create_space(alex, name="Lab")
    with pytest.raises(AccessDenied):
        await services.admin.archive_channel(alex, world.channels["allgemein"].id)
    async with services.uow.read_only() as uow:
        denials = await uow.audit.denials(alex.id)
    assert {(d.action, d.reason, d.count) for d in denials} == {
        ("space.create", "owner_required", 1),
        ("channel.archive", "owner_required", 1),
    }
