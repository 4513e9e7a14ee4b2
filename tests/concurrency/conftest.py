"""Concurrency tests reuse the scenario fixtures (memory and PostgreSQL)."""

from tests.integration.conftest import clock, services, settings, uow_factory, world

__all__ = ["clock", "services", "settings", "uow_factory", "world"]
