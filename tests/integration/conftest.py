"""Scenario fixtures: the same services over the memory adapter and over PostgreSQL."""

from tests.support.census import census_worlds
from tests.support.fixtures import clock, scenario_services, settings, uow_factory, world

__all__ = ["census_worlds", "clock", "scenario_services", "settings", "uow_factory", "world"]
