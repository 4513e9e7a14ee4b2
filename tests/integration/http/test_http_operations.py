"""Correlation ids, health, readiness and the published documents."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from litestar.testing import AsyncTestClient

from tests.support.fakes import FakeClock
from tests.support.http import ContractClient, contract_client
from tests.support.services import memory_services
from turnkeeper.adapters.http import create_app
from turnkeeper.application.bootstrap import Services


async def test_the_correlation_id_of_the_request_is_echoed(client: ContractClient) -> None:
    response = await client.get("/healthz", headers={"X-Correlation-Id": "req-42"})
    assert response.headers["x-correlation-id"] == "req-42"


async def test_a_correlation_id_is_made_when_none_is_given(client: ContractClient) -> None:
    first = await client.get("/healthz")
    second = await client.get("/healthz")
    assert first.headers["x-correlation-id"]
    assert first.headers["x-correlation-id"] != second.headers["x-correlation-id"]


async def test_an_unsafe_correlation_id_is_replaced(client: ContractClient) -> None:
    response = await client.get("/healthz", headers={"X-Correlation-Id": "a b\tc" + "x" * 200})
    assert response.headers["x-correlation-id"] != "a b\tc" + "x" * 200


async def test_problems_carry_the_echoed_correlation_id(client: ContractClient) -> None:
    response = await client.get("/v1/me", headers={"X-Correlation-Id": "trace-1"})
    assert response.headers["x-correlation-id"] == "trace-1"
    assert response.json()["correlation_id"] == "trace-1"
    unknown = await client.get("/nowhere", headers={"X-Correlation-Id": "trace-2"})
    assert unknown.json()["correlation_id"] == "trace-2"


async def test_healthz_answers_ok(client: ContractClient) -> None:
    response = await client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


async def test_readyz_answers_ready_when_the_check_passes(client: ContractClient) -> None:
    response = await client.get("/readyz")
    assert (response.status_code, response.json()) == (200, {"status": "ready"})


async def test_readyz_answers_503_with_the_reason_otherwise(services: Services) -> None:
    async def pending() -> str | None:
        return "migrations_pending"

    async with contract_client(services, pending) as client:
        response = await client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert (body["code"], body["reason"]) == ("unavailable", "migrations_pending")
    assert response.headers["retry-after"] == str(
        int(services.settings.reconnect_max_wait.total_seconds())
    )


async def test_the_openapi_document_and_the_docs_page_are_served(client: ContractClient) -> None:
    document = await client.get("/openapi.json")
    assert document.status_code == 200
    assert document.json()["openapi"].startswith("3.1")
    page = await client.get("/docs")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")


async def test_the_openapi_document_is_built_once_and_served_the_same(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = create_app(services, services.settings)
    built: list[dict[str, Any]] = []
    to_schema = app.openapi_schema.to_schema

    def counted() -> dict[str, Any]:
        built.append(to_schema())
        return built[-1]

    # Through monkeypatch: the document is shared by the process's applications.
    monkeypatch.setattr(app.openapi_schema, "to_schema", counted)
    async with AsyncTestClient(app=app) as client:
        first = await client.get("/openapi.json")
        second = await client.get("/openapi.json")
    assert first.headers["content-type"].startswith("application/vnd.oai.openapi+json")
    assert first.content == second.content
    assert len(built) == 1
    assert first.json() == built[0]


def _limit_maximum(document: dict[str, Any]) -> Any:
    parameters = document["paths"]["/v1/threads/{thread_id}/messages"]["get"]["parameters"]
    return next(p["schema"]["maximum"] for p in parameters if p["name"] == "limit")


async def test_applications_of_equal_settings_share_one_document(services: Services) -> None:
    first = create_app(services, services.settings)
    second = create_app(services, attrs.evolve(services.settings))
    assert second.openapi_schema is first.openapi_schema
    other = attrs.evolve(services.settings, page_max_limit=services.settings.page_max_limit + 1)
    third = create_app(memory_services(other, FakeClock()), other)
    assert third.openapi_schema is not first.openapi_schema
    async with AsyncTestClient(app=second) as client:
        served = (await client.get("/openapi.json")).json()
        page = (await client.get("/docs/openapi.json")).json()
    assert served == page == first.openapi_schema.to_schema()
    assert _limit_maximum(served) == services.settings.page_max_limit
    assert _limit_maximum(third.openapi_schema.to_schema()) == other.page_max_limit


async def test_an_application_serves_the_settings_of_its_services(services: Services) -> None:
    # The routes enforce the services' settings: a document of other bounds would lie.
    other = attrs.evolve(services.settings, page_max_limit=services.settings.page_max_limit + 1)
    with pytest.raises(ValueError, match="settings of its services"):
        create_app(services, other)
    app = create_app(services)
    assert _limit_maximum(app.openapi_schema.to_schema()) == services.settings.page_max_limit
