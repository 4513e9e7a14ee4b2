"""The live console: ``GET /console``, a page that speaks only the public HTTP API.

The page and its script and style are pinned files of the package
(``turnkeeper/adapters/http/console/``): no CDN, no build step, no external font. The
server only hands them out; the page reads and acts with the token a person enters
(kept in the tab's ``sessionStorage``, sent as ``Authorization: Bearer``), so the
console has no powers of its own (ADR 0019). Every answer under ``/console`` carries a
Content Security Policy that allows the page's own origin only, ``nosniff`` and
``no-referrer``: the files, and the 404, 405 and OPTIONS answers alike
(`console_headers`).

Example:
    >>> app = Litestar(route_handlers=[console_router()])  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources

from litestar import Response, Router, get
from litestar.exceptions import NotFoundException
from litestar.params import FromPath
from litestar.types import Message, Scope, Send

#: The path of the page.
CONSOLE_PATH = "/console"
#: The page's file in the package folder ``console/``.
PAGE_FILE = "index.html"
#: The files below ``/console/`` and their media types (nothing else is served; Litestar
#: adds ``charset=utf-8`` to text types).
ASSET_TYPES: dict[str, str] = {
    "console.js": "text/javascript",
    "console.css": "text/css",
}
#: The page's own origin only: scripts, styles, images and fetches; no frames, no forms
#: elsewhere, no plugins.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
#: What every answer under /console carries, errors and OPTIONS included (ADR 0019).
SECURITY_HEADERS: dict[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
_HTML = "text/html"
_ENCODED_HEADERS = tuple(
    (name.lower().encode("latin-1"), value.encode("latin-1"))
    for name, value in SECURITY_HEADERS.items()
)


@functools.cache
def console_file(name: str) -> bytes:
    """The bytes of one of the console's pinned files, read once per process.

    Args:
        name: ``index.html`` or a name of `ASSET_TYPES`.

    Returns:
        The file as shipped in the package.

    Raises:
        FileNotFoundError: when the package lacks it (a broken installation).
    """
    folder = resources.files("turnkeeper.adapters.http").joinpath("console")
    return folder.joinpath(name).read_bytes()


def _answer(name: str, media_type: str) -> Response[bytes]:
    body = console_file(name)
    return Response(
        content=body,
        media_type=media_type,
        headers={
            # The security headers come from `console_headers`, as for every answer
            # under /console. Revalidated on every load, so that an upgraded server is
            # never paired with a cached script of the previous version.
            "Cache-Control": "no-cache",
            "ETag": '"' + hashlib.sha256(body).hexdigest()[:32] + '"',
        },
    )


@get(CONSOLE_PATH, include_in_schema=False)
async def console_page() -> Response[bytes]:
    """The console page (no authentication: it holds no data, only the page)."""
    return _answer(PAGE_FILE, _HTML)


@get(CONSOLE_PATH + "/{name:str}", include_in_schema=False)
async def console_asset(name: FromPath[str]) -> Response[bytes]:
    """One of the page's pinned files.

    Raises:
        NotFoundException: for any other name (the 404 of an unknown path).
    """
    media_type = ASSET_TYPES.get(name)
    if media_type is None:
        raise NotFoundException()
    return _answer(name, media_type)


def console_headers(scope: Scope, send: Send) -> Send:
    """`send` with `SECURITY_HEADERS` on the answer, for a request under ``/console``.

    A send filter of the application (`CorrelatedApp.send_filters`) rather than the
    routes' own headers: Litestar answers a 404 below the console, a method the routes do
    not have (405) and OPTIONS before or beside the routes, and ADR 0019 wants the
    headers on every answer of the console's paths.

    Args:
        scope: the exchange's ASGI scope.
        send: the ASGI send callable.

    Returns:
        The send to give the application; `send` itself for a path that only begins
        like the console's (``/consolex``).
    """
    path = scope["path"]
    if path != CONSOLE_PATH and not path.startswith(CONSOLE_PATH + "/"):
        return send

    async def send_with_headers(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *_ENCODED_HEADERS]}
        await send(message)

    return send_with_headers


def console_router() -> Router:
    """The routes of the console, for `turnkeeper.adapters.http.create_app`.

    Returns:
        A router with ``GET /console`` and ``GET /console/{name}``.
    """
    return Router(path="/", route_handlers=[console_page, console_asset])
