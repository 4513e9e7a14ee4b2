"""Wiring of the application: one function builds every service from the ports.

Adapters call `build_services` with their unit-of-work factory, clock and id source;
tests pass the memory adapter and a fake clock. Nothing is built at import time.
"""

from __future__ import annotations

import attrs

from turnkeeper.application.bus import EventBus
from turnkeeper.application.ports import Clock, IdGenerator, TokenSigner, UnitOfWorkFactory
from turnkeeper.application.services.admin import AdminService
from turnkeeper.application.services.agent_send import AgentSendService
from turnkeeper.application.services.conversation import ConversationService
from turnkeeper.application.services.grants import GrantService
from turnkeeper.application.services.identity import IdentityService
from turnkeeper.application.services.live import LiveDelivery
from turnkeeper.application.services.runs import RunsService
from turnkeeper.application.services.tokens import TokenService
from turnkeeper.application.settings import Settings
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
        runs: trigger acceptance, agent feed, run lifecycle, jobs.
        agent_send: agent sends through the freshness gate.
        telemetry: the sinks of spans and committed changes (metrics, traces).
        live: long-polls and event streams.
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
    runs: RunsService
    agent_send: AgentSendService
    telemetry: TelemetryHub
    live: LiveDelivery


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

    Returns:
        The services, with the in-transaction subscribers registered.
    """
    bus = EventBus()
    hub = telemetry if telemetry is not None else TelemetryHub()
    tx = Transactor(uow, settings, clock, hub)
    if waker is None:
        waker = uow.waker if isinstance(uow, ProvidesWaker) else PollingWaker()
    conversation = ConversationService(tx, bus, clock, ids, settings)
    runs = RunsService(tx, bus, clock, ids, settings, signer)
    return Services(
        settings=settings,
        clock=clock,
        ids=ids,
        bus=bus,
        tx=tx,
        uow=uow,
        identity=IdentityService(tx, clock, settings),
        admin=AdminService(tx, clock, ids, settings),
        grants=GrantService(tx, clock, ids),
        tokens=TokenService(tx, clock, ids, settings),
        conversation=conversation,
        runs=runs,
        agent_send=AgentSendService(tx, bus, clock, ids, settings),
        telemetry=hub,
        live=LiveDelivery(conversation, runs, waker, clock, settings),
    )
