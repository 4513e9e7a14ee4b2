"""The pytest fixtures the conftest files import (each written once).

Two flavours of `services`: `scenario_services` runs every scenario on the memory adapter
and on PostgreSQL (through the parametrised `uow_factory`); `http_services` is the
memory adapter only, since HTTP behaviour does not depend on the store. A conftest
imports the fixtures it wants by name; pytest registers them under their fixture name.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.fakes import FakeClock
from tests.support.http import ContractClient, contract_client
from tests.support.services import memory_services, services_over
from turnkeeper.adapters.memory import MemoryUnitOfWorkFactory
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.ports import UnitOfWorkFactory
from turnkeeper.application.settings import Settings

#: The stores every scenario runs on.
BACKENDS = ("memory", "postgres")


@pytest.fixture
def clock() -> FakeClock:
    """The test's clock; it moves only when the test moves it."""
    return FakeClock()


@pytest.fixture
def settings() -> Settings:
    """The default settings (a module overrides this fixture to change them)."""
    return Settings()


@pytest.fixture(params=BACKENDS)
def uow_factory(request: pytest.FixtureRequest) -> UnitOfWorkFactory:
    """Units of work on a fresh memory store, then on a fresh PostgreSQL database."""
    if request.param == "memory":
        return MemoryUnitOfWorkFactory()
    factory: UnitOfWorkFactory = request.getfixturevalue("pg_uow_factory")
    return factory


@pytest.fixture(name="services")
def scenario_services(
    uow_factory: UnitOfWorkFactory, settings: Settings, clock: FakeClock
) -> Services:
    """Services over the parametrised store."""
    return services_over(uow_factory, settings, clock)


@pytest.fixture(name="services")
def http_services(settings: Settings, clock: FakeClock) -> Services:
    """Services over a memory store (the HTTP and contract suites)."""
    return memory_services(settings, clock)


@pytest.fixture
async def world(services: Services) -> DemoWorld:
    """The demo world, built through the services."""
    return await build_demo_world(services)


@pytest.fixture
async def client(services: Services) -> AsyncIterator[ContractClient]:
    """A client of a new application over the services that checks every answer."""
    async with contract_client(services) as checked:
        yield checked


@pytest.fixture
async def world_on_pg(pg_uow_factory: UnitOfWorkFactory) -> tuple[Services, DemoWorld]:
    """The demo world on PostgreSQL only (for tests that hold rows in another session)."""
    services = services_over(pg_uow_factory)
    return services, await build_demo_world(services)
