"""OPTIONS answers every method of its path, as the 405 of another method does."""

from __future__ import annotations

import re
import uuid

import pytest
from litestar.routes import HTTPRoute
from litestar.testing import AsyncTestClient

from turnkeeper.adapters.http.app import create_app
from turnkeeper.application.bootstrap import Services

#: A method no route has (its 405 names the methods the path has).
UNUSED_METHOD = "PROPFIND"


def _concrete(path_format: str) -> str:
    """A request path for a route template: every parameter spelt as a new id."""
    return re.sub(r"\{[^}]+\}", lambda _match: str(uuid.uuid4()), path_format)


def _methods(header: str) -> set[str]:
    return {method.strip() for method in header.split(",")}


async def test_options_names_every_method_of_a_path_with_several_handlers(
    services: Services,
) -> None:
    app = create_app(services, services.settings)
    async with AsyncTestClient(app) as http:
        response = await http.options(f"/v1/threads/{uuid.uuid4()}/messages")
    assert response.status_code == 204
    assert _methods(response.headers["allow"]) == {"GET", "OPTIONS", "POST"}


@pytest.mark.parametrize("method", ["OPTIONS", UNUSED_METHOD])
async def test_every_route_answers_its_own_methods(services: Services, method: str) -> None:
    app = create_app(services, services.settings)
    routes = [route for route in app.routes if isinstance(route, HTTPRoute)]
    async with AsyncTestClient(app) as http:
        for route in routes:
            response = await http.request(method, _concrete(route.path_format))
            assert _methods(response.headers["allow"]) == set(route.methods), route.path
