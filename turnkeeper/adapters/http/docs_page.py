"""The interactive API page at ``/docs``, with its assets served by the server itself.

Litestar's Swagger UI plugin loads its scripts and styles from a CDN by default, which
leaves ``/docs`` blank on a machine without internet. turnkeeper ships a pinned copy of
Swagger UI inside the package (``turnkeeper/adapters/http/static/swagger-ui``, with its
license) and serves it under `ASSETS_PATH`; the page embeds the OpenAPI document itself,
so it needs nothing from elsewhere.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from litestar import Router
from litestar.datastructures import CacheControlHeader
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.static_files import create_static_files_router

#: The packaged Swagger UI (npm ``swagger-ui-dist``); see the README beside the files.
SWAGGER_UI_VERSION = "5.18.2"
#: Where the assets are served (below /docs, beside the page).
ASSETS_PATH = "/docs/assets"
#: How long a browser may keep an asset: a day (an upgrade changes the files, and the
#: page that names them is never cached).
ASSETS_MAX_AGE_SECONDS = 86400
#: The packaged files the page loads.
ASSET_FILES = (
    "swagger-ui-bundle.js",
    "swagger-ui-standalone-preset.js",
    "swagger-ui.css",
    "favicon-32x32.png",
)


def assets_dir() -> Path:
    """The directory of the packaged Swagger UI files.

    Returns:
        ``turnkeeper/adapters/http/static/swagger-ui`` of the installed package.
    """
    return Path(str(resources.files("turnkeeper.adapters.http"))) / "static" / "swagger-ui"


def docs_render_plugin() -> SwaggerRenderPlugin:
    """The Swagger UI page at ``/docs``, naming only assets of this server.

    Returns:
        The render plugin for Litestar's OpenAPI configuration.
    """
    return SwaggerRenderPlugin(
        version=SWAGGER_UI_VERSION,
        js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
        css_url=f"{ASSETS_PATH}/swagger-ui.css",
        standalone_preset_js_url=f"{ASSETS_PATH}/swagger-ui-standalone-preset.js",
        favicon=f"<link rel='icon' type='image/png' href='{ASSETS_PATH}/favicon-32x32.png'>",
        path="/",
    )


def docs_assets_router() -> Router:
    """The route of the packaged assets (outside the OpenAPI document, no token needed).

    Returns:
        A new router serving `assets_dir` under `ASSETS_PATH`.
    """
    return create_static_files_router(
        path=ASSETS_PATH,
        directories=[assets_dir()],
        name="docs_assets",
        cache_control=CacheControlHeader(max_age=ASSETS_MAX_AGE_SECONDS),
        include_in_schema=False,
    )
