"""Fixtures of the contract tests: the same application as the HTTP tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes import FakeClock
from tests.integration.http.support import ContractClient, contract_client, memory_services
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.settings import Settings


@pytest.fixture
def settings() -> Settings:
    return Settings()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def services(settings: Settings, clock: FakeClock) -> Services:
    # HTTP behaviour does not depend on the store: the memory adapter only.
    return memory_services(settings, clock)


@pytest.fixture
async def world(services: Services) -> DemoWorld:
    return await build_demo_world(services)


@pytest.fixture
async def client(services: Services) -> AsyncIterator[ContractClient]:
    async with contract_client(services) as checked:
        yield checked
