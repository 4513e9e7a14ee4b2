"""The live console: ``GET /console``, a page that speaks only the public HTTP API.

The page and its script and style are pinned files of the package
(``turnkeeper/adapters/http/console/``): no CDN, no build step, no external font. The
server only hands them out; the page reads and acts with the token a person enters
(kept in the tab's ``sessionStorage``, sent as ``Authorization: Bearer``), so the
console has no powers of its own (ADR 0019). Every answer carries a Content Security
Policy that allows the page's own origin only.

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
_HTML = "text/html"


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
            "Content-Security-Policy": CONTENT_SECURITY_POLICY,
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
            # Revalidated on every load, so that an upgraded server is never paired
            # with a cached script of the previous version.
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


def console_router() -> Router:
    """The routes of the console, for `turnkeeper.adapters.http.create_app`.

    Returns:
        A router with ``GET /console`` and ``GET /console/{name}``.
    """
    return Router(path="/", route_handlers=[console_page, console_asset])
