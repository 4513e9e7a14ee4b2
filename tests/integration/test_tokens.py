"""API tokens on both adapters: issue, list, revoke, audit, and the owner token rotation."""

from __future__ import annotations

import uuid

import pytest

from tests.support.fakes import FakeClock
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.errors import Unauthenticated
from turnkeeper.application.ports import AdminChange
from turnkeeper.application.services.tokens import OwnerTokenRefused
from turnkeeper.application.transactions import AccessDenied
from turnkeeper.domain.credentials import OWNER_ENV_LABEL, TokenOrigin
from turnkeeper.domain.errors import NotFound, ValidationFailed
from turnkeeper.domain.world import PrincipalKind

#: The owner tokens the environment names, one after the other.
FIRST_ENV_TOKEN = "tk_owner-env-first-example.com"
SECOND_ENV_TOKEN = "tk_owner-env-second-example.com"


async def _changes(services: Services, subject_id: uuid.UUID) -> list[tuple[str, uuid.UUID]]:
    async with services.uow.read_only() as uow:
        found: list[AdminChange] = await uow.audit.changes(subject_id)
    return [(c.action, c.actor_id) for c in found]


async def test_the_owner_issues_lists_and_revokes_tokens(
    services: Services, world: DemoWorld, clock: FakeClock
) -> None:
    owner, sam = world.owner.principal, world.principal("sam")
    issued = await services.tokens.issue_token(owner, sam.id, label="phone")
    assert issued.secret.startswith("tk_")
    assert (issued.token.principal_id, issued.token.label) == (sam.id, "phone")
    assert issued.token.created_at == clock.now()
    assert await services.identity.authenticate(issued.secret) == sam

    listed = await services.tokens.list_tokens(owner, sam.id)
    assert [t.id for t in listed][-1] == issued.token.id
    assert len(listed) == 2, "the token of Sam's creation and the new one"
    assert [t.label for t in listed] == [None, "phone"]

    await services.tokens.revoke_token(owner, sam.id, issued.token.id)
    with pytest.raises(Unauthenticated):
        await services.identity.authenticate(issued.secret)
    assert [t.id for t in await services.tokens.list_tokens(owner, sam.id)] == [listed[0].id]
    assert await _changes(services, issued.token.id) == [
        ("token.issued", owner.id),
        ("token.revoked", owner.id),
    ]


async def test_a_token_without_label_has_none(services: Services, world: DemoWorld) -> None:
    issued = await services.tokens.issue_token(world.owner.principal, world.principal("lotse").id)
    assert issued.token.label is None
    assert issued.token.origin is TokenOrigin.ISSUED


@pytest.mark.parametrize(
    ("label", "code"), [("", "required"), ("   ", "required"), ("x" * 101, "too_long")]
)
async def test_a_bad_label_is_refused_and_nothing_is_stored(
    services: Services, world: DemoWorld, label: str, code: str
) -> None:
    owner, sam = world.owner.principal, world.principal("sam")
    with pytest.raises(ValidationFailed) as caught:
        await services.tokens.issue_token(owner, sam.id, label=label)
    assert [(e.pointer, e.code) for e in caught.value.errors] == [("/label", code)]
    assert len(await services.tokens.list_tokens(owner, sam.id)) == 1


async def test_a_label_of_the_longest_length_is_kept(services: Services, world: DemoWorld) -> None:
    label = "y" * services.settings.token_label_max_chars
    issued = await services.tokens.issue_token(
        world.owner.principal, world.principal("sam").id, label=label
    )
    assert issued.token.label == label


async def test_only_the_owner_administers_tokens(services: Services, world: DemoWorld) -> None:
    alex, sam = world.principal("alex"), world.principal("sam")
    (sams_token,) = await services.tokens.list_tokens(world.owner.principal, sam.id)
    with pytest.raises(AccessDenied) as caught:
        await services.tokens.issue_token(alex, sam.id)
    assert (caught.value.code, caught.value.reason) == ("forbidden", "owner_required")
    with pytest.raises(AccessDenied):
        await services.tokens.list_tokens(alex, alex.id)
    with pytest.raises(AccessDenied):
        await services.tokens.revoke_token(alex, sam.id, sams_token.id)
    assert await services.identity.authenticate(world.people["sam"].token) == sam
    async with services.uow.read_only() as uow:
        denials = await uow.audit.denials(alex.id)
    assert {d.action for d in denials} == {"token.create", "token.list", "token.revoke"}


async def test_unknown_principals_and_foreign_tokens_are_not_found(
    services: Services, world: DemoWorld
) -> None:
    owner, alex, sam = world.owner.principal, world.principal("alex"), world.principal("sam")
    unknown = uuid.UUID("01900000-0000-7000-8000-0000000fffff")
    with pytest.raises(NotFound):
        await services.tokens.issue_token(owner, unknown)
    with pytest.raises(NotFound):
        await services.tokens.list_tokens(owner, unknown)
    (sams_token,) = await services.tokens.list_tokens(owner, sam.id)
    with pytest.raises(NotFound):
        await services.tokens.revoke_token(owner, alex.id, sams_token.id)
    with pytest.raises(NotFound):
        await services.tokens.revoke_token(owner, sam.id, unknown)
    assert await services.identity.authenticate(world.people["sam"].token) == sam


async def test_a_revoked_token_cannot_be_revoked_again(
    services: Services, world: DemoWorld
) -> None:
    owner, sam = world.owner.principal, world.principal("sam")
    (token,) = await services.tokens.list_tokens(owner, sam.id)
    await services.tokens.revoke_token(owner, sam.id, token.id)
    with pytest.raises(NotFound):
        await services.tokens.revoke_token(owner, sam.id, token.id)
    # One revocation: the second attempt records nothing (the token of Sam's creation).
    assert await _changes(services, token.id) == [
        ("token.issued", owner.id),
        ("token.revoked", owner.id),
    ]


# -- the owner token of the environment ---------------------------------------------------


async def test_a_changed_owner_token_revokes_the_one_it_named_before(services: Services) -> None:
    created = await services.admin.ensure_owner("robin", FIRST_ENV_TOKEN)
    assert created is not None
    assert created.token == FIRST_ENV_TOKEN
    owner = created.principal
    (first,) = await services.tokens.list_tokens(owner, owner.id)
    assert (first.origin, first.label) == (TokenOrigin.OWNER_ENV, OWNER_ENV_LABEL)

    # The same variable at the next start changes nothing.
    assert await services.admin.ensure_owner("robin", FIRST_ENV_TOKEN) is None
    assert [t.id for t in await services.tokens.list_tokens(owner, owner.id)] == [first.id]

    assert await services.admin.ensure_owner("robin", SECOND_ENV_TOKEN) is None
    with pytest.raises(Unauthenticated):
        await services.identity.authenticate(FIRST_ENV_TOKEN)
    assert await services.identity.authenticate(SECOND_ENV_TOKEN) == owner
    (second,) = await services.tokens.list_tokens(owner, owner.id)
    assert (second.origin, second.label) == (TokenOrigin.OWNER_ENV, OWNER_ENV_LABEL)
    # Issued at the first start (the owner issued its own token), revoked at the third.
    assert await _changes(services, first.id) == [
        ("token.issued", owner.id),
        ("token.revoked", owner.id),
    ]
    assert await _changes(services, second.id) == [("token.issued", owner.id)]


async def test_a_revoked_owner_token_named_again_is_refused(services: Services) -> None:
    created = await services.admin.ensure_owner("robin", FIRST_ENV_TOKEN)
    assert created is not None
    await services.admin.ensure_owner("robin", SECOND_ENV_TOKEN)
    with pytest.raises(OwnerTokenRefused) as caught:
        await services.admin.ensure_owner("robin", FIRST_ENV_TOKEN)
    assert caught.value.reason == "revoked"
    assert "revoked" in str(caught.value)
    # Nothing changed: the current token still works, the leaked one stays revoked.
    assert await services.identity.authenticate(SECOND_ENV_TOKEN) == created.principal
    with pytest.raises(Unauthenticated):
        await services.identity.authenticate(FIRST_ENV_TOKEN)


async def test_the_token_of_another_principal_is_refused_as_owner_token(
    services: Services, world: DemoWorld
) -> None:
    with pytest.raises(OwnerTokenRefused) as caught:
        await services.admin.ensure_owner("robin", world.people["alex"].token)
    assert caught.value.reason == "other_principal"
    assert await services.identity.authenticate(world.people["alex"].token) == world.principal(
        "alex"
    )


async def test_issued_owner_tokens_survive_a_rotation(services: Services, world: DemoWorld) -> None:
    # The demo owner's first token was generated (origin issued); naming it in the
    # environment adopts it, and the next rotation retires it. Tokens the owner issued
    # through the API are never touched by a rotation.
    owner = world.owner.principal
    spare = await services.tokens.issue_token(owner, owner.id, label="ci")
    assert await services.admin.ensure_owner("robin", world.owner.token) is None
    adopted = {t.id: t for t in await services.tokens.list_tokens(owner, owner.id)}
    assert [t.origin for t in adopted.values()] == [TokenOrigin.OWNER_ENV, TokenOrigin.ISSUED]
    assert [t.label for t in adopted.values()] == [OWNER_ENV_LABEL, "ci"]
    assert await services.admin.ensure_owner("robin", SECOND_ENV_TOKEN) is None
    with pytest.raises(Unauthenticated):
        await services.identity.authenticate(world.owner.token)
    assert await services.identity.authenticate(spare.secret) == owner
    assert await services.identity.authenticate(SECOND_ENV_TOKEN) == owner


async def test_the_token_a_principal_is_created_with_is_audited(
    services: Services, world: DemoWorld
) -> None:
    # docs/rights.md: every token issued is an audited change, the first one too.
    owner = world.owner.principal
    created = await services.admin.create_principal(
        owner, kind=PrincipalKind.PERSON, handle="kim", display_name="Kim"
    )
    (token,) = await services.tokens.list_tokens(owner, created.principal.id)
    assert await _changes(services, token.id) == [("token.issued", owner.id)]
    (own, *_rest) = await services.tokens.list_tokens(owner, owner.id)
    assert await _changes(services, own.id) == [("token.issued", owner.id)]


async def test_an_api_token_named_in_the_environment_is_listed_as_owner_env(
    services: Services, world: DemoWorld
) -> None:
    # Found by an audit: a token the owner issued through the API and then named in
    # TURNKEEPER_OWNER_TOKEN kept its label, and the next rotation revoked a token listed
    # as an API one. Adopted, it is listed as the environment's token.
    owner = world.owner.principal
    issued = await services.tokens.issue_token(owner, owner.id, label="api2")
    assert await services.admin.ensure_owner("robin", issued.secret) is None
    listed = {t.id: t for t in await services.tokens.list_tokens(owner, owner.id)}
    assert (listed[issued.token.id].origin, listed[issued.token.id].label) == (
        TokenOrigin.OWNER_ENV,
        OWNER_ENV_LABEL,
    )
    assert await services.admin.ensure_owner("robin", SECOND_ENV_TOKEN) is None
    with pytest.raises(Unauthenticated):
        await services.identity.authenticate(issued.secret)
