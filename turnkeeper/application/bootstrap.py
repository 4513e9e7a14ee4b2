"""Wiring of the application: one function builds every service from the ports.

Adapters call `build_services` with their unit-of-work factory, clock and id source;
tests pass the memory adapter and a fake clock. Nothing is built at import time. The
in-transaction subscribers are registered here, and only here, in the order they run.
"""

from __future__ import annotations

import attrs

from turnkeeper.application.audit import DenialAudit
from turnkeeper.application.bus import EventBus, MessagePosted
from turnkeeper.application.event_factory import EventFactory
from turnkeeper.application.ports import Clock, IdGenerator, TokenSigner, UnitOfWorkFactory
from turnkeeper.application.services.admin import AdminService
from turnkeeper.application.services.agent_send import AgentSendService
from turnkeeper.application.services.conversation import ConversationService
from turnkeeper.application.services.grants import GrantService
from turnkeeper.application.services.identity import IdentityService
from turnkeeper.application.services.live import LiveDelivery
from turnkeeper.application.services.messages_append import MessageAppender
from turnkeeper.application.services.runs.agent_feed import AgentFeedService
from turnkeeper.application.services.runs.answers import check_named_run
from turnkeeper.application.services.runs.changes import RunChanges
from turnkeeper.application.services.runs.lifecycle import RunLifecycleService
from turnkeeper.application.services.runs.opening import RunOpener
from turnkeeper.application.services.runs.run_end import RunEnder
from turnkeeper.application.services.runs.run_jobs import RunJobsService
from turnkeeper.application.services.runs.run_patch import RunPatchService
from turnkeeper.application.services.runs.service import RunsService
from turnkeeper.application.services.runs.trigger import TriggerDecision
from turnkeeper.application.services.tokens import TokenService
from turnkeeper.application.settings import Settings
from turnkeeper.application.stream_places import ProvidesStreamPlaces
from turnkeeper.application.telemetry import TelemetryHub
from turnkeeper.application.transactions import Transactor
from turnkeeper.application.wakeup import EventWaker, PollingWaker, ProvidesWaker


@attrs.frozen(kw_only=True)
class Services:
    """Every service of turnkeeper, sharing one transactor and one bus.

    Attributes:
        settings: the configuration in force.
        clock: the clock port.
        ids: the id port.
        bus: the in-transaction event bus (subscribers register here).
        tx: the transactor (unit of work, retries, denial audit).
        uow: the unit-of-work factory (for readiness checks and tests).
        identity: token authentication.
        admin: owner administration.
        grants: the owner's grants (one level per principal and resource, listed).
        tokens: the owner's API tokens (issued, listed, revoked).
        conversation: threads, messages, history, events.
        agent_send: agent sends through the freshness gate.
        telemetry: the sinks of spans and committed changes (metrics, traces).
        live: long-polls and event streams.
        agent_feed: the agent's personal events, their ack, the heartbeat.
        run_lifecycle: read, start, await input, resume, finish and cancel a run.
        run_patch: the agent adapter's acknowledgement of follow-ups.
        run_jobs: the periodic jobs that end runs.
        runs: one facade over the four runs services above.
    """

    settings: Settings
    clock: Clock
    ids: IdGenerator
    bus: EventBus
    tx: Transactor
    uow: UnitOfWorkFactory
    identity: IdentityService
    admin: AdminService
    grants: GrantService
    tokens: TokenService
    conversation: ConversationService
    agent_send: AgentSendService
    telemetry: TelemetryHub
    live: LiveDelivery
    agent_feed: AgentFeedService
    run_lifecycle: RunLifecycleService
    run_patch: RunPatchService
    run_jobs: RunJobsService
    runs: RunsService


def build_services(
    uow: UnitOfWorkFactory,
    settings: Settings,
    clock: Clock,
    ids: IdGenerator,
    signer: TokenSigner,
    telemetry: TelemetryHub | None = None,
    *,
    waker: EventWaker | None = None,
) -> Services:
    """Build every service over the given ports.

    Args:
        uow: opens units of work (memory or PostgreSQL).
        settings: the configuration.
        clock: the time source.
        ids: the UUIDv7 source.
        signer: signs and verifies invocation tokens.
        telemetry: the sinks of spans and committed changes; a new hub without sinks
            when None (the adapters attach Prometheus metrics and traces to it).
        waker: wakes waiting readers after commits; when None, the factory's own
            (`ProvidesWaker`), else a `PollingWaker`.

    The places of event streams (``stream.max_per_principal``) are the factory's own
    (`ProvidesStreamPlaces`: shared by every process of its store), else this process's.

    Returns:
        The services, with the in-transaction subscribers registered.
    """
    bus = EventBus()
    hub = telemetry if telemetry is not None else TelemetryHub()
    tx = Transactor(uow, settings, clock, hub)
    if waker is None:
        waker = uow.waker if isinstance(uow, ProvidesWaker) else PollingWaker()
    events = EventFactory(clock)
    audit = DenialAudit(clock, settings)
    appender = MessageAppender(bus, events, clock, ids, settings)
    changes = RunChanges(events)
    opener = RunOpener(appender, changes, events, clock, ids)
    ender = RunEnder(opener, changes, events, audit, clock)
    trigger = TriggerDecision(opener, changes, events, audit, clock)
    # The subscribers of a new message, in order: an agent's answer naming a run it may
    # not answer in vetoes the unit before anything else; then the trigger decision.
    bus.subscribe(MessagePosted, check_named_run)
    bus.subscribe(MessagePosted, trigger.on_message_posted)
    agent_feed = AgentFeedService(tx, ender, changes, audit, clock, ids, settings, signer)
    run_lifecycle = RunLifecycleService(
        tx, ender, changes, events, clock, signer, settings.token_last_used_interval
    )
    run_patch = RunPatchService(tx, changes, clock, settings.token_last_used_interval)
    run_jobs = RunJobsService(tx, ender, clock, settings)
    runs = RunsService(agent_feed, run_lifecycle, run_patch, run_jobs)
    conversation = ConversationService(tx, appender, events, clock, ids, settings)
    identity = IdentityService(tx, clock, settings)
    return Services(
        settings=settings,
        clock=clock,
        ids=ids,
        bus=bus,
        tx=tx,
        uow=uow,
        identity=identity,
        admin=AdminService(tx, clock, ids, settings),
        grants=GrantService(tx, clock, ids),
        tokens=TokenService(tx, clock, ids, settings),
        conversation=conversation,
        agent_send=AgentSendService(tx, appender, events, clock, settings),
        agent_feed=agent_feed,
        run_lifecycle=run_lifecycle,
        run_patch=run_patch,
        run_jobs=run_jobs,
        runs=runs,
        telemetry=hub,
        live=LiveDelivery(
            conversation,
            runs,
            identity,
            waker,
            clock,
            settings,
            uow.stream_places if isinstance(uow, ProvidesStreamPlaces) else None,
        ),
    )
