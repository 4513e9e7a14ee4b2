"""The HTTP side of operations: request metrics and spans, and ``GET /metrics``.

`ObservedApp` wraps every HTTP exchange, unknown paths and methods included (which a
Litestar middleware would never see): it opens the request's span, and when the answer
is out it counts the request in ``turnkeeper_http_requests_total{route,status}`` and
``turnkeeper_http_request_duration_seconds{route}`` by the route TEMPLATE
(``/v1/threads/{thread_id}``), never by the raw path with its ids. `metrics_endpoint`
serves the process's registry in the Prometheus text format; `create_app` registers it
only while ``metrics.enabled`` is true, so that otherwise ``/metrics`` is the same 404
as any unknown path.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get
from litestar.types import Receive, Scope, Send

from turnkeeper.adapters.http.correlation import CorrelatedApp, Exchange
from turnkeeper.adapters.observability.metrics import PrometheusMetrics
from turnkeeper.application.telemetry import TelemetryHub

#: The path of the metrics endpoint (outside /v1: it is for the scraper, not for clients).
METRICS_PATH = "/metrics"


class ObservedApp(CorrelatedApp):
    """A `CorrelatedApp` that measures and traces every HTTP exchange.

    The request's span is opened only while a sink that records spans is attached (the
    Prometheus sink records none, so with metrics alone no span and no attributes are
    built per request).

    Args:
        metrics: the process's metrics (None: ``metrics.enabled`` is false).
        telemetry: the services' telemetry, for the request spans.
        **options: the options of `litestar.Litestar`.
    """

    def __init__(
        self,
        *,
        metrics: PrometheusMetrics | None,
        telemetry: TelemetryHub,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.metrics = metrics
        self.telemetry = telemetry

    async def _handle_http(
        self, scope: Scope, receive: Receive, send: Send, exchange: Exchange
    ) -> None:
        """Run the application inside the request's span, when spans are recorded."""
        if not self.telemetry.records_spans:
            await super()._handle_http(scope, receive, send, exchange)
            return
        method = str(scope.get("method", ""))
        attributes = {
            "http.request.method": method,
            "url.path": str(scope.get("path", "")),
            "correlation_id": exchange.correlation_id,
        }
        with self.telemetry.span(method, attributes) as span:
            try:
                await super()._handle_http(scope, receive, send, exchange)
            finally:
                # Known only now: Litestar writes the template into the scope when it
                # routes; an unmatched request has none.
                route = _route(scope)
                span.set_name(f"{method} {route}" if route else method)
                span.set_attributes({"http.response.status_code": exchange.status})
                if route:
                    span.set_attributes({"http.route": route})

    def _answered(self, scope: Scope, exchange: Exchange, seconds: float) -> None:
        """Count the request by route template and status."""
        if self.metrics is not None:
            self.metrics.observe_request(_route(scope), exchange.status, seconds)


def _route(scope: Scope) -> str | None:
    template = scope.get("path_template")
    return template if isinstance(template, str) and template else None


@get(METRICS_PATH, include_in_schema=False, sync_to_thread=False)
def metrics_endpoint(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The process's metrics in the Prometheus text format (OpenMetrics when asked for).

    Args:
        request: the scrape request (its ``Accept`` header picks the format).

    Returns:
        The exposition of the process's registry.
    """
    app = request.app
    metrics = app.metrics if isinstance(app, ObservedApp) else None
    if metrics is None:
        # Registered only with metrics; reached without them only by a misconfiguration.
        return Response(content=b"", status_code=404)
    body, content_type = metrics.exposition(request.headers.get("accept"))
    # Given as a header: as media_type, Litestar would add a second charset to it.
    return Response(content=body, headers={"Content-Type": content_type})


__all__ = ["METRICS_PATH", "ObservedApp", "metrics_endpoint"]
