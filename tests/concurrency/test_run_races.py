"""Races around runs on real concurrent units: acceptance, finish against cancel, jobs."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from tests.support.fakes import FakeClock
from tests.support.scenario import shared_events
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.domain.errors import InvalidStateTransition
from turnkeeper.domain.events import EventType
from turnkeeper.domain.messaging import MessageDraft, TriggerState
from turnkeeper.domain.runs import END_STATES, RunState

#: Rounds of each race.
ROUNDS = 20
#: Queued runs the two job runners compete for.
QUEUED_RUNS = 12


async def _idle_thread(services: Services, world: DemoWorld, i: int) -> uuid.UUID:
    """A report thread of Lotse in Bulletin: Lotse operates it, nothing runs yet."""
    created = await services.conversation.create_thread(
        world.principal("lotse"),
        world.channels["bulletin"].id,
        title=f"report {i}",
        first_message=MessageDraft(client_msg_id=f"report-{i}", content=f"report {i}"),
    )
    return created.thread.id


async def test_concurrent_messages_one_run_one_followup(
    services: Services, world: DemoWorld
) -> None:
    for i in range(ROUNDS):
        thread_id = await _idle_thread(services, world, i)
        posted = await asyncio.gather(
            *(
                services.conversation.create_message(
                    world.principal(who),
                    thread_id,
                    MessageDraft(client_msg_id=f"{who}-{i}", content="who answers?"),
                )
                for who in ("alex", "robin")
            )
        )
        async with services.uow() as uow:
            run = await uow.runs.lock_active_in_thread(thread_id)
            states = [
                found.trigger_state
                for p in posted
                if (found := await uow.messages.get(p.message.id)) is not None
            ]
            followups = await uow.followups.states(run.id) if run else {}
        assert run is not None, f"round {i}: no run"
        ids = {p.message.id for p in posted}
        assert run.triggering_message_id in ids
        # The winner triggered the run; the other one became its follow-up.
        assert set(followups) == ids - {run.triggering_message_id}, f"round {i}"
        assert states == [TriggerState.RECEIVED, TriggerState.RECEIVED], f"round {i}: {states}"


async def test_finish_racing_cancel_ends_once(services: Services, world: DemoWorld) -> None:
    lotse, alex = world.principal("lotse"), world.principal("alex")
    for i in range(ROUNDS):
        thread_id = await _idle_thread(services, world, i)
        await services.conversation.create_message(
            alex, thread_id, MessageDraft(client_msg_id=f"go-{i}", content="please")
        )
        page = await services.runs.poll(lotse)
        (delivery,) = [d for d in page.deliveries if d.event.type is EventType.AGENT_INVOCATION]
        await services.runs.ack(lotse, page.next_after)
        assert delivery.invocation_token is not None
        run_id = uuid.UUID(delivery.event.payload["run_id"])
        await services.runs.start(lotse, run_id, delivery.invocation_token)
        finished, cancelled = await asyncio.gather(
            services.runs.finish(lotse, run_id, RunState.COMPLETED, None),
            services.runs.cancel(alex, run_id),
            return_exceptions=True,
        )
        assert not isinstance(finished, BaseException), f"round {i}: {finished!r}"
        if isinstance(cancelled, BaseException):
            # The cancel came after the end: an ended run cannot be cancelled any more.
            assert isinstance(cancelled, InvalidStateTransition), f"round {i}: {cancelled!r}"
        view = await services.runs.get(alex, run_id)
        assert view.run.state is RunState.COMPLETED
        ends = [
            e
            for e in await shared_events(services)
            if e.type is EventType.RUN_STATE_CHANGED
            and e.resource_id == run_id
            and e.payload["state"] in {s.value for s in END_STATES}
        ]
        assert len(ends) == 1, f"round {i}: {len(ends)} end events"
        versions = [
            e.payload["version"]
            for e in await shared_events(services)
            if e.type is EventType.RUN_STATE_CHANGED and e.resource_id == run_id
        ]
        assert versions == sorted(versions)
        assert len(set(versions)) == len(versions)
        assert versions[-1] == view.run.version


async def test_two_job_runners_never_end_a_run_twice(
    services: Services, world: DemoWorld, clock: FakeClock
) -> None:
    alex = world.principal("alex")
    for i in range(QUEUED_RUNS):
        thread_id = await _idle_thread(services, world, i)
        await services.conversation.create_message(
            alex, thread_id, MessageDraft(client_msg_id=f"q-{i}", content="waiting")
        )
    clock.advance(services.settings.queued_max_age + timedelta(seconds=1))
    first, second = await asyncio.gather(
        services.runs.expire_queued(), services.runs.expire_queued()
    )
    assert first + second == QUEUED_RUNS
    ends = [
        e
        for e in await shared_events(services)
        if e.type is EventType.RUN_STATE_CHANGED and e.payload["state"] == "failed"
    ]
    assert len(ends) == QUEUED_RUNS
    assert len({e.resource_id for e in ends}) == QUEUED_RUNS
    async with services.uow() as uow:
        for event in ends:
            run = await uow.runs.get(event.resource_id)
            assert run is not None
            trigger = await uow.messages.get(run.triggering_message_id)
            assert trigger is not None
            assert (trigger.trigger_state, trigger.trigger_state_reason) == (
                TriggerState.FAILED,
                "queued_expired",
            )
