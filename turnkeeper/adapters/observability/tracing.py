"""OpenTelemetry traces, with the optional extra ``turnkeeper[otel]``.

`OtelTracing` is a `turnkeeper.application.telemetry.Telemetry` sink that records spans
only: one per HTTP request (`turnkeeper.adapters.observability.http`), one per use case
beneath it (`turnkeeper.application.transactions.Transactor`), and, with
`instrument_psycopg`, one per SQL statement beneath that. Attributes are ids, states
and seqs; SQL parameters are never captured and exceptions are recorded by type and
problem code only, so no content or token reaches a span.

`process_tracing` switches tracing on for a process when an OTLP endpoint is configured
(the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``).
Without the extra installed this module still imports: `process_tracing` then logs one
warning and yields None, and everything else runs untraced.

Example:
    >>> with process_tracing() as tracing:  # doctest: +SKIP
    ...     if tracing is not None:
    ...         services.telemetry.attach(tracing)
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from turnkeeper.adapters.postgres.base import Conn
from turnkeeper.adapters.postgres.observers import StatementDone, observe_statements
from turnkeeper.application.logs import get_logger
from turnkeeper.application.telemetry import (
    AttributeValue,
    CommittedChanges,
    SendAnswered,
    SpanHandle,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.trace import Span, TracerProvider

#: The instrumentation scope of turnkeeper's own spans.
TRACER_NAME = "turnkeeper"
#: Variables that configure an OTLP endpoint; any of them switches tracing on.
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
#: The standard switch that turns the SDK off whatever else is configured.
SDK_DISABLED_VARIABLE = "OTEL_SDK_DISABLED"
#: Modules of the ``otel`` extra that tracing needs.
_EXTRA_MODULES = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")
#: The span attribute naming an exception's class.
ERROR_TYPE = "error.type"
#: The span attribute with the problem code of an expected error (validation_failed ...).
ERROR_CODE = "turnkeeper.error_code"

_log = get_logger("turnkeeper.tracing")


def otel_installed() -> bool:
    """Whether the ``otel`` extra (the OpenTelemetry SDK and OTLP exporter) is installed.

    Returns:
        True when both can be imported.
    """
    return all(_importable(name) for name in _EXTRA_MODULES)


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        # A missing parent package raises instead of answering None.
        return False


def tracing_configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for traces.

    Args:
        environ: the environment (``os.environ`` when None).

    Returns:
        True when an OTLP endpoint variable is set and the SDK is not disabled.
    """
    env = os.environ if environ is None else environ
    if env.get(SDK_DISABLED_VARIABLE, "").strip().lower() == "true":
        return False
    return any(env.get(name, "").strip() for name in ENDPOINT_VARIABLES)


class _OtelSpan:
    """A `SpanHandle` over an OpenTelemetry span."""

    def __init__(self, span: Span) -> None:
        self._span = span

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Add attributes to the span."""
        self._span.set_attributes(dict(attributes))

    def set_name(self, name: str) -> None:
        """Rename the span."""
        self._span.update_name(name)


def _mark_error(span: Span, error: BaseException) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute(ERROR_TYPE, type(error).__name__)
    code = getattr(error, "code", None)
    if isinstance(code, str):
        # A problem the client caused (validation_failed, not_found ...): an answer,
        # not a fault of the server, so the span's status stays unset.
        span.set_attribute(ERROR_CODE, code)
        return
    # Only the class: an exception's message may quote data (a driver error's detail).
    span.set_status(Status(StatusCode.ERROR, type(error).__name__))


class OtelTracing:
    """A `Telemetry` sink that records spans only.

    Args:
        tracer_provider: the provider spans go to (the global one when None; tests pass
            an SDK provider with an in-memory exporter).
    """

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        from opentelemetry import trace

        #: The provider given (None: the global one).
        self.provider = tracer_provider
        self._trace = trace
        self._tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)

    def committed(self, changes: CommittedChanges) -> None:
        """Nothing: counts are the metrics' job."""

    def send_answered(self, answered: SendAnswered) -> None:
        """Nothing: the send's attributes come through `annotate`."""

    @contextlib.contextmanager
    def span(
        self, name: str, attributes: Mapping[str, AttributeValue] | None = None
    ) -> Iterator[SpanHandle]:
        """A span, current for the block, child of the current one."""
        with self._tracer.start_as_current_span(
            name,
            attributes=dict(attributes or {}),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield _OtelSpan(span)
            except BaseException as error:
                _mark_error(span, error)
                raise

    def annotate(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Add attributes to the current span."""
        self._trace.get_current_span().set_attributes(dict(attributes))


def instrument_psycopg(tracer_provider: TracerProvider | None = None) -> Callable[[], None]:
    """Trace every statement of psycopg connections opened from now on, and of write units.

    Statements are recorded with their SQL text only (turnkeeper binds every value, so
    the text holds no content); parameters are never captured. Write units do not run
    through psycopg's cursors (`turnkeeper.adapters.postgres.executor`): their
    statements get spans of the same name and attributes from `StatementSpans`.

    Args:
        tracer_provider: the provider the statement spans go to.

    Returns:
        A function that removes the instrumentation again.

    Raises:
        ImportError: when opentelemetry-instrumentation-psycopg is not installed.
    """
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    instrumentor = PsycopgInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider, capture_parameters=False)
    stop_observing = observe_statements(StatementSpans(tracer_provider))

    def undo() -> None:
        stop_observing()
        instrumentor.uninstrument()

    return undo


class StatementSpans:
    """A client span per statement a write unit's link sends, from send to result.

    The span is a child of the span current where the statement is sent (the use case),
    named by the statement's first word as psycopg's instrumentation names it, with the
    same attributes: the database system, name, user, host and port, and the text.

    Args:
        tracer_provider: the provider of the spans (the global one when None).
    """

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        from opentelemetry import trace

        self._tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)
        # Imported once here, not at every statement.
        self._client = trace.SpanKind.CLIENT

    def __call__(self, conn: Conn, query: str) -> StatementDone | None:
        """Start the statement's span (see `StatementObserver`)."""
        words = query.split(maxsplit=1)
        info = conn.info
        span = self._tracer.start_span(
            words[0] if words else info.dbname,
            kind=self._client,
            attributes={
                "db.system": "postgresql",
                "db.name": info.dbname,
                "db.user": info.user,
                "net.peer.name": info.host,
                "net.peer.port": info.port,
                "db.statement": query,
            },
        )

        def done(error: BaseException | None) -> None:
            if error is not None:
                _mark_error(span, error)
            span.end()

        return done


def _build_provider() -> SdkTracerProvider:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; the exporter
    # reads the endpoint, headers and timeout from the standard OTEL_EXPORTER_OTLP_*.
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        # Named turnkeeper unless the operator named the service.
        resource = resource.merge(Resource({SERVICE_NAME: TRACER_NAME}))
    provider = SdkTracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


@contextlib.contextmanager
def process_tracing(environ: Mapping[str, str] | None = None) -> Iterator[OtelTracing | None]:
    """Traces for the duration of a process's work, when the environment asks for them.

    Call it before the database pool opens, so that its connections are instrumented.
    On exit the spans still buffered are exported and the instrumentation is removed.

    Args:
        environ: the environment (``os.environ`` when None).

    Yields:
        The sink to attach to the services' telemetry, or None when tracing is not
        configured or the ``otel`` extra is not installed.
    """
    if not tracing_configured(environ):
        yield None
        return
    if not otel_installed():
        _log.warning("tracing_unavailable", reason="install turnkeeper[otel] for traces")
        yield None
        return
    provider = _build_provider()
    undo: Callable[[], None] | None = None
    try:
        undo = instrument_psycopg(provider)
    except ImportError:
        _log.warning("psycopg_tracing_unavailable", reason="instrumentation not installed")
    try:
        yield OtelTracing(provider)
    finally:
        if undo is not None:
            undo()
        provider.shutdown()


__all__ = [
    "ENDPOINT_VARIABLES",
    "ERROR_CODE",
    "ERROR_TYPE",
    "TRACER_NAME",
    "OtelTracing",
    "StatementSpans",
    "instrument_psycopg",
    "otel_installed",
    "process_tracing",
    "tracing_configured",
]
