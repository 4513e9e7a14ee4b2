"""The parent's side of the HTTP measurement: the load client process and its requests.

`LoadClient` starts ``python -m bench.loadclient`` once per run and hands it one job per
measurement; `measure_http` reads the CPU of the server and of PostgreSQL right around
the client's timed phase. The ``*_request`` functions turn the items the suite
prepared in-process (`bench.operations.Item`) into the client's request documents.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from bench.cpu import CpuProbe
from bench.harness import Timing
from bench.operations import Item
from bench.serve import RunningServer
from turnkeeper.domain.world import thread_target_key

#: The text of the benchmark's messages and sends (as in bench.operations).
MESSAGE_TEXT = "Sam, the report is ready."
SEND_TEXT = "Alex, here is the summary."
#: Bytes one line of the client's answer may hold (the latencies of a whole job).
ANSWER_LIMIT = 64 * 1024 * 1024

Request = dict[str, Any]
#: Builds the request of one item, and the item's part of its worker's initial state.
RequestBuilder = Callable[[Item], tuple[Request, dict[str, Any]]]


class LoadClient:
    """The load client process; use `start`."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process

    @classmethod
    @contextlib.asynccontextmanager
    async def start(cls) -> AsyncIterator[LoadClient]:
        """Start the client process; stop it when the block ends.

        Yields:
            The client.
        """
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.loadclient",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=ANSWER_LIMIT,
        )
        try:
            yield cls(process)
        finally:
            assert process.stdin is not None
            process.stdin.close()
            await process.wait()

    async def _send(self, document: object) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(document).encode() + b"\n")
        await self._process.stdin.drain()

    async def _receive(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        line = await self._process.stdout.readline()
        if not line:
            raise RuntimeError("the load client exited")
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def run(
        self,
        server: RunningServer,
        requests: Sequence[Sequence[Request]],
        states: Sequence[dict[str, Any]],
        warmup: int,
        probe: CpuProbe,
    ) -> Timing:
        """Run one measurement: warm-up, then the timed phase between two CPU readings.

        Args:
            server: the server.
            requests: per worker (connection), its requests.
            states: per worker, its initial state.
            warmup: untimed requests per worker.
            probe: reads the CPU of PostgreSQL and the server.

        Returns:
            The timing (no statement names: they are the service's) with the CPU of
            the server, of PostgreSQL and of the client.

        Raises:
            RuntimeError: a request failed (its status and the start of its answer).
        """
        await self._send(
            {
                "host": server.host,
                "port": server.port,
                "warmup": warmup,
                "workers": [
                    {"state": state, "requests": list(reqs)}
                    for reqs, state in zip(requests, states, strict=True)
                ],
            }
        )
        await self._receive()  # ready: the warm-up is done
        reading = probe.read()
        await self._send("go")
        answer = await self._receive()
        cpu = probe.since(reading, client=answer.get("cpu"))
        if "error" in answer:
            raise RuntimeError(f"HTTP side: {answer['error']}")
        latencies = [float(x) for x in answer["latencies"]]
        return Timing(
            ops=len(latencies),
            seconds=float(answer["seconds"]),
            latencies=sorted(latencies),
            statements=[],
            cpu=cpu,
        )


def plan(
    work: Sequence[Sequence[Item]], build: RequestBuilder
) -> tuple[list[list[Request]], list[dict[str, Any]]]:
    """The requests and initial states of every worker.

    Args:
        work: per worker, its items.
        build: the operation's request builder.

    Returns:
        Per worker its requests, and per worker its initial state.
    """
    requests: list[list[Request]] = []
    states: list[dict[str, Any]] = []
    for items in work:
        state: dict[str, Any] = {}
        reqs = []
        for item in items:
            request, part = build(item)
            reqs.append(request)
            for key, value in part.items():
                state.setdefault(key, value)
        requests.append(reqs)
        states.append(state)
    return requests, states


def message_request(item: Item) -> tuple[Request, dict[str, Any]]:
    """POST /v1/threads/{id}/messages by the worker's person."""
    return {
        "method": "POST",
        "path": f"/v1/threads/{item.thread_id}/messages",
        "body": {"client_msg_id": item.worker.cid("m"), "content": MESSAGE_TEXT},
        "token": item.worker.person.token,
    }, {}


def finish_request(item: Item) -> tuple[Request, dict[str, Any]]:
    """POST /v1/runs/{id}/finish completed, by the worker's agent."""
    return {
        "method": "POST",
        "path": f"/v1/runs/{item.run_id}/finish",
        "body": {"state": "completed"},
        "token": item.worker.agent.token,
    }, {}


def send_request(item: Item) -> tuple[Request, dict[str, Any]]:
    """POST /v1/agent/send claiming the frontier the worker learnt of the thread last."""
    assert item.thread_id is not None
    assert item.sender is not None
    known = f"seen:{item.thread_id}"
    return {
        "method": "POST",
        "path": "/v1/agent/send",
        "body": {
            "target": str(item.thread_id),
            "content": SEND_TEXT,
            "client_message_id": item.worker.cid("s"),
            "freshness": {
                "target_key": thread_target_key(item.thread_id),
                "seen_up_to_seq": {"$": known},
            },
        },
        "token": item.worker.agent.token,
        "learn": {known: "latest_seq"},
    }, {known: item.sender.known[item.thread_id]}


def poll_request(item: Item) -> tuple[Request, dict[str, Any]]:
    """GET /v1/agent/events after the worker's cursor, one invocation expected."""
    return {
        "method": "GET",
        "path": "/v1/agent/events",
        "query": {"after": {"$": "after"}, "limit": 1},
        "token": item.worker.agent.token,
        "learn": {"after": "next_after"},
        "expect": ["events", 1],
    }, {"after": item.worker.feed_after}


__all__ = [
    "LoadClient",
    "RequestBuilder",
    "finish_request",
    "message_request",
    "plan",
    "poll_request",
    "send_request",
]
