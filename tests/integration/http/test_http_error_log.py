"""An unexpected error is logged by its classes and frames, never by its message.

Found by an audit: a CHECK constraint that failed on ``messages`` answered 500 as it
should, but the ``unhandled_error`` line held psycopg's message, whose ``DETAIL:  Failing
row contains (...)`` quoted the message content. Any exception's text may quote data, so
the line names the classes of the exception and of its causes and their frames (file,
line, function), and nothing of their messages, arguments or notes: on the memory
adapter, on PostgreSQL, through Litestar's pipeline and the fast path, and when the
program embedding turnkeeper left structlog unconfigured.
"""

from __future__ import annotations

import io
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from psycopg_pool import AsyncConnectionPool

from tests.support.database import execute
from tests.support.http import ContractClient, bearer, contract_client
from tests.support.json_log import captured_json_log, json_records
from tests.support.services import services_over
from turnkeeper.adapters.postgres.uow import Conn, PostgresUnitOfWorkFactory
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld, build_demo_world

#: What the failing exceptions and the posted content hold: never in an answer or a line.
CANARY = "zebra-canary-17"


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """The JSON log lines of the test."""
    with captured_json_log() as stream:
        yield stream


def _unhandled(stream: io.StringIO) -> dict[str, Any]:
    (record,) = [r for r in json_records(stream) if r.get("event") == "unhandled_error"]
    assert (record["level"], record["logger"]) == ("error", "turnkeeper.http")
    return record


def _failing_use_case() -> Any:
    """A use case that raises an error whose message, arguments, note and cause quote data."""

    async def failing_use_case(*args: object, **kwargs: object) -> None:
        try:
            raise ValueError(f"the cause quotes {CANARY}")
        except ValueError as cause:
            error = RuntimeError(f"the error quotes {CANARY}", {"content": CANARY})
            error.add_note(f"a note quotes {CANARY}")
            raise error from cause

    return failing_use_case


def _assert_outline(record: dict[str, Any]) -> None:
    outline = record["exception"]
    assert record["error_type"] == "RuntimeError"
    # The classes of the error and of its cause, in the order Python prints them.
    assert outline.index("ValueError") < outline.index("RuntimeError")
    assert "The above exception was the direct cause of the following exception" in outline
    # The frames: file, line and function.
    assert 'File "' in outline
    assert "in failing_use_case" in outline


async def test_an_unexpected_error_is_logged_by_class_and_frames_without_its_message(
    client: ContractClient,
    world: DemoWorld,
    services: Services,
    monkeypatch: pytest.MonkeyPatch,
    log_lines: io.StringIO,
) -> None:
    monkeypatch.setattr(services.conversation, "get_thread", _failing_use_case())
    response = await client.get(f"/v1/threads/{uuid.uuid4()}", headers=bearer(world.owner.token))
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/problem+json"
    assert CANARY not in response.text
    _assert_outline(_unhandled(log_lines))
    assert CANARY not in log_lines.getvalue()


async def test_an_unexpected_error_of_the_fast_path_is_logged_without_its_message(
    client: ContractClient,
    world: DemoWorld,
    services: Services,
    monkeypatch: pytest.MonkeyPatch,
    log_lines: io.StringIO,
) -> None:
    monkeypatch.setattr(services.conversation, "create_message", _failing_use_case())
    thread = world.channels["allgemein"].main_thread_id
    response = await client.post(
        f"/v1/threads/{thread}/messages",
        json={"client_msg_id": "canary-1", "content": CANARY},
        headers=bearer(world.people["alex"].token),
    )
    assert response.status_code == 500
    assert CANARY not in response.text
    _assert_outline(_unhandled(log_lines))
    assert CANARY not in log_lines.getvalue()


async def test_without_structlog_configured_the_line_holds_no_message_either(
    client: ContractClient,
    world: DemoWorld,
    services: Services,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A program that mounts the application and configured only the standard library.
    structlog.reset_defaults()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    http_logger = logging.getLogger("turnkeeper.http")
    saved_level = http_logger.level
    http_logger.addHandler(handler)
    http_logger.setLevel(logging.INFO)
    try:
        monkeypatch.setattr(services.conversation, "get_thread", _failing_use_case())
        response = await client.get(
            f"/v1/threads/{uuid.uuid4()}", headers=bearer(world.owner.token)
        )
    finally:
        http_logger.removeHandler(handler)
        http_logger.setLevel(saved_level)
    assert response.status_code == 500
    text = stream.getvalue()
    assert "unhandled_error" in text
    assert "RuntimeError" in text
    assert CANARY not in text


async def test_a_failed_check_on_postgresql_is_logged_without_the_row(
    pg_pool: AsyncConnectionPool[Conn], pg_conninfo: str, log_lines: io.StringIO
) -> None:
    # The audit's constraint: PostgreSQL's message quotes the failing row, content included.
    services = services_over(PostgresUnitOfWorkFactory(pg_pool))
    world = await build_demo_world(services)
    await execute(
        pg_conninfo,
        "alter table messages add constraint audit_canary"
        " check (content not like '%zebra-canary-17%') not valid",
    )
    thread = world.channels["allgemein"].main_thread_id
    async with contract_client(services) as client:
        response = await client.post(
            f"/v1/threads/{thread}/messages",
            json={"client_msg_id": "canary-pg", "content": f"hello {CANARY}"},
            headers=bearer(world.people["alex"].token),
        )
    assert response.status_code == 500
    assert CANARY not in response.text
    record = _unhandled(log_lines)
    assert "CheckViolation" in record["exception"]
    assert "Failing row" not in log_lines.getvalue()
    assert CANARY not in log_lines.getvalue()
