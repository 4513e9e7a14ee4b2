"""Scenario fixtures: the same services over the memory adapter and over PostgreSQL."""

from __future__ import annotations

import pytest

from tests.fakes import TEST_KEY, FakeClock, SequentialIds
from turnkeeper.adapters.memory import MemoryUnitOfWorkFactory
from turnkeeper.adapters.tokens import JwtSigner
from turnkeeper.application.bootstrap import Services, build_services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.ports import UnitOfWorkFactory
from turnkeeper.application.settings import Settings


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def settings() -> Settings:
    return Settings()


@pytest.fixture(params=["memory", "postgres"])
def uow_factory(request: pytest.FixtureRequest) -> UnitOfWorkFactory:
    if request.param == "memory":
        return MemoryUnitOfWorkFactory()
    factory: UnitOfWorkFactory = request.getfixturevalue("pg_uow_factory")
    return factory


@pytest.fixture
def services(uow_factory: UnitOfWorkFactory, settings: Settings, clock: FakeClock) -> Services:
    return build_services(uow_factory, settings, clock, SequentialIds(), JwtSigner(TEST_KEY))


@pytest.fixture
async def world(services: Services) -> DemoWorld:
    return await build_demo_world(services)
