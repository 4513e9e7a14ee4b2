"""The cuts of the adapter's CPU per request keep what each request does and answers.

docs/performance.md, "Adapter CPU per request": dependencies resolved one after the
other, without a task group; one wrapper correlates, logs, counts and traces, and opens
the request's span only while a sink records spans.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import attrs
import pytest
from litestar._kwargs import kwargs_model
from litestar.routes import HTTPRoute

from tests.support.http import ContractClient, bearer
from turnkeeper.adapters.http import create_app
from turnkeeper.adapters.observability.metrics import metrics_of
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.telemetry import (
    AttributeValue,
    CommittedChanges,
    SendAnswered,
    SpanHandle,
)

MESSAGE = "/v1/threads/{thread_id}/messages"
THREAD = "/v1/threads/{thread_id}"


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

    def order_of(path: str, verb: str) -> list[str]:
        (model,) = [
            model
            for route in app.routes
            if isinstance(route, HTTPRoute) and route.path_format == path
            for method, (_handler, model) in route.route_handler_map.items()
            if method == verb
        ]
        return [next(iter(batch)).key for batch in model.dependency_batches]

    # The principal needs the token's identity service: it still comes after it.
    thread = order_of(THREAD, "GET")
    assert sorted(thread) == ["conversation", "identity", "principal"]
    assert thread.index("identity") < thread.index("principal")
    # A message takes its token unresolved: the use case reads it (ADR 0026).
    assert sorted(order_of(MESSAGE, "POST")) == ["bearer", "conversation"]


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


@attrs.define
class SpanHandleRecord:
    """The name and attributes one span ended with."""

    name: str
    attributes: dict[str, AttributeValue]

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        self.attributes.update(attributes)

    def set_name(self, name: str) -> None:
        self.name = name


@attrs.define
class SpanSink:
    """A telemetry sink that records spans only."""

    spans: list[SpanHandleRecord] = attrs.Factory(list)

    def committed(self, changes: CommittedChanges) -> None:
        pass

    def send_answered(self, answered: SendAnswered) -> None:
        pass

    def span(
        self, name: str, attributes: Mapping[str, AttributeValue] | None = None
    ) -> AbstractContextManager[SpanHandle]:
        @contextmanager
        def opened() -> Iterator[SpanHandle]:
            record = SpanHandleRecord(name, dict(attributes or {}))
            self.spans.append(record)
            yield record

        return opened()

    def annotate(self, attributes: Mapping[str, AttributeValue]) -> None:
        pass


async def _message(client: ContractClient, world: DemoWorld, cid: str) -> Any:
    thread = world.channels["allgemein"].main_thread_id
    return await client.post(
        f"/v1/threads/{thread}/messages",
        json={"client_msg_id": cid, "content": "Sam, the report is ready."},
        headers={**bearer(world.people["alex"].token), "X-Correlation-Id": f"trace-{cid}"},
    )


async def test_with_metrics_alone_requests_are_counted_and_no_request_span_is_opened(
    client: ContractClient,
    world: DemoWorld,
    services: Services,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hub = services.telemetry
    opened: list[str] = []
    span = hub.span

    def spy(name: str, attributes: Mapping[str, AttributeValue] | None = None) -> Any:
        opened.append(name)
        return span(name, attributes)

    monkeypatch.setattr(hub, "span", spy)
    for cid in ("obs-1", "obs-2"):
        answer = await _message(client, world, cid)
        assert answer.status_code == 201
        assert answer.headers.get_list("x-correlation-id") == [f"trace-{cid}"]
    # Metrics alone record no span: neither the request's nor the use cases' is opened.
    assert opened == []
    metrics = metrics_of(hub)
    assert metrics is not None
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in metrics.registry.collect()
        for sample in family.samples
    }
    route = (("route", MESSAGE), ("status", "201"))
    assert samples[("turnkeeper_http_requests_total", route)] == 2
    duration = ("turnkeeper_http_request_duration_seconds_count", (("route", MESSAGE),))
    assert samples[duration] == 2


async def test_a_span_sink_attached_later_gets_the_request_span(
    client: ContractClient, world: DemoWorld, services: Services
) -> None:
    sink = SpanSink()
    services.telemetry.attach(sink)
    answer = await _message(client, world, "span-1")
    assert answer.status_code == 201
    (request,) = [s for s in sink.spans if s.name.startswith("POST")]
    assert request.name == f"POST {MESSAGE}"
    assert request.attributes["http.route"] == MESSAGE
    assert request.attributes["http.response.status_code"] == 201
    assert request.attributes["correlation_id"] == "trace-span-1"
    assert request.attributes["http.request.method"] == "POST"
    unknown = await client.get("/nowhere")
    assert unknown.status_code == 404
    assert sink.spans[-1].name == "GET"
    assert "http.route" not in sink.spans[-1].attributes
    assert sink.spans[-1].attributes["http.response.status_code"] == 404
