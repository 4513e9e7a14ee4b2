"""Fixtures of the HTTP tests: memory services, the demo world and a checked client."""

from tests.support.fixtures import client, clock, http_services, settings, world

__all__ = ["client", "clock", "http_services", "settings", "world"]
