"""Authentication: token lookup and the per-process cache of resolved tokens.

Run on both adapters. A counting wrapper around the real unit-of-work factory shows how
many lookups reach the store (nothing is mocked: every lookup that happens is real).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from datetime import timedelta

import pytest

from tests.support.fakes import FakeClock
from tests.support.services import services_over
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.errors import Unauthenticated
from turnkeeper.application.ports import UnitOfWork, UnitOfWorkFactory
from turnkeeper.application.settings import Settings

#: The cache window of these tests.
WINDOW = 10


class CountingFactory:
    """The real factory, counting the read-only units it opens."""

    def __init__(self, inner: UnitOfWorkFactory) -> None:
        self.inner = inner
        self.reads = 0

    def __call__(self) -> AbstractAsyncContextManager[UnitOfWork]:
        return self.inner()

    def read_only(self) -> AbstractAsyncContextManager[UnitOfWork]:
        self.reads += 1
        return self.inner.read_only()


async def _setup(
    uow_factory: UnitOfWorkFactory, clock: FakeClock, **overrides: int | timedelta
) -> tuple[Services, DemoWorld, CountingFactory]:
    counting = CountingFactory(uow_factory)
    settings = Settings(**{"token_cache_ttl": timedelta(seconds=WINDOW), **overrides})  # type: ignore[arg-type]
    services = services_over(counting, settings, clock)
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


async def test_a_resolved_token_is_looked_up_once_per_window(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, counting = await _setup(uow_factory, clock)
    token = world.people["alex"].token
    before = counting.reads
    for _ in range(5):
        assert (await services.identity.authenticate(token)).handle == "alex"
    assert counting.reads == before + 1
    clock.advance(WINDOW - 1)
    await services.identity.authenticate(token)
    assert counting.reads == before + 1
    clock.advance(1)
    await services.identity.authenticate(token)
    assert counting.reads == before + 2, "the window ended: the token is looked up again"


async def test_a_window_of_zero_looks_up_every_time(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, counting = await _setup(uow_factory, clock, token_cache_ttl=timedelta(0))
    token = world.people["sam"].token
    before = counting.reads
    for _ in range(3):
        await services.identity.authenticate(token)
    assert counting.reads == before + 3


async def test_unknown_tokens_are_never_remembered(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, _, counting = await _setup(uow_factory, clock)
    before = counting.reads
    for _ in range(3):
        with pytest.raises(Unauthenticated):
            await services.identity.authenticate("tk_unknown")
    assert counting.reads == before + 3


async def test_a_new_token_works_at_once_after_an_unknown_try(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, _ = await _setup(uow_factory, clock)
    token = "tk_configured-owner-token-example"
    with pytest.raises(Unauthenticated):
        await services.identity.authenticate(token)
    # The owner exists: the configured token is added to it.
    assert await services.admin.ensure_owner("robin", token) is None
    assert await services.identity.authenticate(token) == world.principal("robin")


async def test_the_cache_keeps_the_most_recently_used_tokens(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, counting = await _setup(uow_factory, clock, token_cache_size=2)
    alex, sam, robin = (world.people[h].token for h in ("alex", "sam", "robin"))
    for token in (alex, sam, alex, robin):
        await services.identity.authenticate(token)
    # alex was used after sam, so robin pushed sam out and alex stayed.
    before = counting.reads
    await services.identity.authenticate(alex)
    assert counting.reads == before
    await services.identity.authenticate(sam)
    assert counting.reads == before + 1
