"""Typed settings: every limit, window and threshold of turnkeeper, named and defaulted.

The keys are those of DESIGN.md section 10 (dotted names); `SETTING_KEYS` maps each key
to its attribute. Loading from TOML and the environment lives in `turnkeeper.adapters.config`.
"""

from __future__ import annotations

from datetime import timedelta

import attrs

from turnkeeper.domain.errors import FieldError, ValidationFailed
from turnkeeper.domain.logical_sends import MAX_UTF8_CHAR_BYTES

#: The largest value a 32-bit signed integer holds: a C ``int`` and a PostgreSQL ``integer``.
_INT32_MAX = 2**31 - 1
#: Milliseconds in a second.
_MS_PER_SECOND = 1000
#: The largest count or size of any key. Counts reach C ints (``http.gc_threshold`` is
#: Python's garbage collector threshold, which overflows beyond) and PostgreSQL integers
#: (batch sizes and page limits are bound into SQL).
MAX_COUNT = _INT32_MAX
#: The longest duration of any key, in seconds (about 68 years). `timedelta` holds far
#: longer ones, but a run's deadline or a token's expiry is an instant plus or minus the
#: duration, and `datetime` ends in the year 9999: this bound keeps every such sum valid.
MAX_DURATION_SECONDS = _INT32_MAX
#: The longest ``database.request_timeout``, in seconds: every connection gets it as
#: PostgreSQL's ``statement_timeout``, milliseconds in a 32-bit integer (about 24 days).
MAX_REQUEST_TIMEOUT_SECONDS = _INT32_MAX // _MS_PER_SECOND


@attrs.frozen
class CountRange:
    """The values a count or size key takes, and the attrs validator that holds them.

    `turnkeeper.adapters.config` reads the bounds for its messages, so the range of a key
    is written once.

    Attributes:
        minimum: the smallest value.
        maximum: the largest value.
    """

    minimum: int
    maximum: int = MAX_COUNT

    def __call__(self, instance: object, attribute: attrs.Attribute[int], value: int) -> None:
        """Check one value.

        Args:
            instance: the `Settings` being built.
            attribute: the attribute of the value.
            value: the value.

        Raises:
            ValueError: the value is outside the range; the message names the attribute.
        """
        if value < self.minimum:
            raise ValueError(f"{attribute.name} {_at_least_wording(self.minimum)}")
        if value > self.maximum:
            raise ValueError(f"{attribute.name} must be at most {self.maximum}")


@attrs.frozen
class DurationRange:
    """The values a duration key takes, and the attrs validator that holds them.

    The configuration gives a duration in whole seconds, from `minimum` to `maximum`; a
    program may give any `timedelta` in between, fractions of a second included.

    Attributes:
        zero_allowed: whether 0 is a valid duration (else it must be positive).
        maximum: the longest duration, in whole seconds.
    """

    zero_allowed: bool = False
    maximum: int = MAX_DURATION_SECONDS

    @property
    def minimum(self) -> int:
        """The smallest whole number of seconds in the range: 0 or 1."""
        return 0 if self.zero_allowed else 1

    def __call__(
        self, instance: object, attribute: attrs.Attribute[timedelta], value: timedelta
    ) -> None:
        """Check one value.

        Args:
            instance: the `Settings` being built.
            attribute: the attribute of the value.
            value: the duration.

        Raises:
            ValueError: the value is outside the range; the message names the attribute.
        """
        if value < timedelta(0) or (value == timedelta(0) and not self.zero_allowed):
            raise ValueError(f"{attribute.name} {_at_least_wording(self.minimum)}")
        if value > timedelta(seconds=self.maximum):
            raise ValueError(f"{attribute.name} must be at most {self.maximum} seconds")


def _at_least_wording(minimum: int) -> str:
    if minimum == 0:
        return "must not be negative"
    if minimum == 1:
        return "must be positive"
    return f"must be at least {minimum}"


class SettingsConflict(ValueError):
    """Two keys whose values are each in range but not together.

    Args:
        key: the dotted key whose value is refused.
        detail: what is wrong with it, naming the other key.
    """

    def __init__(self, key: str, detail: str) -> None:
        super().__init__(f"{key} {detail}")
        self.key = key
        self.detail = detail


_positive = CountRange(minimum=1)
_non_negative = CountRange(minimum=0)
#: A chunk must hold the longest UTF-8 character, or some content could not be split.
_holds_a_character = CountRange(minimum=MAX_UTF8_CHAR_BYTES)
_positive_duration = DurationRange()
_non_negative_duration = DurationRange(zero_allowed=True)
_statement_timeout = DurationRange(maximum=MAX_REQUEST_TIMEOUT_SECONDS)


def _seconds(value: int) -> timedelta:
    return timedelta(seconds=value)


#: The values of ``log.level``, lowest first.
LOG_LEVELS = ("debug", "info", "warning", "error")
#: The values of ``log.format``: ``auto`` writes console lines on a terminal and JSON
#: lines otherwise.
LOG_FORMATS = ("auto", "json", "console")
#: The values of ``http.parser``: ``auto`` takes httptools when it is installed, else h11.
HTTP_PARSERS = ("auto", "httptools", "h11")
#: The values of ``http.event_loop``: ``auto`` takes uvloop when it is installed.
HTTP_EVENT_LOOPS = ("auto", "uvloop", "asyncio")
#: The metadata key of a text setting's allowed values (read by the configuration loader).
CHOICES = "choices"


@attrs.frozen(kw_only=True)
class Settings:
    """All configuration of turnkeeper.

    Durations are `timedelta` values; the configuration gives them as whole seconds
    (`turnkeeper.adapters.config`). Each attribute documents its dotted key. A count
    holds its `CountRange` (at most `MAX_COUNT`), a duration its `DurationRange` (at
    most `MAX_DURATION_SECONDS`, ``database.request_timeout`` at most
    `MAX_REQUEST_TIMEOUT_SECONDS`), and ``database.pool_min_size`` must not exceed
    ``database.pool_max_size``; a value out of range raises ValueError naming it
    (`SettingsConflict` for a rule between two keys).

    Attributes:
        rl_message_per_minute: ``ratelimit.rl.message.per_minute``, refill of rl.message.
        rl_message_burst: ``ratelimit.rl.message.burst``, capacity of rl.message.
        tx_retry_max: ``database.tx_retry_max``, retries of a unit on deadlock or
            serialization failure.
        deny_aggregate_window: ``audit.deny_aggregate_window``, how long one audit row
            aggregates the denials of a principal, action and reason.
        max_content_bytes: ``message.max_content_bytes``, UTF-8 size limit of content.
        cancel_grace: ``agent.cancel_grace``, how long an agent has to confirm a cancel.
        invocation_token_ttl: ``agent.invocation_token_ttl``, lifetime of a token.
        queued_max_age: ``run.queued_max_age``, how long a run may stay queued.
        stall_after: ``run.stall_after``, how long without a change before a run is stale.
        visible_miss_batch: ``freshness.visible_miss_batch``, rows per visibility batch.
        visible_miss_batches: ``freshness.visible_miss_batches``, batches at most.
        freshness_required_for_agents: ``freshness.required_for_agents``.
        max_source_message_ids: ``freshness.max_source_message_ids``, the most
            ``source_message_ids`` one agent send may carry.
        visible_miss_retries: ``freshness.visible_miss_retries``, how often a private-gap
            send repeats its visibility check after its second compare-and-set missed.
        max_body_bytes: ``http.max_body_bytes``, request body limit.
        page_default_limit: ``page.default_limit``, items of a page when none is asked.
        page_max_limit: ``page.max_limit``, the most items one page returns.
        pool_min_size: ``database.pool_min_size``, connections the pool keeps open.
        pool_max_size: ``database.pool_max_size``, connections at most (one per unit).
        jobs_batch_size: ``jobs.batch_size``, runs one job pass takes per unit of work.
        jobs_interval: ``jobs.interval``, the pause between two passes of the job runner.
        token_last_used_interval: ``auth.token_last_used_interval``, how old the recorded
            last use of an API token must be before a request records a new one (0: every
            request writes it).
        token_label_max_chars: ``auth.token_label_max_chars``, the longest label of an
            API token, in characters.
        metrics_enabled: ``metrics.enabled``, serve ``GET /metrics`` (else it is 404).
        metrics_pool_refresh: ``metrics.pool_refresh_seconds``, how often each worker of
            a several-worker server writes its pool's connection counts for ``/metrics``.
        log_level: ``log.level``, the lowest level written (`LOG_LEVELS`).
        log_format: ``log.format``, ``json``, ``console`` or ``auto`` (`LOG_FORMATS`).
        request_timeout: ``database.request_timeout``, how long one unit of work may take,
            waiting for a pooled connection included (beyond: 503 ``unavailable``).
        reconnect_max_wait: ``database.reconnect_max_wait``, the longest pause
            between two attempts of the pool to reconnect to a lost database (also the
            ``Retry-After`` of a 503 ``unavailable``).
        readiness_timeout: ``database.readiness_timeout``, how long /readyz waits for the
            database before it answers 503.
        header_timeout: ``http.header_timeout``, how long a connection may take to send
            the headers of a request before the server closes it.
        body_timeout: ``http.body_timeout``, how long a connection may take to send the
            body of a request after its headers (beyond: 408, and the server closes it).
        max_header_bytes: ``http.max_header_bytes``, how many bytes a connection may
            send before a request's headers are complete (beyond: 431, and the server
            closes it).
        max_connections: ``http.max_connections``, HTTP connections one process keeps
            open at most.
        shutdown_timeout: ``http.shutdown_timeout``, how long a stopping server waits
            for its open answers (streams ended first) before it cancels them and closes
            their connections.
        max_json_depth: ``http.max_json_depth``, deepest nesting of arrays and objects
            in a request body.
        http_workers: ``http.workers``, worker processes of ``turnkeeper serve`` sharing
            its listening socket (1: the server is one process).
        http_parser: ``http.parser``, the HTTP/1.1 parser of ``serve`` (`HTTP_PARSERS`).
        http_event_loop: ``http.event_loop``, the event loop of ``serve``
            (`HTTP_EVENT_LOOPS`).
        http_gc_threshold: ``http.gc_threshold``, allocations of container objects (net
            of deallocations) between two young-generation collections of Python's
            garbage collector in ``serve``, whose start-up objects are frozen.
        max_client_id_length: ``message.max_client_id_length``, characters of a client
            id (``client_msg_id``, ``client_message_id``) at most.
        max_handle_length: ``principal.max_handle_length``, characters of a handle at most.
        stream_max_wait: ``stream.max_wait_seconds``, the longest ``wait`` a long-poll
            may ask for.
        stream_heartbeat: ``stream.heartbeat_seconds``, the pause between two heartbeat
            comments of an idle event stream.
        stream_max_per_principal: ``stream.max_per_principal``, event streams one
            principal may hold open on one server process.
        stream_watch_interval_ms: ``stream.watch_interval_ms``, milliseconds between two
            looks of a server process for newly readable events while readers wait
            (the wake-up delay of long-polls and streams on PostgreSQL).
        mcp_chunk_bytes: ``mcp.chunk_bytes``, the most UTF-8 bytes of one message that
            ``turnkeeper mcp`` posts for ``send_message``; longer content goes in parts.
        mcp_wait: ``mcp.wait_seconds``, how long ``wait_for_work`` waits when the call
            names no ``timeout_seconds``.
        mcp_max_wait: ``mcp.max_wait_seconds``, the longest ``timeout_seconds`` a
            ``wait_for_work`` call may ask for.
        mcp_max_sessions: ``mcp.max_sessions``, MCP sessions one ``turnkeeper mcp --http``
            process keeps open at once (an open one is never closed to make room; a
            further one is refused).
        mcp_max_pending_sends: ``mcp.max_pending_sends``, incomplete logical sends one
            ``turnkeeper mcp`` session remembers (by thread and content) to complete with
            their own logical id; beyond, the oldest is forgotten.
    """

    rl_message_per_minute: int = attrs.field(default=120, validator=_non_negative)
    rl_message_burst: int = attrs.field(default=30, validator=_positive)
    tx_retry_max: int = attrs.field(default=5, validator=_non_negative)
    deny_aggregate_window: timedelta = attrs.field(
        default=_seconds(300), validator=_positive_duration
    )
    max_content_bytes: int = attrs.field(default=65536, validator=_positive)
    cancel_grace: timedelta = attrs.field(default=_seconds(60), validator=_positive_duration)
    invocation_token_ttl: timedelta = attrs.field(
        default=_seconds(900), validator=_positive_duration
    )
    queued_max_age: timedelta = attrs.field(default=_seconds(600), validator=_positive_duration)
    stall_after: timedelta = attrs.field(default=_seconds(1800), validator=_positive_duration)
    visible_miss_batch: int = attrs.field(default=64, validator=_positive)
    visible_miss_batches: int = attrs.field(default=8, validator=_positive)
    freshness_required_for_agents: bool = True
    max_source_message_ids: int = attrs.field(default=32, validator=_positive)
    visible_miss_retries: int = attrs.field(default=1, validator=_non_negative)
    max_body_bytes: int = attrs.field(default=1048576, validator=_positive)
    page_default_limit: int = attrs.field(default=50, validator=_positive)
    page_max_limit: int = attrs.field(default=500, validator=_positive)
    pool_min_size: int = attrs.field(default=1, validator=_positive)
    pool_max_size: int = attrs.field(default=10, validator=_positive)
    jobs_batch_size: int = attrs.field(default=100, validator=_positive)
    jobs_interval: timedelta = attrs.field(default=_seconds(5), validator=_positive_duration)
    token_last_used_interval: timedelta = attrs.field(
        default=_seconds(60), validator=_non_negative_duration
    )
    token_label_max_chars: int = attrs.field(default=100, validator=_positive)
    metrics_enabled: bool = True
    metrics_pool_refresh: timedelta = attrs.field(default=_seconds(1), validator=_positive_duration)
    log_level: str = attrs.field(
        default="info",
        validator=attrs.validators.in_(LOG_LEVELS),
        metadata={CHOICES: LOG_LEVELS},
    )
    log_format: str = attrs.field(
        default="auto",
        validator=attrs.validators.in_(LOG_FORMATS),
        metadata={CHOICES: LOG_FORMATS},
    )
    request_timeout: timedelta = attrs.field(default=_seconds(5), validator=_statement_timeout)
    reconnect_max_wait: timedelta = attrs.field(default=_seconds(2), validator=_positive_duration)
    readiness_timeout: timedelta = attrs.field(default=_seconds(2), validator=_positive_duration)
    header_timeout: timedelta = attrs.field(default=_seconds(10), validator=_positive_duration)
    body_timeout: timedelta = attrs.field(default=_seconds(30), validator=_positive_duration)
    max_header_bytes: int = attrs.field(default=65536, validator=_positive)
    max_connections: int = attrs.field(default=1000, validator=_positive)
    shutdown_timeout: timedelta = attrs.field(default=_seconds(30), validator=_positive_duration)
    max_json_depth: int = attrs.field(default=32, validator=_positive)
    http_workers: int = attrs.field(default=1, validator=_positive)
    http_parser: str = attrs.field(
        default="auto",
        validator=attrs.validators.in_(HTTP_PARSERS),
        metadata={CHOICES: HTTP_PARSERS},
    )
    http_event_loop: str = attrs.field(
        default="auto",
        validator=attrs.validators.in_(HTTP_EVENT_LOOPS),
        metadata={CHOICES: HTTP_EVENT_LOOPS},
    )
    http_gc_threshold: int = attrs.field(default=7000, validator=_positive)
    max_client_id_length: int = attrs.field(default=256, validator=_positive)
    max_handle_length: int = attrs.field(default=64, validator=_positive)
    stream_max_wait: timedelta = attrs.field(default=_seconds(60), validator=_positive_duration)
    stream_heartbeat: timedelta = attrs.field(default=_seconds(15), validator=_positive_duration)
    stream_max_per_principal: int = attrs.field(default=8, validator=_positive)
    stream_watch_interval_ms: int = attrs.field(default=10, validator=_positive)
    mcp_chunk_bytes: int = attrs.field(default=4000, validator=_holds_a_character)
    mcp_wait: timedelta = attrs.field(default=_seconds(30), validator=_positive_duration)
    mcp_max_wait: timedelta = attrs.field(default=_seconds(300), validator=_positive_duration)
    mcp_max_sessions: int = attrs.field(default=100, validator=_positive)
    mcp_max_pending_sends: int = attrs.field(default=64, validator=_positive)

    def __attrs_post_init__(self) -> None:
        """Check the rules between keys; each key's own range is its validator's.

        Raises:
            SettingsConflict: ``database.pool_min_size`` exceeds ``database.pool_max_size``
                (the pool would refuse to open, after the database was migrated).
        """
        if self.pool_min_size > self.pool_max_size:
            raise SettingsConflict(
                "database.pool_min_size",
                f"must not exceed database.pool_max_size ({self.pool_max_size}), "
                f"got {self.pool_min_size}",
            )

    @property
    def default_page_size(self) -> int:
        """Items of a page whose request names no limit.

        ``page.default_limit``, but never more than ``page.max_limit``: a page without a
        limit holds no more than a client may ask for.
        """
        return min(self.page_default_limit, self.page_max_limit)

    def page_size(self, limit: int | None) -> int:
        """The size of a requested page.

        Args:
            limit: the request's ``limit``, None when absent.

        Returns:
            `default_page_size` when absent, else the limit.

        Raises:
            ValidationFailed: ``/limit`` out_of_range below 1 or above ``page.max_limit``.
        """
        if limit is None:
            return self.default_page_size
        if limit < 1 or limit > self.page_max_limit:
            raise ValidationFailed([FieldError(pointer="/limit", code="out_of_range")])
        return limit


#: Dotted configuration key -> attribute of `Settings`.
SETTING_KEYS: dict[str, str] = {
    "ratelimit.rl.message.per_minute": "rl_message_per_minute",
    "ratelimit.rl.message.burst": "rl_message_burst",
    "database.tx_retry_max": "tx_retry_max",
    "audit.deny_aggregate_window": "deny_aggregate_window",
    "message.max_content_bytes": "max_content_bytes",
    "agent.cancel_grace": "cancel_grace",
    "agent.invocation_token_ttl": "invocation_token_ttl",
    "run.queued_max_age": "queued_max_age",
    "run.stall_after": "stall_after",
    "freshness.visible_miss_batch": "visible_miss_batch",
    "freshness.visible_miss_batches": "visible_miss_batches",
    "freshness.required_for_agents": "freshness_required_for_agents",
    "freshness.max_source_message_ids": "max_source_message_ids",
    "freshness.visible_miss_retries": "visible_miss_retries",
    "http.max_body_bytes": "max_body_bytes",
    "page.default_limit": "page_default_limit",
    "page.max_limit": "page_max_limit",
    "database.pool_min_size": "pool_min_size",
    "database.pool_max_size": "pool_max_size",
    "jobs.batch_size": "jobs_batch_size",
    "jobs.interval": "jobs_interval",
    "auth.token_last_used_interval": "token_last_used_interval",
    "auth.token_label_max_chars": "token_label_max_chars",
    "metrics.enabled": "metrics_enabled",
    "metrics.pool_refresh_seconds": "metrics_pool_refresh",
    "log.level": "log_level",
    "log.format": "log_format",
    "database.request_timeout": "request_timeout",
    "database.reconnect_max_wait": "reconnect_max_wait",
    "database.readiness_timeout": "readiness_timeout",
    "http.header_timeout": "header_timeout",
    "http.max_header_bytes": "max_header_bytes",
    "http.body_timeout": "body_timeout",
    "http.max_connections": "max_connections",
    "http.shutdown_timeout": "shutdown_timeout",
    "http.max_json_depth": "max_json_depth",
    "http.workers": "http_workers",
    "http.parser": "http_parser",
    "http.event_loop": "http_event_loop",
    "http.gc_threshold": "http_gc_threshold",
    "message.max_client_id_length": "max_client_id_length",
    "principal.max_handle_length": "max_handle_length",
    "stream.max_wait_seconds": "stream_max_wait",
    "stream.heartbeat_seconds": "stream_heartbeat",
    "stream.max_per_principal": "stream_max_per_principal",
    "stream.watch_interval_ms": "stream_watch_interval_ms",
    "mcp.chunk_bytes": "mcp_chunk_bytes",
    "mcp.wait_seconds": "mcp_wait",
    "mcp.max_wait_seconds": "mcp_max_wait",
    "mcp.max_sessions": "mcp_max_sessions",
    "mcp.max_pending_sends": "mcp_max_pending_sends",
}
