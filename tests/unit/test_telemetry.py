"""The telemetry port, the hub, the transactor's reports and the Prometheus mapping (no I/O)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta

import attrs
import pytest
from prometheus_client import CollectorRegistry

from tests.support.fakes import EPOCH, FakeClock, SequentialIds
from turnkeeper.adapters.memory import MemoryUnitOfWorkFactory
from turnkeeper.adapters.observability.client import ClientMetrics
from turnkeeper.adapters.observability.metrics import PrometheusMetrics
from turnkeeper.application.errors import RetriableConflict
from turnkeeper.application.ports import UnitOfWork
from turnkeeper.application.settings import Settings
from turnkeeper.application.telemetry import (
    NO_SPAN,
    AttributeValue,
    CommittedChanges,
    DenialFact,
    FollowupChange,
    SendAnswered,
    SpanHandle,
    TelemetryHub,
)
from turnkeeper.application.transactions import Transactor, use_case_name
from turnkeeper.domain.errors import NotFound
from turnkeeper.domain.events import EventType, NewEvent
from turnkeeper.domain.runs import Run, RunState
from turnkeeper.domain.world import Space

IDS = SequentialIds()


@attrs.define
class RecordingSink:
    """A sink that keeps what it was given."""

    changes: list[CommittedChanges] = attrs.Factory(list)
    answers: list[SendAnswered] = attrs.Factory(list)
    spans: list[str] = attrs.Factory(list)
    annotations: list[dict[str, AttributeValue]] = attrs.Factory(list)

    def committed(self, changes: CommittedChanges) -> None:
        self.changes.append(changes)

    def send_answered(self, answered: SendAnswered) -> None:
        self.answers.append(answered)

    def span(
        self, name: str, attributes: Mapping[str, AttributeValue] | None = None
    ) -> AbstractContextManager[SpanHandle]:
        @contextmanager
        def opened() -> Iterator[SpanHandle]:
            self.spans.append(name)
            yield NO_SPAN

        return opened()

    def annotate(self, attributes: Mapping[str, AttributeValue]) -> None:
        self.annotations.append(dict(attributes))


class BrokenSink(RecordingSink):
    def committed(self, changes: CommittedChanges) -> None:
        raise RuntimeError("the sink is broken")


def test_a_hub_without_sinks_is_inactive_and_spans_nothing() -> None:
    hub = TelemetryHub()
    assert not hub.active
    with hub.span("anything") as span:
        assert span is NO_SPAN
    hub.committed(CommittedChanges())


def test_a_hub_fans_out_keeps_each_sink_once_and_survives_a_broken_one() -> None:
    hub, broken, kept = TelemetryHub(), BrokenSink(), RecordingSink()
    hub.attach(broken)
    hub.attach(kept)
    hub.attach(kept)
    assert hub.sinks == (broken, kept)
    hub.committed(CommittedChanges())
    hub.send_answered(SendAnswered(state="sent", gated=True))
    with hub.span("outer"):
        hub.annotate({"state": "sent"})
    assert (len(kept.changes), len(kept.answers), kept.spans) == (1, 1, ["outer"])
    assert kept.annotations == [{"state": "sent"}]
    hub.detach(broken)
    assert list(hub.sinks) == [kept]


class MetricsOnlySink(RecordingSink):
    records_spans = False


def test_spans_go_only_to_sinks_that_record_them() -> None:
    hub, metrics, tracer = TelemetryHub(), MetricsOnlySink(), RecordingSink()
    hub.attach(metrics)
    assert hub.active
    assert not hub.records_spans
    with hub.span("skipped") as span:
        assert span is NO_SPAN
    hub.attach(tracer)
    assert hub.records_spans
    with hub.span("kept"):
        pass
    hub.committed(CommittedChanges())
    assert (metrics.spans, tracer.spans) == ([], ["kept"])
    assert (len(metrics.changes), len(tracer.changes)) == (1, 1)
    hub.detach(tracer)
    assert not hub.records_spans


class Service:
    async def serve(self, tx: Transactor) -> str:
        async def work(uow: UnitOfWork) -> str:
            return "done"

        return await tx.run(work)


@pytest.mark.parametrize(
    ("qualname", "expected"),
    [
        ("AgentSendService.send.<locals>.work", "AgentSendService.send"),
        ("RunsService._job.<locals>.work", "RunsService._job"),
        ("plain_function", "plain_function"),
    ],
)
def test_a_use_case_is_named_after_the_method_that_defined_its_work(
    qualname: str, expected: str
) -> None:
    def work() -> None:
        return None

    work.__qualname__ = qualname
    assert use_case_name(work) == expected


def space(name: str) -> Space:
    return Space(id=IDS.new_id(), name=name, created_by=IDS.new_id(), created_at=EPOCH)


async def test_the_transactor_reports_once_after_commit_and_never_on_rollback() -> None:
    hub, sink = TelemetryHub(), RecordingSink()
    hub.attach(sink)
    tx = Transactor(MemoryUnitOfWorkFactory(), Settings(), FakeClock(), hub)
    event = NewEvent(
        type=EventType.THREAD_REOPENED,
        actor_id=IDS.new_id(),
        actor_kind="person",
        space_id=IDS.new_id(),
        channel_id=IDS.new_id(),
        thread_id=None,
        resource_kind="thread",
        resource_id=IDS.new_id(),
        payload={},
        created_at=EPOCH,
    )
    attempts = 0

    async def conflicting(uow: UnitOfWork) -> None:
        nonlocal attempts
        attempts += 1
        await uow.events.append(event)
        await uow.spaces.add(space(f"Support {attempts}"))
        if attempts == 1:
            raise RetriableConflict("deadlock", reason="deadlock_detected")

    await tx.run(conflicting)
    assert attempts == 2
    assert [c.events for c in sink.changes] == [(event,)]

    async def refused(uow: UnitOfWork) -> None:
        await uow.events.append(event)
        raise NotFound()

    with pytest.raises(NotFound):
        await tx.run(refused)

    async def reads(uow: UnitOfWork) -> None:
        await uow.spaces.list_all()

    await tx.read(reads)
    assert len(sink.changes) == 1
    assert (
        sink.spans
        == [
            "test_the_transactor_reports_once_after_commit_and_never_on_rollback",
        ]
        * 3
    )
    assert await Service().serve(tx) == "done"
    assert sink.spans[-1] == "Service.serve"


def run(state: RunState, reason: str | None, seconds: int) -> Run:
    return Run(
        id=IDS.new_id(),
        thread_id=IDS.new_id(),
        agent_id=IDS.new_id(),
        state=state,
        state_reason=reason,
        triggering_message_id=IDS.new_id(),
        triggered_by=IDS.new_id(),
        created_at=EPOCH,
        updated_at=EPOCH + timedelta(seconds=seconds),
    )


def message_event(origin: str) -> NewEvent:
    return NewEvent(
        type=EventType.MESSAGE_CREATED,
        actor_id=IDS.new_id(),
        actor_kind="person",
        space_id=IDS.new_id(),
        channel_id=IDS.new_id(),
        thread_id=IDS.new_id(),
        resource_kind="message",
        resource_id=IDS.new_id(),
        payload={"message": {"origin": origin, "content": "never a label"}},
        created_at=EPOCH,
    )


def sample(metrics: PrometheusMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_committed_changes_become_counts_with_bounded_labels() -> None:
    metrics = PrometheusMetrics(CollectorRegistry(), process_metrics=False)
    failed = run(RunState.FAILED, "stale", 90)
    metrics.committed(
        CommittedChanges(
            events=(message_event("human"), message_event("agent"), message_event("forged")),
            runs_opened=(run(RunState.QUEUED, None, 0),),
            runs_updated=(
                run(RunState.RUNNING, None, 5),
                failed,
                attrs.evolve(failed, version=failed.version + 1),
            ),
            followups=(
                FollowupChange(outcome="queued", count=2),
                FollowupChange(outcome="x", count=1),
            ),
            denials=(
                DenialFact(action="agent.invoke", reason="no_trigger_right"),
                DenialFact(action="message.create", reason="no_grant"),
            ),
        )
    )
    assert sample(metrics, "turnkeeper_messages_created_total", origin="human") == 1
    assert sample(metrics, "turnkeeper_messages_created_total", origin="other") == 1
    assert sample(metrics, "turnkeeper_runs_opened_total") == 1
    assert sample(metrics, "turnkeeper_runs_ended_total", state="failed", reason="stale") == 1
    assert sample(metrics, "turnkeeper_run_duration_seconds_sum", state="failed") == 90
    assert sample(metrics, "turnkeeper_followups_total", outcome="queued") == 2
    assert sample(metrics, "turnkeeper_followups_total", outcome="other") == 1
    assert sample(metrics, "turnkeeper_invocation_denied_total", reason="no_trigger_right") == 1
    assert sample(metrics, "turnkeeper_invocation_denied_total", reason="no_grant") == 0


def test_send_answers_become_the_gate_counts() -> None:
    metrics = PrometheusMetrics(CollectorRegistry(), process_metrics=False)
    for answered in (
        SendAnswered(state="sent", gated=True),
        SendAnswered(state="already_sent", gated=True),
        SendAnswered(state="held", gated=True, seq_delta=4),
        SendAnswered(state="sent", gated=False),
    ):
        metrics.send_answered(answered)
    thread = {"target_type": "thread"}
    for state in ("sent", "already_sent", "held"):
        assert sample(metrics, "turnkeeper_agent_send_freshness_total", state=state, **thread) == 1
    assert sample(metrics, "turnkeeper_agent_send_compat_total", **thread) == 1
    assert sample(metrics, "turnkeeper_agent_send_idempotency_total", **thread) == 1
    assert sample(metrics, "turnkeeper_agent_send_freshness_seq_delta_sum", **thread) == 4


def test_an_ungated_replay_is_counted_as_idempotency_only() -> None:
    # A replay of createMessage, createThread or an ungated send stores nothing: it is no
    # message written without the gate.
    metrics = PrometheusMetrics(CollectorRegistry(), process_metrics=False)
    metrics.send_answered(SendAnswered(state="sent", gated=False))
    metrics.send_answered(SendAnswered(state="already_sent", gated=False))
    thread = {"target_type": "thread"}
    assert sample(metrics, "turnkeeper_agent_send_compat_total", **thread) == 1
    assert sample(metrics, "turnkeeper_agent_send_idempotency_total", **thread) == 1
    for state in ("sent", "already_sent", "held"):
        assert sample(metrics, "turnkeeper_agent_send_freshness_total", state=state, **thread) == 0


def test_an_event_stream_is_counted_while_it_is_open() -> None:
    metrics = PrometheusMetrics(CollectorRegistry(), process_metrics=False)
    with metrics.event_stream():
        assert sample(metrics, "turnkeeper_event_stream_clients") == 1
    assert sample(metrics, "turnkeeper_event_stream_clients") == 0


def test_the_client_counts_partial_held_sends() -> None:
    metrics = ClientMetrics()
    metrics.partial_held("thread")
    metrics.partial_held("somewhere")
    value = metrics.registry.get_sample_value
    assert value("turnkeeper_agent_send_partial_held_total", {"target_type": "thread"}) == 1
    assert value("turnkeeper_agent_send_partial_held_total", {"target_type": "other"}) == 1
