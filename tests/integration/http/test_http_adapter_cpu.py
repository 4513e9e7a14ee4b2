"""The cuts of the adapter's CPU per request keep what each request does and answers.

docs/performance.md, "Adapter CPU per request": dependencies resolved one after the
other, without a task group.
"""

from __future__ import annotations

from typing import Any

import pytest
from litestar._kwargs import kwargs_model
from litestar.routes import HTTPRoute

from tests.support.http import ContractClient, bearer
from turnkeeper.adapters.http import create_app
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld

MESSAGE = "/v1/threads/{thread_id}/messages"


def _no_task_group(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a task group was opened to resolve dependencies")


def test_every_dependency_batch_of_the_application_holds_one_dependency(
    services: Services,
) -> None:
    app = create_app(services, services.settings)
    models = [
        model
        for route in app.routes
        if isinstance(route, HTTPRoute)
        for _handler, model in route.route_handler_map.values()
    ]
    assert models
    for model in models:
        assert all(len(batch) == 1 for batch in model.dependency_batches)
    (message,) = [
        model
        for route in app.routes
        if isinstance(route, HTTPRoute) and route.path_format == MESSAGE
        for method, (_handler, model) in route.route_handler_map.items()
        if method == "POST"
    ]
    order = [next(iter(batch)).key for batch in message.dependency_batches]
    # The principal needs the token's identity service: it still comes after it.
    assert sorted(order) == ["conversation", "identity", "principal"]
    assert order.index("identity") < order.index("principal")


async def test_a_message_is_written_and_a_bad_token_refused_without_a_task_group(
    client: ContractClient, world: DemoWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kwargs_model, "create_task_group", _no_task_group)
    thread = world.channels["allgemein"].main_thread_id
    path = f"/v1/threads/{thread}/messages"
    body = {"client_msg_id": "cpu-1", "content": "Sam, the report is ready."}
    written = await client.post(path, json=body, headers=bearer(world.people["alex"].token))
    assert written.status_code == 201, written.text
    assert written.json()["content"] == "Sam, the report is ready."
    refused = await client.post(path, json=body, headers=bearer("not-a-token"))
    assert refused.status_code == 401
    assert refused.json()["code"] == "unauthenticated"
