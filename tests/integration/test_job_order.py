"""The periodic jobs take due runs in the order of their SQL queries, on both stores.

sql/queries/runs.sql orders the queued expiry by ``created_at`` (LockRunsCreatedBefore),
the cancel timeout by ``cancel_requested_at`` (LockRunsCancelRequestedBefore), the stall
check by ``updated_at`` (LockRunsUpdatedBefore) and the runs of disabled agents by id
(LockActiveRunsOfDisabledAgents), a tie broken by id, each before the LIMIT of
``jobs.batch_size``. Ids fall
here (`DescendingIds`): the run that became due first has the larger id, so a store that
took every due run by id would end them, and write their events, in the other order.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import attrs
import pytest

from tests.support.fakes import DescendingIds, FakeClock
from tests.support.scenario import main_thread, post, runs_of
from tests.support.services import services_over
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.ports import UnitOfWorkFactory
from turnkeeper.application.settings import Settings
from turnkeeper.domain.events import Event, EventType
from turnkeeper.domain.runs import Run, RunState

#: One run per unit of work, and a batch that holds every due run.
BATCH_SIZES = (1, 100)


@pytest.fixture(params=BATCH_SIZES, ids=lambda size: f"batch{size}")
def settings(request: pytest.FixtureRequest) -> Settings:
    """The default settings with ``jobs.batch_size`` set."""
    return attrs.evolve(Settings(), jobs_batch_size=request.param)


@pytest.fixture(name="services")
def falling_id_services(
    uow_factory: UnitOfWorkFactory, settings: Settings, clock: FakeClock
) -> Services:
    """Services whose ids fall: a later run has a smaller id."""
    return services_over(uow_factory, settings, clock, DescendingIds())


@pytest.fixture
async def world(services: Services) -> DemoWorld:
    """The demo world, built through the services."""
    return await build_demo_world(services)


async def open_run(services: Services, world: DemoWorld, channel: str) -> Run:
    """Alex asks Lotse in the main thread of a channel; the queued run."""
    thread_id = main_thread(world, channel)
    await post(services, world, "alex", thread_id, f"ask-{channel}", "lotse")
    (run,) = await runs_of(services, thread_id)
    return run


async def start_runs(services: Services, world: DemoWorld) -> None:
    """Lotse polls and starts every run it was invoked for."""
    lotse = world.principal("lotse")
    page = await services.runs.poll(lotse)
    for delivery in page.deliveries:
        if delivery.event.type is EventType.AGENT_INVOCATION:
            assert delivery.invocation_token is not None
            run_id = uuid.UUID(delivery.event.payload["run_id"])
            await services.runs.start(lotse, run_id, delivery.invocation_token)
    await services.runs.ack(lotse, page.deliveries[-1].event.seq)


async def feed(services: Services, world: DemoWorld, after: int = 0) -> list[Event]:
    """The shared events after a seq as the owner reads them (listEvents), every page."""
    events: list[Event] = []
    while True:
        page = await services.conversation.list_events(
            world.principal("robin"), after=after, limit=services.settings.page_max_limit
        )
        if not page.events:
            return events
        events.extend(page.events)
        after = page.next_after


async def mark(services: Services, world: DemoWorld) -> int:
    """The seq of the newest shared event (where the job's events start)."""
    events = await feed(services, world)
    return events[-1].seq if events else 0


async def ending_order(
    services: Services, world: DemoWorld, after: int, runs: tuple[Run, Run]
) -> list[tuple[EventType, uuid.UUID]]:
    """The run.state_changed and message.updated events of the runs' ends, in feed order.

    Each event is named by its run (a trigger message's event by the run it triggered).
    """
    by_resource = {r.id: r.id for r in runs} | {r.triggering_message_id: r.id for r in runs}
    return [
        (e.type, by_resource[e.resource_id])
        for e in await feed(services, world, after)
        if e.type in (EventType.RUN_STATE_CHANGED, EventType.MESSAGE_UPDATED)
        and e.resource_id in by_resource
    ]


def one_after_the_other(first: Run, second: Run) -> list[tuple[EventType, uuid.UUID]]:
    """The end of `first` (its state, then its trigger's), then the end of `second`."""
    return [
        (EventType.RUN_STATE_CHANGED, first.id),
        (EventType.MESSAGE_UPDATED, first.id),
        (EventType.RUN_STATE_CHANGED, second.id),
        (EventType.MESSAGE_UPDATED, second.id),
    ]


async def ended(services: Services, world: DemoWorld, run: Run) -> tuple[RunState, str | None]:
    """The state and reason of a run, as its trigger's author sees it."""
    view = await services.runs.get(world.principal("alex"), run.id)
    return view.run.state, view.run.state_reason


class TestDueRunsAreTakenInTheirQueriesOrder:
    async def test_queued_expiry_ends_the_run_created_first_first(
        self, services: Services, world: DemoWorld, clock: FakeClock
    ) -> None:
        older = await open_run(services, world, "allgemein")
        clock.advance(1)
        newer = await open_run(services, world, "eskalation")
        assert (older.created_at < newer.created_at, older.id > newer.id) == (True, True)
        clock.advance(services.settings.queued_max_age + timedelta(seconds=1))
        after = await mark(services, world)

        assert await services.runs.expire_queued() == 2

        assert await ending_order(services, world, after, (older, newer)) == (
            one_after_the_other(older, newer)
        )
        for run in (older, newer):
            assert await ended(services, world, run) == (RunState.FAILED, "queued_expired")

    async def test_runs_due_since_the_same_instant_end_by_id(
        self, services: Services, world: DemoWorld, clock: FakeClock
    ) -> None:
        # Each query breaks a tie of its time by id: the second run has the smaller id.
        first = await open_run(services, world, "allgemein")
        second = await open_run(services, world, "eskalation")
        assert (first.created_at == second.created_at, second.id < first.id) == (True, True)
        clock.advance(services.settings.queued_max_age + timedelta(seconds=1))
        after = await mark(services, world)

        assert await services.runs.expire_queued() == 2

        runs = (second, first)
        assert await ending_order(services, world, after, runs) == one_after_the_other(*runs)

    async def test_cancel_timeout_ends_the_run_whose_cancel_was_asked_first_first(
        self, services: Services, world: DemoWorld, clock: FakeClock
    ) -> None:
        alex = world.principal("alex")
        asked_first = await open_run(services, world, "allgemein")
        asked_later = await open_run(services, world, "eskalation")
        await start_runs(services, world)
        await services.runs.cancel(alex, asked_first.id)
        clock.advance(1)
        await services.runs.cancel(alex, asked_later.id)
        assert asked_first.id > asked_later.id
        clock.advance(services.settings.cancel_grace + timedelta(seconds=1))
        after = await mark(services, world)

        assert await services.runs.cancel_timeouts() == 2

        assert await ending_order(services, world, after, (asked_first, asked_later)) == (
            one_after_the_other(asked_first, asked_later)
        )
        for run in (asked_first, asked_later):
            assert await ended(services, world, run) == (RunState.CANCELLED, "cancel_timeout")

    async def test_stall_check_ends_the_run_unchanged_longest_first(
        self, services: Services, world: DemoWorld, clock: FakeClock
    ) -> None:
        unchanged_longer = await open_run(services, world, "allgemein")
        await start_runs(services, world)
        clock.advance(1)
        unchanged_shorter = await open_run(services, world, "eskalation")
        await start_runs(services, world)
        assert unchanged_longer.id > unchanged_shorter.id
        clock.advance(services.settings.stall_after + timedelta(seconds=1))
        after = await mark(services, world)

        assert await services.runs.stall_check() == 2

        runs = (unchanged_longer, unchanged_shorter)
        assert await ending_order(services, world, after, runs) == one_after_the_other(*runs)
        for run in runs:
            assert await ended(services, world, run) == (RunState.FAILED, "stale")

    async def test_the_runs_of_a_disabled_agent_end_by_id(
        self, services: Services, world: DemoWorld, clock: FakeClock
    ) -> None:
        # LockActiveRunsOfDisabledAgents orders by id: here the later run comes first.
        earlier = await open_run(services, world, "allgemein")
        clock.advance(1)
        later = await open_run(services, world, "eskalation")
        assert later.id < earlier.id
        await services.admin.set_agent_config(
            world.principal("robin"), world.principal("lotse").id, enabled=False
        )
        after = await mark(services, world)

        assert await services.runs.end_runs_of_disabled_agents() == 2

        runs = (later, earlier)
        assert await ending_order(services, world, after, runs) == one_after_the_other(*runs)
        for run in runs:
            assert await ended(services, world, run) == (RunState.CANCELLED, "agent_disabled")
