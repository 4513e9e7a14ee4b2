"""Authentication: every request looks its token up; last use is written once per interval.

Run on both adapters. A counting wrapper around the real unit-of-work factory shows how
many lookups and writes reach the store (nothing is mocked: every unit that is counted
is real).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.support.fakes import FakeClock
from tests.support.services import CountingFactory, services_over
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.errors import Unauthenticated
from turnkeeper.application.ports import UnitOfWorkFactory
from turnkeeper.application.settings import Settings

#: ``auth.token_last_used_interval`` of these tests, in seconds.
INTERVAL = 60


def _services(counting: CountingFactory, clock: FakeClock, interval: int) -> Services:
    settings = Settings(token_last_used_interval=timedelta(seconds=interval))
    return services_over(counting, settings, clock)


async def _setup(
    uow_factory: UnitOfWorkFactory, clock: FakeClock, interval: int = INTERVAL
) -> tuple[Services, DemoWorld, CountingFactory]:
    counting = CountingFactory(uow_factory)
    services = _services(counting, clock, interval)
    world = await build_demo_world(services)
    return services, world, counting


async def test_a_token_resolves_to_its_principal(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, _ = await _setup(uow_factory, clock)
    for handle in ("alex", "sam", "lotse"):
        found = world.principal(handle)
        token = (world.people.get(handle) or world.agents[handle]).token
        assert await services.identity.authenticate(token) == found


@pytest.mark.parametrize("token", [None, "", "tk_unknown", "Bearer tk_unknown"])
async def test_missing_or_unknown_tokens_are_refused(
    uow_factory: UnitOfWorkFactory, clock: FakeClock, token: str | None
) -> None:
    services, _, _ = await _setup(uow_factory, clock)
    with pytest.raises(Unauthenticated):
        await services.identity.authenticate(token)


async def test_every_request_looks_its_token_up(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, counting = await _setup(uow_factory, clock)
    token = world.people["alex"].token
    before = counting.reads
    for _ in range(5):
        assert (await services.identity.authenticate(token)).handle == "alex"
    assert counting.reads == before + 5, "no cache: each request reads the store"


async def test_a_revoked_token_is_refused_at_once_by_another_process(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    # Two service graphs on one store stand for two processes on one database.
    services, world, _ = await _setup(uow_factory, clock)
    other = _services(CountingFactory(uow_factory), clock, INTERVAL)
    sam = world.principal("sam")
    issued = await services.tokens.issue_token(world.owner.principal, sam.id, label="laptop")
    assert await other.identity.authenticate(issued.secret) == sam
    await services.tokens.revoke_token(world.owner.principal, sam.id, issued.token.id)
    with pytest.raises(Unauthenticated):
        await other.identity.authenticate(issued.secret)
    with pytest.raises(Unauthenticated):
        await services.identity.authenticate(issued.secret)
    # Sam's first token is untouched.
    assert await other.identity.authenticate(world.people["sam"].token) == sam


async def test_the_last_use_is_written_at_most_once_per_interval(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, counting = await _setup(uow_factory, clock)
    owner, alex = world.owner.principal, world.principal("alex")

    async def last_used() -> object:
        (token,) = await services.tokens.list_tokens(owner, alex.id)
        return token.last_used_at

    assert await last_used() is None
    first = clock.now()
    before = counting.writes
    for _ in range(3):
        await services.identity.authenticate(world.people["alex"].token)
    assert counting.writes == before + 1, "the first use writes, the next ones do not"
    assert await last_used() == first
    clock.advance(INTERVAL - 1)
    await services.identity.authenticate(world.people["alex"].token)
    assert (counting.writes, await last_used()) == (before + 1, first)
    clock.advance(1)
    await services.identity.authenticate(world.people["alex"].token)
    assert counting.writes == before + 2, "the interval passed: the use is written again"
    assert await last_used() == clock.now()


async def test_an_interval_of_zero_writes_every_use(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, counting = await _setup(uow_factory, clock, interval=0)
    before = counting.writes
    for _ in range(3):
        await services.identity.authenticate(world.people["sam"].token)
    assert counting.writes == before + 3


async def test_unknown_tokens_write_nothing(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, _, counting = await _setup(uow_factory, clock)
    before = (counting.reads, counting.writes)
    for _ in range(3):
        with pytest.raises(Unauthenticated):
            await services.identity.authenticate("tk_unknown")
    assert (counting.reads, counting.writes) == (before[0] + 3, before[1])


async def test_a_new_token_works_at_once_after_an_unknown_try(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, _ = await _setup(uow_factory, clock)
    token = "tk_configured-owner-token-example"
    with pytest.raises(Unauthenticated):
        await services.identity.authenticate(token)
    # The owner exists: the configured token becomes the owner's.
    assert await services.admin.ensure_owner("robin", token) is None
    assert await services.identity.authenticate(token) == world.principal("robin")
