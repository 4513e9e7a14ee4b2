"""A minimal in-process ASGI client for the HTTP side of the benchmarks.

The HTTP side measures what a request costs turnkeeper: Litestar's routing, the
middleware, authentication, body decoding and validation, the service, encoding the
answer. ``httpx.ASGITransport`` adds the client's own work on top (URL and header
models, a request and a response object, streams), which a real client pays in its own
process: profiled, it took about 13 % of the HTTP side's time (docs/performance.md). This
client builds the ASGI scope directly and hands the body over in one message, so the
figures hold the server's work and little else.

It speaks just enough HTTP/1.1 ASGI for the benchmark's requests (no streaming, no
lifespan); the test suites use httpx.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from litestar.types import ASGIApp

#: The ASGI server and client addresses put into the scope (nothing listens there).
SERVER = ("bench.example.com", 80)
CLIENT = ("127.0.0.1", 40000)


class AsgiResponse:
    """The answer to one request.

    Args:
        url: the request's path and query (for error messages).
        status_code: the HTTP status.
        content: the body.
    """

    def __init__(self, url: str, status_code: int, content: bytes) -> None:
        self.url = url
        self.status_code = status_code
        self.content = content

    @property
    def text(self) -> str:
        """The body as text."""
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body decoded from JSON."""
        return json.loads(self.content)


class AsgiClient:
    """Calls an ASGI application in-process, one request per call.

    Args:
        app: the application.
    """

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def get(
        self,
        path: str,
        *,
        params: Mapping[str, object] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AsgiResponse:
        """Send a GET.

        Args:
            path: the path.
            params: query parameters.
            headers: request headers.

        Returns:
            The answer.
        """
        return await self.request("GET", path, params=params, headers=headers)

    async def post(
        self,
        path: str,
        *,
        json: object | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AsgiResponse:
        """Send a POST with a JSON body.

        Args:
            path: the path.
            json: the body, encoded as JSON (None: no body).
            headers: request headers.

        Returns:
            The answer.
        """
        return await self.request("POST", path, body=json, headers=headers)

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, object] | None = None,
        body: object | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AsgiResponse:
        """Send one request and collect the whole answer.

        Args:
            method: the HTTP method.
            path: the path.
            params: query parameters.
            body: the JSON body (None: no body).
            headers: request headers.

        Returns:
            The answer.
        """
        query = urlencode({k: str(v) for k, v in (params or {}).items()}).encode("ascii")
        payload = b"" if body is None else json.dumps(body).encode("utf-8")
        raw_headers = [
            (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()
        ]
        raw_headers.append((b"host", SERVER[0].encode("ascii")))
        if body is not None:
            raw_headers.append((b"content-type", b"application/json"))
            raw_headers.append((b"content-length", str(len(payload)).encode("ascii")))
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode("utf-8"),
            "query_string": query,
            "root_path": "",
            "headers": raw_headers,
            "client": CLIENT,
            "server": SERVER,
            "state": {},
        }
        done = asyncio.Event()
        sent_body = False
        status = 0
        chunks: list[bytes] = []

        async def receive() -> dict[str, Any]:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": payload, "more_body": False}
            # A second receive waits for the end, like a client that stays connected.
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                chunks.append(bytes(message.get("body", b"")))
                if not message.get("more_body", False):
                    done.set()

        await self._app(scope, receive, send)  # type: ignore[arg-type]
        done.set()
        url = path + ("?" + query.decode("ascii") if query else "")
        return AsgiResponse(url, status, b"".join(chunks))


__all__ = ["AsgiClient", "AsgiResponse"]
