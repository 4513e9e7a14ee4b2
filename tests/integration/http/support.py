"""Building the HTTP application over memory services, and a client that checks every
answer against the published OpenAPI document."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx
from litestar.testing import AsyncTestClient

from tests.contract.openapi import Spec, assert_matches_openapi, template_for
from tests.fakes import FakeClock, SequentialIds
from turnkeeper.adapters.http import Readiness, always_ready, create_app
from turnkeeper.adapters.memory import MemoryUnitOfWorkFactory
from turnkeeper.adapters.tokens import JwtSigner
from turnkeeper.application.bootstrap import Services, build_services
from turnkeeper.application.settings import Settings

#: The signing key of test invocation tokens (32 bytes, as HS256 wants).
TEST_KEY = b"turnkeeper-test-signing-key-0032"


def memory_services(settings: Settings, clock: FakeClock | None = None) -> Services:
    """Services over a fresh memory store with a fake clock and sequential ids."""
    return build_services(
        MemoryUnitOfWorkFactory(),
        settings,
        clock or FakeClock(),
        SequentialIds(),
        JwtSigner(TEST_KEY),
    )


def bearer(token: str) -> dict[str, str]:
    """The Authorization header of a token."""
    return {"Authorization": f"Bearer {token}"}


@attrs.frozen
class Exchange:
    """One request and its answer, as the contract checks saw it."""

    method: str
    template: str
    status: int
    body: Any


@attrs.define
class ContractClient:
    """An AsyncTestClient that validates every JSON answer against /openapi.json."""

    http: AsyncTestClient[Any]
    spec: Spec
    exchanges: list[Exchange] = attrs.Factory(list)

    async def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """Send a request; check the answer body against the document when it has one."""
        response = await self.http.request(method, url, **kwargs)
        template = template_for(self.spec, httpx.URL(url).path)
        declared = template is not None and method.lower() in self.spec["paths"][template]
        if template is not None and declared and response.content:
            body = response.json()
            assert_matches_openapi(self.spec, method, template, response.status_code, body)
            self.exchanges.append(Exchange(method, template, response.status_code, body))
        return response

    async def get(self, url: str, **kwargs: Any) -> httpx.Response:
        """GET."""
        return await self.request("GET", url, **kwargs)

    async def post(self, url: str, **kwargs: Any) -> httpx.Response:
        """POST."""
        return await self.request("POST", url, **kwargs)

    async def put(self, url: str, **kwargs: Any) -> httpx.Response:
        """PUT."""
        return await self.request("PUT", url, **kwargs)

    async def delete(self, url: str, **kwargs: Any) -> httpx.Response:
        """DELETE."""
        return await self.request("DELETE", url, **kwargs)


@asynccontextmanager
async def contract_client(
    services: Services, readiness: Readiness = always_ready
) -> AsyncIterator[ContractClient]:
    """A checked client of a new application over the services."""
    app = create_app(services, services.settings, readiness)
    async with AsyncTestClient(app) as http:
        spec = (await http.get("/openapi.json")).json()
        yield ContractClient(http=http, spec=spec)
