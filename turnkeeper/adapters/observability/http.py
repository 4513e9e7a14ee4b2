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

import time
from typing import Any

from litestar import Request, Response, get
from litestar.types import Message, Receive, Scope, Send

from turnkeeper.adapters.http.correlation import CorrelatedApp, correlation_id_of
from turnkeeper.adapters.observability.metrics import PrometheusMetrics
from turnkeeper.application.telemetry import TelemetryHub

#: The path of the metrics endpoint (outside /v1: it is for the scraper, not for clients).
METRICS_PATH = "/metrics"


class ObservedApp(CorrelatedApp):
    """A `CorrelatedApp` that measures and traces every HTTP exchange.

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

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Serve one ASGI connection; HTTP exchanges are measured and traced.

        Args:
            scope: the ASGI scope.
            receive: the ASGI receive callable.
            send: the ASGI send callable.
        """
        if scope["type"] != "http" or (self.metrics is None and not self.telemetry.active):
            await super().__call__(scope, receive, send)
            return
        await self._observe_http(scope, receive, send)

    async def _observe_http(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = str(scope.get("method", ""))
        started = time.perf_counter()
        status = 500

        async def send_observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        attributes = {
            "http.request.method": method,
            "url.path": str(scope.get("path", "")),
            "correlation_id": correlation_id_of(scope),
        }
        with self.telemetry.span(method, attributes) as span:
            try:
                await super().__call__(scope, receive, send_observed)
            finally:
                # Known only now: Litestar writes the template into the scope when it
                # routes; an unmatched request has none.
                template = scope.get("path_template")
                route = template if isinstance(template, str) and template else None
                span.set_name(f"{method} {route}" if route else method)
                span.set_attributes({"http.response.status_code": status})
                if route:
                    span.set_attributes({"http.route": route})
                if self.metrics is not None:
                    self.metrics.observe_request(route, status, time.perf_counter() - started)


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
