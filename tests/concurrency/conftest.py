"""Concurrency tests run on the scenario fixtures (memory and PostgreSQL)."""

from tests.support.fixtures import (
    clock,
    scenario_services,
    settings,
    uow_factory,
    world,
    world_on_pg,
)

__all__ = ["clock", "scenario_services", "settings", "uow_factory", "world", "world_on_pg"]
