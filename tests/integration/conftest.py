"""Scenario fixtures: the same services over the memory adapter and over PostgreSQL."""

from tests.support.fixtures import clock, scenario_services, settings, uow_factory, world

__all__ = ["clock", "scenario_services", "settings", "uow_factory", "world"]
