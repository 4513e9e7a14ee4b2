"""The telemetry port: what the application reports about committed changes and spans.

The application never counts anything itself and never imports a metrics or tracing
library: the `Transactor` hands every committed unit's changes to a `Telemetry` sink
(`CommittedChanges`, derived from what the unit wrote, so a rolled-back or retried
attempt reports nothing), the freshness gate reports each answered send after its
commit (`SendAnswered`), and use cases run inside spans. The adapters decide what
becomes of it: Prometheus counters (`turnkeeper.adapters.observability.metrics`),
OpenTelemetry spans (`turnkeeper.adapters.observability.tracing`), or nothing.

Nothing handed to a sink carries message content or a token: events carry message
documents (whose content a sink must not read; the Prometheus adapter reads only the
origin), runs carry ids and states.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Protocol

import attrs

from turnkeeper.application.logs import get_logger
from turnkeeper.domain.events import NewEvent
from turnkeeper.domain.finish import bounded_reason
from turnkeeper.domain.runs import END_STATES, Run

#: A span attribute value (OpenTelemetry's primitive types).
AttributeValue = str | int | float | bool

_log = get_logger("turnkeeper.telemetry")
#: The logger of the lines of runs opened and ended (docs/operations.md).
_runs_log = get_logger("turnkeeper.runs")


@attrs.frozen(kw_only=True)
class FollowupChange:
    """Follow-ups of one run that reached one outcome in a unit.

    Attributes:
        outcome: ``queued`` (accepted), ``delivered``, ``absorbed``, ``deferred``,
            ``discarded`` or ``moved`` (queued again on the follow-on run).
        count: how many follow-ups.
    """

    outcome: str
    count: int


@attrs.frozen(kw_only=True)
class DenialFact:
    """An audited denial written inside a unit (agent.invoke, run.followup.create ...).

    Attributes:
        action: the refused action.
        reason: the deny reason (a bounded vocabulary of the domain).
    """

    action: str
    reason: str


@attrs.frozen(kw_only=True)
class CommittedChanges:
    """What one unit of work wrote, reported once, after its commit succeeded.

    Attributes:
        events: the events appended, in order.
        runs_opened: the runs added.
        runs_updated: every stored state of a run, in order (a run ends in the update
            whose state is an end state).
        followups: follow-up outcomes.
        denials: denials audited inside the unit.
    """

    events: tuple[NewEvent, ...] = ()
    runs_opened: tuple[Run, ...] = ()
    runs_updated: tuple[Run, ...] = ()
    followups: tuple[FollowupChange, ...] = ()
    denials: tuple[DenialFact, ...] = ()

    @property
    def runs_ended(self) -> tuple[Run, ...]:
        """The runs the unit ended, each once, as stored by the update that ended it."""
        ended: dict[uuid.UUID, Run] = {}
        for run in self.runs_updated:
            if run.state in END_STATES and run.id not in ended:
                ended[run.id] = run
        return tuple(ended.values())

    @property
    def empty(self) -> bool:
        """True when the unit wrote none of the reported facts."""
        return not (
            self.events or self.runs_opened or self.runs_updated or self.followups or self.denials
        )


@attrs.frozen(kw_only=True)
class SendAnswered:
    """One committed answer of the freshness gate (POST /v1/agent/send).

    Attributes:
        state: ``sent``, ``already_sent`` or ``held``.
        gated: the request carried freshness (False: the compatibility path).
        seq_delta: held only: ``latest_seq - seen_up_to_seq``.
        target_type: the kind of target (``thread``).
    """

    state: str
    gated: bool
    seq_delta: int | None = None
    target_type: str = "thread"


class SpanHandle(Protocol):
    """The span a use case or request runs in."""

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Add attributes (ids, states, seqs; never content or tokens)."""
        ...

    def set_name(self, name: str) -> None:
        """Rename the span (a request's route template is known only after routing)."""
        ...


class Telemetry(Protocol):
    """A sink of the application's operational facts; every method must be cheap.

    A sink must not raise: `TelemetryHub` logs and swallows whatever one raises, because
    a change that committed must be answered as committed.
    """

    def committed(self, changes: CommittedChanges) -> None:
        """Report the changes of a unit that committed (never called on rollback).

        Args:
            changes: what the unit wrote.
        """
        ...

    def send_answered(self, answered: SendAnswered) -> None:
        """Report a committed answer of the freshness gate.

        Args:
            answered: the outcome's low-cardinality facts.
        """
        ...

    def span(
        self, name: str, attributes: Mapping[str, AttributeValue] | None = None
    ) -> AbstractContextManager[SpanHandle]:
        """Run a block inside a span, the current one becoming its parent.

        Args:
            name: the span name (a use case, ``AgentSendService.send``; a request,
                ``POST /v1/agent/send``).
            attributes: attributes known at the start.

        Returns:
            A context manager yielding the span.
        """
        ...

    def annotate(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Add attributes to the current span (a no-op outside one).

        Args:
            attributes: ids, states and seqs; never content or tokens.
        """
        ...


class _NoSpan:
    """The span of a sink that records none."""

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Drop the attributes."""

    def set_name(self, name: str) -> None:
        """Drop the name."""


NO_SPAN: SpanHandle = _NoSpan()


class _SpanGroup:
    """The spans of several sinks, driven as one."""

    def __init__(self, spans: list[SpanHandle]) -> None:
        self._spans = spans

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Add the attributes to every span."""
        for span in self._spans:
            span.set_attributes(attributes)

    def set_name(self, name: str) -> None:
        """Rename every span."""
        for span in self._spans:
            span.set_name(name)


def log_runs(changes: CommittedChanges) -> None:
    """One ``run_opened`` line per run a committed unit opened, one ``run_ended`` per end.

    Args:
        changes: the unit's committed changes.
    """
    for run in changes.runs_opened:
        _runs_log.info("run_opened", run_id=str(run.id), agent_id=str(run.agent_id))
    for run in changes.runs_ended:
        # The agent's own reason is free text: the line names only that it gave one.
        _runs_log.info(
            "run_ended",
            run_id=str(run.id),
            state=run.state.value,
            reason=bounded_reason(run.state, run.state_reason),
        )


class TelemetryHub:
    """The `Telemetry` of a process: fans every fact out to the attached sinks.

    Without sinks it does nothing and costs nothing (`active` is False, so the
    `Transactor` does not even record what a unit writes). A sink that raises is logged
    and skipped.

    Example:
        >>> hub = TelemetryHub()
        >>> hub.attach(prometheus_metrics)  # doctest: +SKIP
    """

    def __init__(self) -> None:
        self._sinks: list[Telemetry] = []
        self._span_sinks: list[Telemetry] = []

    @property
    def sinks(self) -> tuple[Telemetry, ...]:
        """The attached sinks, in attachment order."""
        return tuple(self._sinks)

    @property
    def active(self) -> bool:
        """True when at least one sink is attached."""
        return bool(self._sinks)

    @property
    def records_spans(self) -> bool:
        """True when a sink that records spans is attached.

        A sink records spans unless it says otherwise with a ``records_spans`` attribute
        that is False (the Prometheus metrics): callers skip building a span's name and
        attributes when none would be kept.
        """
        return bool(self._span_sinks)

    def attach(self, sink: Telemetry) -> None:
        """Attach a sink (a sink attached twice is kept once).

        Args:
            sink: the sink.
        """
        if all(existing is not sink for existing in self._sinks):
            self._sinks.append(sink)
        self._span_sinks = _span_sinks(self._sinks)

    def detach(self, sink: Telemetry) -> None:
        """Detach a sink (nothing happens when it is not attached).

        Args:
            sink: the sink.
        """
        self._sinks = [existing for existing in self._sinks if existing is not sink]
        self._span_sinks = _span_sinks(self._sinks)

    def committed(self, changes: CommittedChanges) -> None:
        """Log the runs a committed unit opened and ended, and hand its changes to every sink.

        Logged here, after the commit, as the sinks count: an attempt that was rolled back
        and retried (a deadlock) logs nothing.
        """
        log_runs(changes)
        for sink in self._sinks:
            try:
                sink.committed(changes)
            except Exception:
                _log.exception("telemetry_sink_failed", sink=type(sink).__name__)

    def send_answered(self, answered: SendAnswered) -> None:
        """Hand a committed send answer to every sink."""
        for sink in self._sinks:
            try:
                sink.send_answered(answered)
            except Exception:
                _log.exception("telemetry_sink_failed", sink=type(sink).__name__)

    @contextlib.contextmanager
    def span(
        self, name: str, attributes: Mapping[str, AttributeValue] | None = None
    ) -> Iterator[SpanHandle]:
        """A span in every sink that records spans, nested in that order; else `NO_SPAN`."""
        if not self._span_sinks:
            yield NO_SPAN
            return
        with contextlib.ExitStack() as stack:
            spans = [stack.enter_context(sink.span(name, attributes)) for sink in self._span_sinks]
            yield spans[0] if len(spans) == 1 else _SpanGroup(spans)

    def annotate(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Add attributes to the current span of every sink."""
        for sink in self._sinks:
            try:
                sink.annotate(attributes)
            except Exception:
                _log.exception("telemetry_sink_failed", sink=type(sink).__name__)


def _span_sinks(sinks: list[Telemetry]) -> list[Telemetry]:
    return [sink for sink in sinks if getattr(sink, "records_spans", True)]


__all__ = [
    "NO_SPAN",
    "AttributeValue",
    "CommittedChanges",
    "DenialFact",
    "FollowupChange",
    "SendAnswered",
    "SpanHandle",
    "Telemetry",
    "TelemetryHub",
]
