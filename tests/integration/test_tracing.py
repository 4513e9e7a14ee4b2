"""Traces with the ``otel`` extra, recorded by the SDK's in-memory exporter.

One span per HTTP request, one per use case beneath it, psycopg statement spans beneath
that on PostgreSQL; the freshness gate's log fields as attributes of the use case span;
never content or a token in any span. Without the extra nothing breaks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from psycopg import errors as pg_errors

from tests.integration.observability_support import (
    SEND,
    client_of,
    eskalation,
    post,
    send_body,
    token_of,
)
from tests.support.fakes import TEST_KEY, FakeClock, SequentialIds
from turnkeeper.adapters.observability.tracing import (
    ERROR_CODE,
    ERROR_TYPE,
    OtelTracing,
    StatementSpans,
    instrument_psycopg,
    process_tracing,
    tracing_configured,
)
from turnkeeper.adapters.postgres.executor import PipelineLink
from turnkeeper.adapters.postgres.observers import observe_statements
from turnkeeper.adapters.postgres.uow import PostgresUnitOfWorkFactory, create_pool
from turnkeeper.adapters.tokens import JwtSigner
from turnkeeper.application.bootstrap import Services, build_services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
ANSWER = "Lotse's private answer text"
QUESTION = "Alex's private question text"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def named(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    (found,) = [s for s in spans if s.name == name]
    return found


def children(spans: tuple[ReadableSpan, ...], parent: ReadableSpan) -> list[ReadableSpan]:
    assert parent.context is not None
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def span_text(spans: tuple[ReadableSpan, ...]) -> str:
    return json.dumps(
        [{"name": s.name, "attributes": dict(s.attributes or {})} for s in spans], default=str
    )


async def held_send_scenario(services: Services, world: DemoWorld) -> None:
    thread = eskalation(world)
    async with client_of(services) as client:
        assert (await post(client, world, "alex", thread, "q1", QUESTION)).status_code == 201
        held = await client.post(
            SEND, json=send_body(thread, "a1", 0, ANSWER), headers=token_of(world, "lotse")
        )
        assert held.json()["state"] == "held"


async def test_a_request_span_holds_the_use_case_span_with_the_gate_fields(
    services: Services,
    world: DemoWorld,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
) -> None:
    services.telemetry.attach(OtelTracing(provider))
    await held_send_scenario(services, world)
    spans = exporter.get_finished_spans()
    request = named(spans, "POST /v1/agent/send")
    attributes = dict(request.attributes or {})
    assert attributes["http.route"] == "/v1/agent/send"
    assert attributes["http.response.status_code"] == 200
    assert attributes["correlation_id"]
    names = [s.name for s in children(spans, request)]
    assert "AgentSendService.send" in names, names
    use_case = named(spans, "AgentSendService.send")
    assert use_case.parent is not None
    assert request.context is not None
    assert use_case.parent.span_id == request.context.span_id
    thread = eskalation(world)
    gate = dict(use_case.attributes or {})
    assert {k: gate[k] for k in ("state", "seen_up_to_seq", "latest_seq", "target_key")} == {
        "state": "held",
        "seen_up_to_seq": 0,
        "latest_seq": 1,
        "target_key": f"thread:{thread}",
    }
    assert gate["agent_id"] == str(world.agents["lotse"].principal.id)
    text = span_text(spans)
    assert ANSWER not in text
    assert QUESTION not in text
    assert all(p.token not in text for p in (*world.people.values(), *world.agents.values()))


async def test_an_accepted_send_carries_its_accepted_seq(
    services: Services,
    world: DemoWorld,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
) -> None:
    services.telemetry.attach(OtelTracing(provider))
    async with client_of(services) as client:
        sent = await client.post(
            SEND,
            json=send_body(eskalation(world), "a1", 0, ANSWER),
            headers=token_of(world, "lotse"),
        )
    assert sent.json()["state"] == "sent"
    gate = dict(named(exporter.get_finished_spans(), "AgentSendService.send").attributes or {})
    assert (gate["state"], gate["accepted_seq"], gate["latest_seq"]) == ("sent", 1, 1)


async def test_a_refused_use_case_names_its_problem_code_only(
    services: Services,
    world: DemoWorld,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
) -> None:
    services.telemetry.attach(OtelTracing(provider))
    unknown = "01900000-0000-7000-8000-0000000fffff"
    async with client_of(services) as client:
        answer = await client.get(f"/v1/threads/{unknown}", headers=token_of(world, "alex"))
    assert answer.status_code == 404
    spans = exporter.get_finished_spans()
    request = named(spans, "GET /v1/threads/{thread_id}")
    (use_case,) = [s for s in children(spans, request) if s.name.startswith("Conversation")]
    attributes = dict(use_case.attributes or {})
    assert attributes[ERROR_CODE] == "not_found"
    assert not use_case.events, "no exception message is recorded"


@pytest.fixture
async def traced_postgres(
    pg_conninfo: str, provider: TracerProvider, clock: FakeClock
) -> AsyncIterator[Services]:
    # Instrumented before the pool opens: psycopg connections are traced from connect on.
    undo = instrument_psycopg(provider)
    try:
        pool = await create_pool(pg_conninfo, min_size=1, max_size=2)
        try:
            yield build_services(
                PostgresUnitOfWorkFactory(pool),
                Settings(),
                clock,
                SequentialIds(),
                JwtSigner(TEST_KEY),
            )
        finally:
            await pool.close()
    finally:
        undo()


async def test_psycopg_statements_are_spans_beneath_the_use_case(
    traced_postgres: Services, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    services = traced_postgres
    world = await build_demo_world(services)
    services.telemetry.attach(OtelTracing(provider))
    exporter.clear()
    await held_send_scenario(services, world)
    spans = exporter.get_finished_spans()
    use_case = named(spans, "AgentSendService.send")
    statements = children(spans, use_case)
    assert statements, "the use case's statements are its children"
    recorded = [dict(s.attributes or {}) for s in statements]
    assert all(a["db.system"] == "postgresql" for a in recorded)
    # The post's facts under the thread row lock (on which the gate's compare-and-set is
    # decided, ADR 0022) are among them, with their text and never their values.
    assert any("FOR UPDATE OF t" in str(a["db.statement"]) for a in recorded)
    assert not any(key.startswith("db.statement.parameters") for a in recorded for key in a)
    text = span_text(spans)
    assert ANSWER not in text
    assert QUESTION not in text
    assert all(p.token not in text for p in (*world.people.values(), *world.agents.values()))


def test_tracing_follows_the_standard_endpoint_variables() -> None:
    assert not tracing_configured({})
    assert tracing_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector.example.com"})
    assert tracing_configured({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c.example.com"})
    assert not tracing_configured(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector.example.com", "OTEL_SDK_DISABLED": "true"}
    )
    with process_tracing({}) as nothing:
        assert nothing is None


def test_process_tracing_builds_an_exporting_provider_when_configured() -> None:
    # Nothing is sent: no span is recorded before the provider shuts down.
    with process_tracing({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}) as tracing:
        assert isinstance(tracing, OtelTracing)


#: Runs the HTTP application with every opentelemetry module unimportable.
WITHOUT_OTEL = """
import asyncio, importlib.abc, logging, sys

# The program's own logging shows the library's warning (a program without any shows
# nothing: the package logger has a NullHandler).
logging.basicConfig()

class NoOtel(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(name)
        return None

sys.meta_path.insert(0, NoOtel())
from litestar.testing import TestClient
from turnkeeper.adapters.http import create_app
from turnkeeper.adapters.observability.tracing import otel_installed, process_tracing
from turnkeeper.adapters.wiring import memory_backend
from turnkeeper.application.settings import Settings

assert not otel_installed()
with process_tracing({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}) as tracing:
    assert tracing is None
backend = memory_backend(Settings())
with TestClient(create_app(backend.services, backend.services.settings)) as client:
    assert client.get("/healthz").status_code == 200
    assert client.get("/metrics").status_code == 200
assert not any(name.startswith("opentelemetry") for name in sys.modules)
print("untraced and fine")
"""


def test_without_the_extra_nothing_breaks() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_OTEL],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "untraced and fine" in done.stdout
    assert "tracing_unavailable" in done.stderr + done.stdout


def test_the_service_is_named_turnkeeper_unless_the_environment_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    for name, expected in ((None, "turnkeeper"), ("turnkeeper-eu", "turnkeeper-eu")):
        if name is not None:
            monkeypatch.setenv("OTEL_SERVICE_NAME", name)
        with process_tracing(endpoint) as tracing:
            assert tracing is not None
            assert isinstance(tracing.provider, TracerProvider)
            assert tracing.provider.resource.attributes["service.name"] == expected


async def test_a_write_units_failed_statement_span_names_the_error_class_only(
    pg_conninfo: str, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    stop = observe_statements(StatementSpans(provider))
    try:
        async with await psycopg.AsyncConnection.connect(pg_conninfo, autocommit=True) as conn:
            link = PipelineLink(conn)
            link.enter()
            await link.execute("SELECT 1 / %(p1)s", {"p1": 0})
            with pytest.raises(pg_errors.DivisionByZero):
                await link.sync()
            await link.leave()
            dbname = conn.info.dbname
    finally:
        stop()
    (span,) = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert span.name == "SELECT"
    assert attributes["db.system"] == "postgresql"
    assert attributes["db.name"] == dbname
    assert attributes["db.statement"] == "SELECT 1 / %(p1)s"
    assert attributes[ERROR_TYPE] == "DivisionByZero"
    assert span.status.status_code is StatusCode.ERROR
    assert "division by zero" not in span_text((span,)), "no driver message"
