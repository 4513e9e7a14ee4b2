"""The HTTP adapter: a Litestar application serving the contract of API.md."""

from turnkeeper.adapters.http.app import create_app
from turnkeeper.adapters.http.operations import Readiness, always_ready

__all__ = ["Readiness", "always_ready", "create_app"]
