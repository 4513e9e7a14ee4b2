"""Live delivery between real ``turnkeeper serve`` processes on one PostgreSQL database.

A stream held open on one process receives, within a bound, the event of a message
posted through another process (LISTEN/NOTIFY across processes; the counter check of
the processes runs far less often than the bound, so only a notification can deliver
in time), an agent stream on one process gets the invocation of a post on the other,
and SIGTERM ends a process's open streams cleanly: the answer completes, the process
exits in time, and a client resuming with Last-Event-ID on the other process loses
nothing.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from tests.reliability.support_server import demo_world, server_env, servers

#: Bound of a delivery across processes.
BOUND_SECONDS = 10.0
#: ``stream.heartbeat_seconds`` of the servers: longer than the bound, so that neither a
#: heartbeat re-read nor the counter check can stand in for a notification.
HEARTBEAT_SECONDS = 60


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _events(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, str]]:
    fields: dict[str, str] = {}
    async for line in lines:
        if line == "":
            if fields and "comment" not in fields:
                yield fields
            fields = {}
        elif line.startswith(":"):
            fields["comment"] = line
        else:
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


async def _post(
    http: httpx.AsyncClient, url: str, world: dict[str, Any], channel: str, cid: str, **extra: Any
) -> None:
    thread = world["channels"][channel]["main_thread_id"]
    answer = await http.post(
        f"{url}/v1/threads/{thread}/messages",
        json={"client_msg_id": cid, "content": f"Across processes {cid}", **extra},
        headers=_bearer(world["people"]["alex"]["token"]),
    )
    assert answer.status_code == 201, answer.text


async def test_a_post_on_one_process_reaches_streams_on_the_other(
    pg_conninfo: str, tmp_path: Path
) -> None:
    env = server_env(pg_conninfo, tmp_path, STREAM__HEARTBEAT_SECONDS=str(HEARTBEAT_SECONDS))
    world = demo_world(env)
    sam = world["people"]["sam"]["token"]
    lotse = world["agents"]["lotse"]
    with servers(env, tmp_path, 2) as (a, b):
        await asyncio.gather(a.wait_ready(), b.wait_ready())
        async with httpx.AsyncClient(timeout=BOUND_SECONDS * 2) as http:
            end = (await http.get(f"{b.url}/v1/events?limit=500", headers=_bearer(sam))).json()
            async with (
                http.stream(
                    "GET",
                    f"{b.url}/v1/events/stream?after={end['next_after']}",
                    headers=_bearer(sam),
                ) as shared,
                http.stream(
                    "GET", f"{b.url}/v1/agent/events/stream", headers=_bearer(lotse["token"])
                ) as personal,
            ):
                assert (shared.status_code, personal.status_code) == (200, 200)
                await _post(http, a.url, world, "allgemein", "across-1")
                await _post(http, a.url, world, "eskalation", "across-2", mentions=[lotse["id"]])
                async with asyncio.timeout(BOUND_SECONDS):
                    first = await anext(_events(shared.aiter_lines()))
                    invocation = await anext(_events(personal.aiter_lines()))
    assert first["event"] == "message.created"
    assert json.loads(first["data"])["payload"]["message"]["content"] == (
        "Across processes across-1"
    )
    assert invocation["event"] == "agent.invocation"
    assert json.loads(invocation["data"])["invocation_token"]


async def test_sigterm_ends_open_streams_cleanly_and_the_other_process_resumes(
    pg_conninfo: str, tmp_path: Path
) -> None:
    env = server_env(pg_conninfo, tmp_path, STREAM__HEARTBEAT_SECONDS=str(HEARTBEAT_SECONDS))
    world = demo_world(env)
    sam = world["people"]["sam"]["token"]
    with servers(env, tmp_path, 2) as (a, b):
        await asyncio.gather(a.wait_ready(), b.wait_ready())
        async with httpx.AsyncClient(timeout=BOUND_SECONDS * 2) as http:
            await _post(http, a.url, world, "allgemein", "before-1")
            seen: list[dict[str, str]] = []
            async with http.stream(
                "GET", f"{b.url}/v1/events/stream", headers=_bearer(sam)
            ) as answer:
                lines = answer.aiter_lines()
                async with asyncio.timeout(BOUND_SECONDS):
                    seen.append(await anext(_events(lines)))
                    # SIGTERM (SIGKILL only after STOP_TIMEOUT_SECONDS, which fails below).
                    b.stop()
                    # The rest of the answer, to its clean end (no transport error).
                    seen.extend([event async for event in _events(lines)])
            assert b.process is not None
            # Exited by itself (uvicorn re-raises the SIGTERM it handled), not killed.
            assert b.process.returncode in (0, -signal.SIGTERM), b.log()
            assert "Waiting for connections to close" not in b.log()
            # Resume on the other process where the stream stopped.
            await _post(http, a.url, world, "allgemein", "after-1")
            last = seen[-1]["id"]
            async with http.stream(
                "GET",
                f"{a.url}/v1/events/stream",
                headers={**_bearer(sam), "Last-Event-ID": last},
            ) as resumed:
                async with asyncio.timeout(BOUND_SECONDS):
                    following = [await anext(_events(resumed.aiter_lines()))]
    assert int(following[0]["id"]) > int(last)
    created = json.loads(following[0]["data"])["payload"]["message"]
    assert created["content"] == "Across processes after-1"
