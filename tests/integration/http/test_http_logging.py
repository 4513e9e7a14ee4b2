"""The request log: one JSON line per request, correlated, without secrets or content."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from tests.support.http import ContractClient, bearer
from tests.support.json_log import captured_json_log, json_records
from turnkeeper.adapters.logging import REDACTED, redact_secrets
from turnkeeper.application.demo import DemoWorld


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """The JSON log lines of the test."""
    with captured_json_log() as stream:
        yield stream


async def test_each_request_is_logged_once_without_token_or_content(
    client: ContractClient, world: DemoWorld, log_lines: io.StringIO
) -> None:
    token = world.people["alex"].token
    thread = world.channels["allgemein"].main_thread_id
    await client.post(
        f"/v1/threads/{thread}/messages",
        json={"client_msg_id": "log-1", "content": "very private words"},
        headers={**bearer(token), "X-Correlation-Id": "log-trace"},
    )
    text = log_lines.getvalue()
    assert token not in text
    assert "very private words" not in text
    requests = [r for r in json_records(log_lines) if r.get("event") == "http_request"]
    assert len(requests) == 1
    record = requests[0]
    assert record["correlation_id"] == "log-trace"
    assert record["route"] == "/v1/threads/{thread_id}/messages"
    assert (record["method"], record["status"], record["level"]) == ("POST", 201, "info")
    assert record["logger"] == "turnkeeper.http"
    assert record["timestamp"].endswith("Z")
    assert isinstance(record["duration_ms"], float)


def test_secret_keys_are_redacted_at_any_depth() -> None:
    record = redact_secrets(
        None,
        "info",
        {
            "event": "x",
            "token": "tk_a",
            "Authorization": "Bearer tk_b",
            "detail": {"content": "words", "owner_token": "tk_c", "kept": 1},
            "items": [{"invocation_token": "jwt"}],
        },
    )
    assert record == {
        "event": "x",
        "token": REDACTED,
        "Authorization": REDACTED,
        "detail": {"content": REDACTED, "owner_token": REDACTED, "kept": 1},
        "items": [{"invocation_token": REDACTED}],
    }
