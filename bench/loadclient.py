"""The HTTP load client: a separate process, one keep-alive connection per worker.

``python -m bench.loadclient`` reads jobs from standard input and answers on standard
output, one JSON document per line. It uses the standard library and a minimal HTTP/1.1
client on asyncio streams (a request is written as bytes, an answer read by its
Content-Length), on uvloop's event loop when it is installed (the ``fast`` extra, as
``turnkeeper serve``; a quarter less of the client's CPU per request), so that its own
CPU per request stays small and is measured (``time.process_time`` of the timed phase)
rather than hidden in the server's figures.

A job (``{"host", "port", "warmup", "workers": [{"state", "requests"}]}``) runs each
worker's requests in order on its own connection, all workers at once: the first
`warmup` requests of each worker untimed, then ``{"ready": true}`` is written and the
client waits for a ``go`` line before the timed phase, so that the parent reads the
server's and PostgreSQL's CPU right around it. The answer has the latencies, the wall
time, the client's CPU seconds and each worker's final state (or the first error).

A request is ``{"method", "path", "query", "body", "token", "learn", "expect"}``. In
``query`` and ``body`` a value ``{"$": name}`` is replaced by the worker's state
``name`` (the frontier a gated send claims, the cursor of a poll); ``learn`` maps
state names to members of the JSON answer, stored after it; ``expect`` is ``[member,
length]``, a list the answer must hold that many items of.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any
from urllib.parse import urlencode

#: Bytes one job line may hold (every request of every worker of one measurement).
JOB_LIMIT = 64 * 1024 * 1024
#: Header of the keep-alive requests (HTTP/1.1 keeps the connection by default).
_HEADER = (
    "{method} {target} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
    "Accept: application/json\r\n"
)


class HttpError(RuntimeError):
    """An answer that is not a success, or not what the request expected."""


def _resolve(value: Any, state: dict[str, Any]) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$"}:
            return state[value["$"]]
        return {k: _resolve(v, state) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, state) for v in value]
    return value


class Connection:
    """One keep-alive HTTP/1.1 connection.

    Args:
        host: the server.
        port: its port.
    """

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        """Connect, unless connected (then the connection is kept)."""
        if self._writer is None or self._writer.is_closing():
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)

    def close(self) -> None:
        """Drop the connection (an answer may be half read): the next job reconnects."""
        if self._writer is not None:
            self._writer.close()
        self._reader, self._writer = None, None

    async def send(self, request: dict[str, Any], state: dict[str, Any]) -> None:
        """Send one request, read its answer, update the state.

        Args:
            request: the request (see the module's description).
            state: the worker's state.

        Raises:
            HttpError: a status of 300 or more, or an answer the request did not expect.
        """
        assert self._reader is not None
        assert self._writer is not None
        target = request["path"]
        query = request.get("query")
        if query:
            target += "?" + urlencode({k: str(v) for k, v in _resolve(query, state).items()})
        head = _HEADER.format(
            method=request["method"], target=target, host=self.host, token=request["token"]
        )
        body = request.get("body")
        payload = b""
        if body is not None:
            payload = json.dumps(_resolve(body, state), separators=(",", ":")).encode()
            head += f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
        self._writer.write(head.encode("latin-1") + b"\r\n" + payload)
        status, answer = await self._answer()
        if status >= 300:
            raise HttpError(f"{request['method']} {request['path']}: {status} {answer[:200]!r}")
        learn, expect = request.get("learn"), request.get("expect")
        if learn or expect:
            document = json.loads(answer)
            for name, member in (learn or {}).items():
                state[name] = document[member]
            if expect and len(document[expect[0]]) != expect[1]:
                raise HttpError(f"{request['path']}: {expect[0]} is not {expect[1]} long")

    async def _answer(self) -> tuple[int, bytes]:
        assert self._reader is not None
        head = await self._reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            return status, await self._chunked()
        return status, await self._reader.readexactly(int(headers.get("content-length", "0")))

    async def _chunked(self) -> bytes:
        assert self._reader is not None
        parts: list[bytes] = []
        while True:
            size = int((await self._reader.readline()).split(b";")[0], 16)
            if size == 0:
                await self._reader.readline()
                return b"".join(parts)
            parts.append(await self._reader.readexactly(size))
            await self._reader.readline()


async def run_job(
    job: dict[str, Any], connections: list[Connection], go: asyncio.Event, out: Any
) -> dict[str, Any]:
    """Run one job (see the module's description).

    Args:
        job: the job.
        connections: the client's connections (grown as needed, reconnected per job).
        go: set when the parent says go.
        out: where ``{"ready": true}`` is written.

    Returns:
        The answer document.
    """
    workers = job["workers"]
    warmup = int(job["warmup"])
    while len(connections) < len(workers):
        connections.append(Connection(job["host"], int(job["port"])))
    for connection in connections[: len(workers)]:
        # The server closes connections idle for its keep-alive timeout (uvicorn: 5 s),
        # and preparing the next measurement takes longer: every job connects anew,
        # before its warm-up.
        connection.close()
        await connection.open()
    states = [dict(w["state"]) for w in workers]
    latencies: list[float] = []

    async def untimed(index: int) -> None:
        for request in workers[index]["requests"][:warmup]:
            await connections[index].send(request, states[index])

    async def timed(index: int) -> None:
        for request in workers[index]["requests"][warmup:]:
            started = time.perf_counter()
            await connections[index].send(request, states[index])
            latencies.append(time.perf_counter() - started)

    try:
        await asyncio.gather(*(untimed(i) for i in range(len(workers))))
        print(json.dumps({"ready": True}), file=out, flush=True)
        await go.wait()
        cpu = time.process_time()
        started = time.perf_counter()
        await asyncio.gather(*(timed(i) for i in range(len(workers))))
        seconds = time.perf_counter() - started
        cpu = time.process_time() - cpu
    except (HttpError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
        for connection in connections:
            connection.close()
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"latencies": latencies, "seconds": seconds, "cpu": cpu, "states": states}


async def main_async() -> int:
    """Serve jobs from standard input until it closes.

    Returns:
        The exit code.
    """
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=JOB_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    connections: list[Connection] = []
    while line := await reader.readline():
        job = json.loads(line)
        go = asyncio.Event()

        async def wait_for_go(event: asyncio.Event = go) -> None:
            await reader.readline()
            event.set()

        waiter = asyncio.create_task(wait_for_go())
        answer = await run_job(job, connections, go, sys.stdout)
        if not go.is_set():
            # An error before the timed phase: the parent still sends go; take it.
            print(json.dumps({"ready": True}), flush=True)
            await waiter
        print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    # Imported here: the jobs above need nothing of turnkeeper, only the loop's choice.
    from turnkeeper.adapters.http.server import event_loop_factory

    # "auto", as `turnkeeper serve` chooses: uvloop when installed, else asyncio's own.
    with asyncio.Runner(loop_factory=event_loop_factory("auto")) as runner:
        raise SystemExit(runner.run(main_async()))
