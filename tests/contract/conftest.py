"""Fixtures of the contract tests: the same application as the HTTP tests."""

from tests.support.fixtures import client, clock, http_services, settings, world

__all__ = ["client", "clock", "http_services", "settings", "world"]
