"""Scripted answers of the agent's event stream, for the client tests over a mock transport.

One event shape, one SSE body and one problem answer, shared by the tests of the
client's event loop (`tests/unit/test_agent_client_loop.py`) and of its retries
(`tests/unit/test_agent_client_stream_retries.py`).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

BASE_URL = "https://turnkeeper.example.com"
LOTSE = "0190a000-0000-7000-8000-00000000a001"
RUN = "0190a000-0000-7000-8000-0000000000c1"
THREAD = "0190a000-0000-7000-8000-0000000000f1"
MESSAGE = "0190a000-0000-7000-8000-0000000000d1"
CREATED = "2025-03-01T09:00:00Z"


def agent_event(seq: int, kind: str = "agent.invocation") -> dict[str, Any]:
    """An event of the agent's feed as the server sends it, with a fresh token."""
    return {
        "seq": seq,
        "type": kind,
        "actor": {"id": LOTSE, "kind": "person"},
        "scope": {"space_id": LOTSE, "channel_id": LOTSE, "thread_id": THREAD},
        "resource": {"kind": "run", "id": RUN},
        "payload": {"run_id": RUN, "thread_id": THREAD, "message_id": MESSAGE},
        "created_at": CREATED,
        "invocation_token": f"token-{seq}",
    }


def sse_body(*seqs: int, newline: str = "\r\n") -> bytes:
    """A heartbeat, then one ``agent.invocation`` per seq, lines ended by `newline`."""
    blank = newline * 2
    parts = [f": heartbeat{blank}"]
    for seq in seqs:
        data = json.dumps(agent_event(seq))
        parts.append(f"id: {seq}{newline}event: agent.invocation{newline}data: {data}{blank}")
    return "".join(parts).encode()


def problem_response(status: int, code: str, **headers: str) -> httpx.Response:
    """A problem+json answer of `status` and `code`, with extra headers (Retry-After)."""
    body = {"type": "x", "title": "x", "status": status, "code": code, "correlation_id": "c"}
    return httpx.Response(
        status, json=body, headers={"content-type": "application/problem+json", **headers}
    )
