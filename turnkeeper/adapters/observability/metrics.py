"""Prometheus metrics of a turnkeeper process (API.md, Operations; seed section 7).

`PrometheusMetrics` is a `turnkeeper.application.telemetry.Telemetry` sink with a
registry of its own: it turns each committed unit's changes and each committed send
answer into counters and histograms, and it is what ``GET /metrics`` exposes. Every
process (each ``turnkeeper serve``) has its own registry; Prometheus scrapes every
process and sums over them (docs/operations.md). The workers of one server
(``http.workers`` above 1) share theirs instead (`shared_metrics`, ADR 0043):
each writes its values to files of a directory the parent made, and whichever worker
answers a scrape sums every worker's, so that one scrape shows the whole server.

Labels are low-cardinality by construction: states, origins, outcomes and reasons come
from bounded vocabularies of the domain, and any other value (the reason an agent gives
when it finishes a run, which is never one of the server's) is folded into one label
value. No label ever holds an id, a handle, a target key or content.

Example:
    >>> metrics = PrometheusMetrics()
    >>> services.telemetry.attach(metrics)  # doctest: +SKIP
    >>> print(metrics.exposition()[0].decode())  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from datetime import timedelta
from pathlib import Path
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from turnkeeper.adapters.observability.shared_metrics import SharedFamilies, shared_directory
from turnkeeper.application.telemetry import (
    NO_SPAN,
    AttributeValue,
    CommittedChanges,
    SendAnswered,
    SpanHandle,
    TelemetryHub,
)
from turnkeeper.domain.delivery import DeliveryReason
from turnkeeper.domain.events import EventType
from turnkeeper.domain.finish import REASON_AGENT, REASON_NONE, bounded_reason
from turnkeeper.domain.followups import FollowupState
from turnkeeper.domain.freshness import SendState
from turnkeeper.domain.messaging import Origin
from turnkeeper.domain.runs import END_STATES, EndReason, FailReason, RunState

#: The only target type of the freshness gate today (agents send into threads).
TARGET_TYPE_THREAD = "thread"
#: Actions whose in-unit denials are invocation denials.
INVOCATION_ACTIONS = frozenset({"agent.invoke", "run.followup.create"})
#: Label of any value outside a bounded vocabulary (it never becomes a label itself).
OTHER = "other"
#: Route label of a request no route matched (unknown path or method).
UNMATCHED_ROUTE = "(unmatched)"
#: Follow-up outcome labels: the follow-up states plus ``moved`` (to the follow-on run).
FOLLOWUP_OUTCOMES = (*(state.value for state in FollowupState), "moved")

#: Buckets of ``turnkeeper_agent_send_freshness_seq_delta``: how many messages a held
#: send missed (one is the common race, tens mean a stale agent).
SEQ_DELTA_BUCKETS = (1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0, 500.0)
#: Buckets of ``turnkeeper_run_duration_seconds``: from a quick answer to a run that
#: reaches ``run.stall_after`` or ``run.queued_max_age`` (both well inside the top bucket).
RUN_DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0)
#: Buckets of ``turnkeeper_http_request_duration_seconds``.
HTTP_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

_ORIGINS = frozenset(origin.value for origin in Origin)
_SEND_STATES = frozenset(state.value for state in SendState)
_END_STATES = frozenset(state.value for state in END_STATES)
# The invocation denials count the `FailReason` of agent.invoke.
_DENIAL_REASONS = frozenset(
    [
        *(reason.value for reason in EndReason),
        *(reason.value for reason in DeliveryReason),
        *(reason.value for reason in FailReason),
    ]
)

#: Pool statistics as psycopg_pool's ``get_stats()`` returns them.
PoolStats = Callable[[], Mapping[str, int]]
#: How the workers' values of a gauge add up: the sum over the workers alive.
_LIVE_SUM: Final = "livesum"
_POOL_NAME = "turnkeeper_db_pool_connections"
_POOL_HELP = "Connections of the PostgreSQL pool by state (waiting: requests waiting for one)."


def _pool_samples(stats: Mapping[str, int]) -> dict[str, int]:
    """A pool's idle, in-use and maximum connections and its waiting requests."""
    size = stats.get("pool_size", 0)
    idle = stats.get("pool_available", 0)
    return {
        "idle": idle,
        "in_use": max(size - idle, 0),
        "max": stats.get("pool_max", 0),
        "waiting": stats.get("requests_waiting", 0),
    }


def _bounded(value: str, allowed: frozenset[str]) -> str:
    return value if value in allowed else OTHER


class _PoolCollector(Collector):
    """``turnkeeper_db_pool_connections{state}``, read from the pool at scrape time."""

    def __init__(self) -> None:
        self.source: PoolStats | None = None

    def collect(self) -> Iterable[Metric]:
        """The pool's idle, in-use and maximum connections and its waiting requests."""
        family = GaugeMetricFamily(_POOL_NAME, _POOL_HELP, labels=["state"])
        source = self.source
        if source is not None:
            for state, value in _pool_samples(source()).items():
                family.add_metric([state], value)
        yield family


class PrometheusMetrics:
    """The metrics of one process; a `Telemetry` sink that records no spans.

    Args:
        registry: where the metrics are registered (a new one when None, so that two
            applications in one process, as in tests, never share counts).
        pool_stats: the PostgreSQL pool's ``get_stats`` (None: no pool, the memory
            adapter; the pool gauge then has no samples).
        process_metrics: also register the ``process_*``, ``python_gc_*`` and
            ``python_info`` collectors of prometheus-client (never with `shared`: they
            describe one process).
        shared: the directory of metrics shared with the other workers of the server
            (`share_process_metrics` must have been called in this process); None: this
            process's metrics alone.
    """

    #: It records no spans: `turnkeeper.application.telemetry.TelemetryHub` skips it there.
    records_spans = False

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        pool_stats: PoolStats | None = None,
        process_metrics: bool = True,
        shared: Path | None = None,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.shared = shared
        r = self.registry
        self.freshness = Counter(
            "turnkeeper_agent_send_freshness",
            "Answered gated agent sends by freshness outcome (sent, already_sent, held).",
            ["state", "target_type"],
            registry=r,
        )
        self.seq_delta = Histogram(
            "turnkeeper_agent_send_freshness_seq_delta",
            "latest_seq - seen_up_to_seq of held sends.",
            ["target_type"],
            buckets=SEQ_DELTA_BUCKETS,
            registry=r,
        )
        self.idempotency = Counter(
            "turnkeeper_agent_send_idempotency",
            "Agent sends answered already_sent (an idempotent retry).",
            ["target_type"],
            registry=r,
        )
        self.compat = Counter(
            "turnkeeper_agent_send_compat",
            "Agent messages written without freshness (the compatibility path).",
            ["target_type"],
            registry=r,
        )
        self.messages_created = Counter(
            "turnkeeper_messages_created",
            "Messages created, by origin (human, agent, app, system).",
            ["origin"],
            registry=r,
        )
        self.runs_opened = Counter("turnkeeper_runs_opened", "Runs opened.", registry=r)
        self.runs_ended = Counter(
            "turnkeeper_runs_ended",
            "Runs ended, by end state and reason (agent: the agent's own reason).",
            ["state", "reason"],
            registry=r,
        )
        self.run_duration = Histogram(
            "turnkeeper_run_duration_seconds",
            "Seconds from the opening of a run to its end, by end state.",
            ["state"],
            buckets=RUN_DURATION_BUCKETS,
            registry=r,
        )
        self.followups = Counter(
            "turnkeeper_followups",
            "Follow-ups by outcome (queued when accepted, then delivered, absorbed, "
            "deferred, discarded or moved to the follow-on run).",
            ["outcome"],
            registry=r,
        )
        self.invocation_denied = Counter(
            "turnkeeper_invocation_denied",
            "agent.invoke denials (at acceptance and at delivery), by reason.",
            ["reason"],
            registry=r,
        )
        self.http_requests = Counter(
            "turnkeeper_http_requests",
            "HTTP requests by route template and status.",
            ["route", "status"],
            registry=r,
        )
        self.http_duration = Histogram(
            "turnkeeper_http_request_duration_seconds",
            "Seconds to answer an HTTP request, by route template.",
            ["route"],
            buckets=HTTP_DURATION_BUCKETS,
            registry=r,
        )
        self.event_stream_clients = Gauge(
            "turnkeeper_event_stream_clients",
            "Open event streams (GET /v1/events/stream and /v1/agent/events/stream).",
            registry=r,
            multiprocess_mode=_LIVE_SUM,
        )
        self._http_series: dict[tuple[str | None, int], tuple[Counter, Histogram]] = {}
        self._pool = _PoolCollector()
        self._pool.source = pool_stats
        self._scraped = r
        self._pool_gauge: Gauge | None = None
        if shared is None:
            r.register(self._pool)
            if process_metrics:
                ProcessCollector(registry=r)
                PlatformCollector(registry=r)
                GCCollector(registry=r)
        else:
            # Written by each worker (`refresh_pool`), summed over the workers alive.
            self._pool_gauge = Gauge(
                _POOL_NAME, _POOL_HELP, ["state"], registry=r, multiprocess_mode=_LIVE_SUM
            )
            self._scraped = CollectorRegistry()
            self._scraped.register(SharedFamilies(r, shared))
        self._initialize_series()

    def _initialize_series(self) -> None:
        # Series of the bounded vocabularies exist from the start at 0, so that a rate or
        # ratio over them (the held ratio) is defined before the first event.
        for state in _SEND_STATES:
            self.freshness.labels(state=state, target_type=TARGET_TYPE_THREAD)
        self.idempotency.labels(target_type=TARGET_TYPE_THREAD)
        self.compat.labels(target_type=TARGET_TYPE_THREAD)
        for origin in _ORIGINS:
            self.messages_created.labels(origin=origin)
        for outcome in FOLLOWUP_OUTCOMES:
            self.followups.labels(outcome=outcome)

    def use_pool(self, pool_stats: PoolStats | None) -> None:
        """Read ``turnkeeper_db_pool_connections`` from this pool from now on.

        Args:
            pool_stats: the pool's ``get_stats`` (None: no pool).
        """
        self._pool.source = pool_stats
        self.refresh_pool()

    def refresh_pool(self) -> None:
        """Write this worker's pool counts to the shared metrics (nothing otherwise)."""
        source = self._pool.source
        if self._pool_gauge is None or source is None:
            return
        for state, value in _pool_samples(source()).items():
            self._pool_gauge.labels(state=state).set(value)

    async def refresh_pool_every(self, interval: timedelta) -> None:
        """`refresh_pool` now and then once per `interval`, until cancelled.

        Args:
            interval: ``metrics.pool_refresh_seconds``.
        """
        while True:
            self.refresh_pool()
            await asyncio.sleep(interval.total_seconds())

    # -- Telemetry ------------------------------------------------------------------------

    def committed(self, changes: CommittedChanges) -> None:
        """Count a committed unit's messages, runs, follow-ups and invocation denials."""
        for event in changes.events:
            if event.type is EventType.MESSAGE_CREATED:
                message = event.payload.get("message")
                origin = message.get("origin") if isinstance(message, Mapping) else None
                self.messages_created.labels(origin=_bounded(str(origin), _ORIGINS)).inc()
        if changes.runs_opened:
            self.runs_opened.inc(len(changes.runs_opened))
        for run in changes.runs_ended:
            self._run_ended(run.state, run.state_reason, run.updated_at - run.created_at)
        for change in changes.followups:
            outcome = change.outcome if change.outcome in FOLLOWUP_OUTCOMES else OTHER
            self.followups.labels(outcome=outcome).inc(change.count)
        for denial in changes.denials:
            if denial.action in INVOCATION_ACTIONS:
                reason = _bounded(denial.reason, _DENIAL_REASONS)
                self.invocation_denied.labels(reason=reason).inc()

    def _run_ended(self, state: RunState, reason: str | None, duration: timedelta) -> None:
        label = _bounded(state.value, _END_STATES)
        self.runs_ended.labels(state=label, reason=bounded_reason(state, reason)).inc()
        self.run_duration.labels(state=label).observe(max(duration.total_seconds(), 0.0))

    def send_answered(self, answered: SendAnswered) -> None:
        """Count a committed send answer of the freshness gate.

        An ungated answer counts as a message written without the gate only when it
        wrote one (``sent``): a replay (``already_sent``) stored nothing and counts as a
        retry only.
        """
        target = _bounded(answered.target_type, frozenset({TARGET_TYPE_THREAD}))
        state = _bounded(answered.state, _SEND_STATES)
        if answered.gated:
            self.freshness.labels(state=state, target_type=target).inc()
        elif state == SendState.SENT.value:
            self.compat.labels(target_type=target).inc()
        if state == SendState.ALREADY_SENT.value:
            self.idempotency.labels(target_type=target).inc()
        if answered.seq_delta is not None:
            self.seq_delta.labels(target_type=target).observe(answered.seq_delta)

    def span(
        self, name: str, attributes: Mapping[str, AttributeValue] | None = None
    ) -> AbstractContextManager[SpanHandle]:
        """No span: metrics only."""
        return contextlib.nullcontext(NO_SPAN)

    def annotate(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Nothing to annotate: metrics only."""

    # -- the HTTP adapter -----------------------------------------------------------------

    def observe_request(self, route: str | None, status: int, seconds: float) -> None:
        """Count one answered HTTP request.

        Args:
            route: the route template (``/v1/threads/{thread_id}``), None when no route
                matched (counted as ``(unmatched)``, never with the raw path).
            status: the answer's status code.
            seconds: the time to answer.
        """
        key = (route, status)
        series = self._http_series.get(key)
        if series is None:
            # Looked up once per route and status: prometheus-client validates and sorts
            # the labels at every `labels` call. Both are bounded (templates, statuses).
            label = route or UNMATCHED_ROUTE
            series = (
                self.http_requests.labels(route=label, status=str(status)),
                self.http_duration.labels(route=label),
            )
            self._http_series[key] = series
        requests, duration = series
        requests.inc()
        duration.observe(seconds)

    @contextlib.contextmanager
    def event_stream(self) -> Iterator[None]:
        """Count an open event stream for the duration of a block (for the streams).

        Yields:
            Nothing; the gauge is lowered again when the block ends.
        """
        self.event_stream_clients.inc()
        try:
            yield
        finally:
            self.event_stream_clients.dec()

    def exposition(self, accept: str | None = None) -> tuple[bytes, str]:
        """The registry in the format the scraper asked for.

        Args:
            accept: the request's ``Accept`` header (Prometheus text 0.0.4 when absent;
                OpenMetrics or text 1.0.0 when asked for).

        Returns:
            The body and its content type.
        """
        encode, content_type = choose_encoder(accept or "")
        # The worker that answers writes its pool's counts first: they are current.
        self.refresh_pool()
        return encode(self._scraped), content_type


def metrics_of(hub: TelemetryHub) -> PrometheusMetrics | None:
    """The Prometheus sink attached to a hub, if one is.

    Args:
        hub: the services' telemetry.

    Returns:
        The first attached `PrometheusMetrics`, or None.
    """
    for sink in hub.sinks:
        if isinstance(sink, PrometheusMetrics):
            return sink
    return None


def attach_metrics(hub: TelemetryHub, *, pool_stats: PoolStats | None = None) -> PrometheusMetrics:
    """The hub's Prometheus sink, attached now when it has none.

    Args:
        hub: the services' telemetry.
        pool_stats: the pool's ``get_stats``; given, it replaces the sink's source.

    A new sink shares its metrics with the other workers of the server when this
    process is one of them (`shared_directory`).

    Returns:
        The sink.
    """
    metrics = metrics_of(hub)
    if metrics is None:
        metrics = PrometheusMetrics(pool_stats=pool_stats, shared=shared_directory())
        hub.attach(metrics)
    elif pool_stats is not None:
        metrics.use_pool(pool_stats)
    return metrics


__all__ = [
    "FOLLOWUP_OUTCOMES",
    "HTTP_DURATION_BUCKETS",
    "INVOCATION_ACTIONS",
    "OTHER",
    "REASON_AGENT",
    "REASON_NONE",
    "RUN_DURATION_BUCKETS",
    "SEQ_DELTA_BUCKETS",
    "TARGET_TYPE_THREAD",
    "UNMATCHED_ROUTE",
    "PoolStats",
    "PrometheusMetrics",
    "attach_metrics",
    "metrics_of",
]
