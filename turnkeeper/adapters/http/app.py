"""The Litestar application factory of the HTTP contract (API.md)."""

from __future__ import annotations

from litestar import Litestar
from litestar._openapi.plugin import OpenAPIPlugin
from litestar.di import Provide
from litestar.openapi.config import OpenAPIConfig
from litestar.openapi.spec import Components, OpenAPI, SecurityScheme

from turnkeeper.adapters.http.admin import admin_router
from turnkeeper.adapters.http.agent_send import (
    agent_send_router,
    log_refused_send,
    send_fast_route,
)
from turnkeeper.adapters.http.body_guard import BlankBodyRequest, body_guard
from turnkeeper.adapters.http.console import CONSOLE_PATH, console_headers, console_router
from turnkeeper.adapters.http.conversation import conversation_router, message_fast_route
from turnkeeper.adapters.http.correlation import CorrelatedApp
from turnkeeper.adapters.http.dependencies import (
    BEARER_SCHEME,
    caller_check,
    refuse_unknown_bearer,
    resolve_one_by_one,
    service_dependencies,
)
from turnkeeper.adapters.http.docs_page import docs_assets_router, docs_render_plugin
from turnkeeper.adapters.http.fast_path import BearerPostFastPath
from turnkeeper.adapters.http.openapi import complete_document
from turnkeeper.adapters.http.operations import (
    Readiness,
    ReadinessCheck,
    always_ready,
    healthz,
    openapi_document,
    readyz,
)
from turnkeeper.adapters.http.problems import handle_exception, not_found_as_problem
from turnkeeper.adapters.http.query_guard import QueryGuard
from turnkeeper.adapters.http.runs import runs_router
from turnkeeper.adapters.http.streams import document_streams, streams_router
from turnkeeper.adapters.http.tokens import tokens_router
from turnkeeper.adapters.observability.http import ObservedApp, metrics_endpoint
from turnkeeper.adapters.observability.metrics import attach_metrics
from turnkeeper.adapters.system import package_version
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.settings import Settings


def create_app(
    services: Services, settings: Settings | None = None, readiness: Readiness = always_ready
) -> CorrelatedApp:
    """Build the HTTP application over the application services.

    The application serves the settings of its services: the services enforce them (page
    and content bounds, rate limits) and the application's own checks and OpenAPI
    document follow the same values.

    Args:
        services: the services (memory or PostgreSQL underneath).
        settings: the services' settings (``services.settings``, the default); passing
            them only states which settings the application serves.
        readiness: answers /readyz: None when ready, else the reason.

    Returns:
        The ASGI application, serving ``/v1``, ``/healthz``, ``/readyz``,
        ``/openapi.json``, ``/docs`` (with its assets under ``/docs/assets``) and, while
        ``metrics.enabled``, ``/metrics`` (the Prometheus sink of the services' telemetry,
        attached now if it has none).

    Raises:
        ValueError: when ``settings`` differ from ``services.settings`` (the document
            would state bounds the routes do not enforce).

    Example:
        >>> app = create_app(services)  # doctest: +SKIP
        >>> uvicorn.run(app)  # doctest: +SKIP
    """
    if settings is None:
        settings = services.settings
    elif settings != services.settings:
        raise ValueError(
            "an application serves the settings of its services: build the services "
            "from these settings"
        )
    check = ReadinessCheck(readiness, retry_after=int(settings.reconnect_max_wait.total_seconds()))

    def provide_readiness() -> ReadinessCheck:
        return check

    openapi = OpenAPIConfig(
        title="turnkeeper",
        version=package_version(),
        description="Keeps the turns of AI agents in chat threads.",
        # Litestar's documentation router answers every unknown path below its own
        # path with an HTML page, so it lives under /docs; /openapi.json is served by
        # `openapi_document` at the root.
        path="/docs",
        # The page's assets come from the package, not from a CDN (docs_page).
        render_plugins=[docs_render_plugin()],
        components=Components(
            security_schemes={
                BEARER_SCHEME: SecurityScheme(type="http", scheme="bearer"),
            }
        ),
        # Litestar would add its own 400 schema; every error here is a Problem.
        create_examples=False,
    )
    queries = QueryGuard()
    metrics = attach_metrics(services.telemetry) if settings.metrics_enabled else None
    if (
        metrics is not None
        and metrics.event_stream_clients.set not in services.live.stream_count_hooks
    ):
        # The gauge follows the event streams open on this process.
        services.live.stream_count_hooks.append(metrics.event_stream_clients.set)
    app = ObservedApp(
        metrics=metrics,
        telemetry=services.telemetry,
        route_handlers=[
            admin_router(),
            tokens_router(),
            conversation_router(),
            runs_router(),
            agent_send_router(),
            streams_router(),
            healthz,
            readyz,
            openapi_document,
            console_router(),
            docs_assets_router(),
        ]
        + ([metrics_endpoint] if metrics is not None else []),
        dependencies={
            **service_dependencies(services),
            "readiness": Provide(provide_readiness, sync_to_thread=False),
        },
        exception_handlers={Exception: handle_exception},
        after_exception=[
            refuse_unknown_bearer(services.identity, caller_check(services), log_refused_send)
        ],
        # Query names, then depth, duplicated members and NUL characters, before Litestar
        # decodes a request.
        before_request=body_guard(settings.max_json_depth, queries),
        request_class=BlankBodyRequest,
        openapi_config=openapi,
        # http.max_body_bytes: Litestar refuses a longer body with 413 before decoding.
        request_max_body_size=settings.max_body_bytes,
        debug=False,
        # Logging is configured once per process by adapters.logging, not by Litestar.
        logging_config=None,
    )
    resolve_one_by_one(app.routes)
    queries.learn(app.routes)
    # Litestar's documentation router answers an unknown page below /docs in HTML.
    app.send_filters = (
        (f"{openapi.path}/", not_found_as_problem),
        # Every answer of the console's paths carries its security headers (ADR 0019).
        (CONSOLE_PATH, console_headers),
    )
    # The hottest routes' plain requests skip Litestar's pipeline (ADR 0032).
    app.fast_path = BearerPostFastPath(
        app,
        settings,
        [message_fast_route(services.conversation), send_fast_route(services.agent_send)],
    )
    _share_document(app, settings)
    return app


#: The completed OpenAPI document of each settings value, built by the first application
#: of the process with these settings (ADR 0039).
_DOCUMENTS: dict[Settings, OpenAPI] = {}


def _share_document(app: Litestar, settings: Settings) -> OpenAPI:
    """Give the application the completed OpenAPI document of its settings.

    The document depends on the routes, which are the same in every application, and on
    the settings only; building and completing it is about a third of `create_app`, so
    the applications of a process with equal settings share the one built first.
    Completed here rather than on the first request, so that /openapi.json and the page
    under /docs serve the same document. Nothing changes a document once shared.

    Args:
        app: a new application (Litestar's OpenAPI plugin has not built its document).
        settings: the application's settings.

    Returns:
        The document the application serves.
    """
    plugin = app.plugins.get(OpenAPIPlugin)
    document = _DOCUMENTS.get(settings)
    if document is None:
        document = document_streams(complete_document(plugin.provide_openapi(), settings))
        _DOCUMENTS[settings] = document
    else:
        # Litestar keeps the document it builds on first use in this slot; filled now,
        # it never builds one.
        plugin._openapi = document
    return document
