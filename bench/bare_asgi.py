"""The bare ASGI app of ``python -m bench.http_stack --healthz``: the HTTP server alone.

It answers every request with the body ``GET /healthz`` answers, without a framework, a
middleware or a log line. Served by uvicorn on httptools and uvloop, as ``turnkeeper
serve`` runs by default (`bench.serve.bare_server`), its CPU per request is what the
server, the parser and the loop cost before any work of Litestar or of turnkeeper: the
part of an HTTP request no change of the adapter can remove.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

#: The answer's body (that of ``GET /healthz``).
BODY = b'{"status":"ok"}'
#: The answer's headers.
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """Answer 200 and `BODY` to every HTTP request (ASGI 3).

    Args:
        scope: the connection's scope (``http`` or ``lifespan``).
        receive: the ASGI receive channel.
        send: the ASGI send channel.
    """
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = bool(message.get("more_body", False))
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})
