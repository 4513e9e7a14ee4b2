"""Follow-ups with steer and queue (seed followups-steer-and-queue, DESIGN section 7, AG-13).

Service-level scenarios on the memory adapter and on PostgreSQL, named after the seed's
Tests section. The adapter side is the runs service called as Lotse (poll, start,
await_input, resume, finish, patch); the mode is set per test through the heartbeat and
the owner's ``supports_followups``. Tokens are checked with the signer of the services.

The seed's world is extended through the admin service (fixture `ext`): Sam has trigger on
Support/Allgemein (a second person who writes follow-ups), Sam write on Support/Eskalation
(a person without trigger there: Robin, whom the seed names for that role, owns everything
here), Texter write on Support/Eskalation, Sam write on Research/Notizen.

Not here: the seed's TestFollowupDeletedIsDiscarded (turnkeeper has no message deletion
yet), TestFocusedClientSeesFollowupAfterVersionStep (no live box or websocket), the
gateway variant of TestFollowupStatesForwardOnly (no gateway). The concurrent version of
TestConcurrentMessagesOneRunOneFollowup is
tests/concurrency/test_run_races.py::test_concurrent_messages_one_run_one_followup; the
race of a follow-up against the end of its run is tests/concurrency/test_followup_races.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import attrs
import pytest

from tests.support.fakes import DescendingIds, FakeClock, signer
from tests.support.scenario import (
    AGENTS,
    EVERYTHING,
    active_run,
    denials,
    get_run,
    main_thread,
    message,
    post,
    start_delivered,
)
from tests.support.services import services_over
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.errors import BaseVersionConflict, InvalidToken
from turnkeeper.application.ports import InvocationClaims, UnitOfWorkFactory
from turnkeeper.application.services.runs import Delivery, FollowupOp, run_document
from turnkeeper.application.settings import Settings
from turnkeeper.application.transactions import AccessDenied
from turnkeeper.domain.errors import Conflict, FieldError, InvalidStateTransition, ValidationFailed
from turnkeeper.domain.events import Event, EventType
from turnkeeper.domain.followups import (
    FollowupState,
    FollowupTransitionError,
    OpenFollowup,
    RunEnd,
    plan_run_end,
)
from turnkeeper.domain.messaging import MessageDraft, MessageKind, Origin
from turnkeeper.domain.runs import Run, RunState
from turnkeeper.domain.world import Level, ResourceKind, ThreadState

QUEUED, DELIVERED, ABSORBED, DEFERRED, DISCARDED = (
    "queued",
    "delivered",
    "absorbed",
    "deferred",
    "discarded",
)

# -- the extended world ---------------------------------------------------------------------


async def _grant(
    services: Services, world: DemoWorld, who: str, channel: str, level: Level
) -> None:
    await services.admin.create_grant(
        world.principal("robin"),
        principal_id=world.principal(who).id,
        resource_kind=ResourceKind.CHANNEL,
        resource_id=world.channels[channel].id,
        level=level,
    )


async def revoke(services: Services, world: DemoWorld, who: str, resource_id: uuid.UUID) -> None:
    """Delete a principal's grant on a space or channel."""
    principal = world.principal(who)
    async with services.uow() as uow:
        grants = await uow.grants.for_principal(principal.id)
    (grant,) = [g for g in grants if g.resource_id == resource_id]
    await services.admin.delete_grant(world.principal("robin"), grant.id)


async def extend(services: Services, world: DemoWorld) -> DemoWorld:
    """Add the seed's extensions for follow-ups to the demo world."""
    await revoke(services, world, "sam", world.channels["allgemein"].id)
    await _grant(services, world, "sam", "allgemein", Level.TRIGGER)
    await _grant(services, world, "sam", "eskalation", Level.WRITE)
    await _grant(services, world, "texter", "eskalation", Level.WRITE)
    await _grant(services, world, "sam", "notizen", Level.WRITE)
    return world


@pytest.fixture
async def ext(services: Services, world: DemoWorld) -> DemoWorld:
    """The demo world with the seed's extensions for follow-ups."""
    return await extend(services, world)


async def set_mode(services: Services, world: DemoWorld, mode: str, agent: str = "lotse") -> None:
    """steer or queue by heartbeat; none by supports_followups = false (with steer reported)."""
    principal = world.principal(agent)
    if mode == "none":
        await services.admin.set_agent_config(
            world.principal("robin"), principal.id, supports_followups=False
        )
        await services.runs.heartbeat(principal, "steer")
    else:
        await services.runs.heartbeat(principal, mode)


# -- helpers -------------------------------------------------------------------------------


async def trigger_of(services: Services, message_id: uuid.UUID) -> tuple[Any, Any]:
    found = await message(services, message_id)
    state = found.trigger_state.value if found.trigger_state else None
    return state, found.trigger_state_reason


async def rows(services: Services, run_id: uuid.UUID) -> dict[uuid.UUID, str]:
    async with services.uow() as uow:
        states = await uow.followups.states(run_id)
    return {k: v.value for k, v in states.items()}


async def log(services: Services, world: DemoWorld) -> list[Event]:
    """Every event of the log, shared and personal, in seq order."""
    async with services.uow() as uow:
        shared = await uow.events.read(EVERYTHING, 0, 100_000)
        personal = [
            e for h in AGENTS for e in await uow.agent_feed.read(world.principal(h).id, 0, 100_000)
        ]
    return sorted([*shared, *personal], key=lambda e: e.seq)


def brief(event: Event) -> tuple[Any, ...]:
    """What a test compares of an event (ids, states, versions, personal payloads)."""
    if event.type is EventType.MESSAGE_CREATED:
        return (event.type.value, event.resource_id)
    if event.type is EventType.MESSAGE_UPDATED:
        doc = event.payload["message"]
        return (
            event.type.value,
            event.resource_id,
            doc.get("trigger_state"),
            doc.get("trigger_state_reason"),
        )
    if event.type is EventType.RUN_STATE_CHANGED:
        return (
            event.type.value,
            event.resource_id,
            event.payload["state"],
            event.payload["version"],
        )
    return (event.type.value, dict(event.payload))


class Log:
    """A mark in the log; `since()` gives what was appended after it."""

    def __init__(self, services: Services, world: DemoWorld) -> None:
        self._services = services
        self._world = world
        self._mark = 0

    async def mark(self) -> None:
        events = await log(self._services, self._world)
        self._mark = events[-1].seq if events else 0

    async def since(self) -> list[Event]:
        return [e for e in await log(self._services, self._world) if e.seq > self._mark]

    async def brief(self) -> list[tuple[Any, ...]]:
        return [brief(e) for e in await self.since()]


def followup_event(
    run_id: uuid.UUID, thread_id: uuid.UUID, message_id: uuid.UUID
) -> tuple[Any, ...]:
    return (
        "agent.followup",
        {"run_id": str(run_id), "thread_id": str(thread_id), "message_id": str(message_id)},
    )


def invocation_event(
    run_id: uuid.UUID, thread_id: uuid.UUID, message_id: uuid.UUID
) -> tuple[Any, ...]:
    return (
        "agent.invocation",
        {"run_id": str(run_id), "thread_id": str(thread_id), "message_id": str(message_id)},
    )


def claims(token: str | None, clock: FakeClock) -> InvocationClaims:
    assert token is not None
    return signer().verify(token, clock.now())


async def poll(services: Services, world: DemoWorld, kind: EventType) -> list[Delivery]:
    page = await services.runs.poll(world.principal("lotse"))
    return [d for d in page.deliveries if d.event.type is kind]


async def started(services: Services, world: DemoWorld) -> tuple[Run, str]:
    """Alex writes in Allgemein; Lotse polls, starts and acks the run (token S)."""
    await post(services, world, "alex", main_thread(world, "allgemein"), "trigger", content="help")
    run, token = await start_delivered(services, world.principal("lotse"))
    assert (run.state, run.version) == (RunState.RUNNING, 2)
    return run, token


async def queued(services: Services, world: DemoWorld) -> Run:
    """Alex writes in Allgemein; the run stays queued (nobody polled)."""
    thread_id = main_thread(world, "allgemein")
    await post(services, world, "alex", thread_id, "trigger", content="help")
    run = await active_run(services, thread_id)
    assert run is not None
    assert (run.state, run.version) == (RunState.QUEUED, 1)
    return run


async def patch(
    services: Services,
    world: DemoWorld,
    run_id: uuid.UUID,
    *ops: tuple[uuid.UUID | None, str],
    base: int | None = None,
) -> Run:
    """Lotse patches follow-up states on the current version (or on `base`)."""
    version = (await get_run(services, run_id)).version if base is None else base
    view = await services.runs.patch(
        world.principal("lotse"),
        run_id,
        version,
        [FollowupOp(message_id=m, value=FollowupState(v)) for m, v in ops],
    )
    return view.run


async def finish(
    services: Services, world: DemoWorld, run_id: uuid.UUID, state: RunState, reason: str | None
) -> Run:
    view = await services.runs.finish(world.principal("lotse"), run_id, state, reason)
    return view.run


async def follow_on(services: Services, world: DemoWorld, ended: Run) -> Run:
    """The active run of the ended run's thread (the follow-on run); asserts it exists."""
    run = await active_run(services, ended.thread_id)
    assert run is not None
    assert run.id != ended.id
    return run


async def anchors_of(services: Services, world: DemoWorld, thread_id: uuid.UUID) -> list[Any]:
    page = await services.conversation.list_messages(world.principal("robin"), thread_id)
    return [m.run_id for m in page.messages if m.run_id is not None]


# -- AG-13 -----------------------------------------------------------------------------------


class TestAG13_Steer:  # noqa: N801 (the seed names the scenario AG-13)
    async def test_followup_event_delivery_acknowledgements_and_end(
        self, services: Services, ext: DemoWorld, clock: FakeClock
    ) -> None:
        world = ext
        await set_mode(services, world, "steer")
        thread_id = main_thread(world, "allgemein")
        run, start_token = await started(services, world)
        trail = Log(services, world)
        await trail.mark()

        followup = await post(services, world, "sam", thread_id, "f1", content="also the invoice")

        assert await rows(services, run.id) == {followup.id: QUEUED}
        assert await trigger_of(services, followup.id) == ("received", None)
        assert (await get_run(services, run.id)).version == 3
        assert await trail.brief() == [
            ("message.created", followup.id),
            ("run.state_changed", run.id, "running", 3),
            ("message.updated", followup.id, "received", None),
            followup_event(run.id, thread_id, followup.id),
        ]
        event = (await trail.since())[-1]
        assert (event.audience_id, event.resource_kind, event.resource_id) == (
            world.principal("lotse").id,
            "run",
            run.id,
        )
        assert (event.resource_version, event.actor_id) == (None, world.principal("sam").id)
        assert "also the invoice" not in repr(event.payload)

        (delivery,) = await poll(services, world, EventType.AGENT_FOLLOWUP)
        got = claims(delivery.invocation_token, clock)
        assert (got.trigger_kind.value, got.sub, got.message_id, got.run_id) == (
            "followup",
            world.principal("sam").id,
            followup.id,
            run.id,
        )
        # Only a delivery to a waiting run replaces the run's token.
        assert (await get_run(services, run.id)).invocation_jti == claims(start_token, clock).jti
        assert (await get_run(services, run.id)).version == 3
        # Delivery never sets queued on a follow-up.
        assert await trigger_of(services, followup.id) == ("received", None)

        # The adapter saw version 2; it rebases on the conflict's current document.
        with pytest.raises(BaseVersionConflict) as conflict:
            await patch(services, world, run.id, (followup.id, DELIVERED), base=2)
        assert conflict.value.current["version"] == 3
        assert conflict.value.current["followups"] == {str(followup.id): {"state": QUEUED}}
        await trail.mark()
        delivered = await patch(
            services,
            world,
            run.id,
            (followup.id, DELIVERED),
            base=conflict.value.current["version"],
        )
        assert delivered.version == 4
        assert await rows(services, run.id) == {followup.id: DELIVERED}
        assert await trigger_of(services, followup.id) == ("followup_delivered", None)
        assert await trail.brief() == [
            ("message.updated", followup.id, "followup_delivered", None),
            ("run.state_changed", run.id, "running", 4),
        ]

        await trail.mark()
        absorbed = await patch(services, world, run.id, (followup.id, ABSORBED))
        assert absorbed.version == 5
        assert await rows(services, run.id) == {followup.id: ABSORBED}
        assert await trigger_of(services, followup.id) == ("followup_delivered", None)
        assert await trail.brief() == [("run.state_changed", run.id, "running", 5)]

        await trail.mark()
        done = await finish(services, world, run.id, RunState.COMPLETED, None)
        assert (done.state, done.version) == (RunState.COMPLETED, 6)
        assert await rows(services, run.id) == {followup.id: ABSORBED}
        assert await trigger_of(services, run.triggering_message_id) == ("done", None)
        assert await active_run(services, thread_id) is None
        assert await trail.brief() == [
            ("run.state_changed", run.id, "completed", 6),
            ("message.updated", run.triggering_message_id, "done", None),
        ]


class TestAG13_Queue:  # noqa: N801 (the seed names the scenario AG-13)
    async def test_nothing_sent_then_first_triggers_and_rest_moves(
        self, services: Services, ext: DemoWorld, clock: FakeClock
    ) -> None:
        world = ext
        await set_mode(services, world, "queue")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        trail = Log(services, world)
        await trail.mark()
        first = await post(services, world, "sam", thread_id, "f1")
        second = await post(services, world, "alex", thread_id, "f2")

        assert await rows(services, run.id) == {first.id: QUEUED, second.id: QUEUED}
        assert await trail.brief() == [
            ("message.created", first.id),
            ("run.state_changed", run.id, "running", 3),
            ("message.updated", first.id, "received", None),
            ("message.created", second.id),
            ("run.state_changed", run.id, "running", 4),
            ("message.updated", second.id, "received", None),
        ]
        assert await poll(services, world, EventType.AGENT_FOLLOWUP) == []

        await trail.mark()
        ended = await finish(services, world, run.id, RunState.COMPLETED, None)
        assert (ended.state, ended.version) == (RunState.COMPLETED, 5)
        new = await follow_on(services, world, ended)
        assert (new.state, new.version, new.agent_id) == (
            RunState.QUEUED,
            1,
            world.principal("lotse").id,
        )
        assert (new.triggering_message_id, new.triggered_by) == (
            first.id,
            world.principal("sam").id,
        )
        assert await rows(services, run.id) == {first.id: DEFERRED}
        assert await rows(services, new.id) == {second.id: QUEUED}
        assert await trigger_of(services, first.id) == ("received", None)
        assert await trigger_of(services, second.id) == ("received", None)
        assert (await anchors_of(services, world, thread_id))[-2:] == [run.id, new.id]
        since = await trail.since()
        assert [brief(e) for e in since] == [
            ("run.state_changed", run.id, "completed", 5),
            ("message.updated", run.triggering_message_id, "done", None),
            ("message.created", since[2].resource_id),
            invocation_event(new.id, thread_id, first.id),
        ]
        assert since[2].payload["message"]["run_id"] == str(new.id)

        ended_view = await services.runs.get(world.principal("alex"), run.id)
        new_view = await services.runs.get(world.principal("alex"), new.id)
        assert run_document(ended_view)["followups"] == {str(first.id): {"state": DEFERRED}}
        assert run_document(new_view)["followups"] == {str(second.id): {"state": QUEUED}}

        # The follow-on run is an ordinary queued run: its invocation is delivered for Sam,
        # and it expires like any other (run.queued_max_age), deferring its own follow-up.
        (delivery,) = [
            d
            for d in await poll(services, world, EventType.AGENT_INVOCATION)
            if d.event.payload["run_id"] == str(new.id)
        ]
        got = claims(delivery.invocation_token, clock)
        assert (got.trigger_kind.value, got.sub, got.message_id) == (
            "message",
            world.principal("sam").id,
            first.id,
        )
        clock.advance(services.settings.queued_max_age + timedelta(seconds=1))
        assert await services.runs.expire_queued() == 1
        expired = await get_run(services, new.id)
        assert (expired.state, expired.state_reason) == (RunState.FAILED, "queued_expired")
        third = await follow_on(services, world, expired)
        assert (third.triggering_message_id, third.triggered_by) == (
            second.id,
            world.principal("alex").id,
        )
        assert await rows(services, new.id) == {second.id: DEFERRED}


class TestAG13_QueueWithoutCapability:  # noqa: N801 (the seed names the scenario AG-13)
    @pytest.mark.parametrize(
        ("permitted", "reported"),
        [(False, "steer"), (False, "queue"), (None, None), (True, None)],
        ids=["forbidden-steer", "forbidden-queue", "no-report", "permitted-no-report"],
    )
    async def test_behaves_as_queue(
        self,
        services: Services,
        ext: DemoWorld,
        permitted: bool | None,
        reported: str | None,
    ) -> None:
        world = ext
        lotse = world.principal("lotse")
        if permitted is not None:
            await services.admin.set_agent_config(
                world.principal("robin"), lotse.id, supports_followups=permitted
            )
        await services.runs.heartbeat(lotse, reported)
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        trail = Log(services, world)
        await trail.mark()
        first = await post(services, world, "sam", thread_id, "f1")
        second = await post(services, world, "alex", thread_id, "f2")
        assert EventType.AGENT_FOLLOWUP not in {e.type for e in await trail.since()}
        assert await rows(services, run.id) == {first.id: QUEUED, second.id: QUEUED}
        assert await poll(services, world, EventType.AGENT_FOLLOWUP) == []

        await trail.mark()
        ended = await finish(services, world, run.id, RunState.COMPLETED, None)
        new = await follow_on(services, world, ended)
        assert (new.triggering_message_id, new.triggered_by) == (
            first.id,
            world.principal("sam").id,
        )
        assert await rows(services, run.id) == {first.id: DEFERRED}
        assert await rows(services, new.id) == {second.id: QUEUED}
        # The moved follow-up gets no event either (the mode is read at the move).
        assert [e.type for e in await trail.since()][-1] is EventType.AGENT_INVOCATION
        assert EventType.AGENT_FOLLOWUP not in {e.type for e in await trail.since()}


class TestAG13_DeliveredNotAbsorbedIsDeferred:  # noqa: N801 (the seed names the scenario AG-13)
    async def test_delivered_is_deferred_absorbed_stays(
        self, services: Services, ext: DemoWorld
    ) -> None:
        world = ext
        await set_mode(services, world, "steer")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        delivered = await post(services, world, "sam", thread_id, "f1")
        absorbed = await post(services, world, "alex", thread_id, "f2")
        after = await patch(
            services, world, run.id, (delivered.id, DELIVERED), (absorbed.id, ABSORBED)
        )
        # Two follow-ups (3, 4) and one patch (5), whatever the number of its operations.
        assert after.version == 5
        assert await trigger_of(services, absorbed.id) == ("followup_delivered", None)

        trail = Log(services, world)
        await trail.mark()
        ended = await finish(services, world, run.id, RunState.FAILED, "runtime_error")
        assert (ended.state, ended.state_reason, ended.version) == (
            RunState.FAILED,
            "runtime_error",
            6,
        )
        assert await trigger_of(services, run.triggering_message_id) == ("failed", "runtime_error")
        new = await follow_on(services, world, ended)
        assert (new.triggering_message_id, new.triggered_by) == (
            delivered.id,
            world.principal("sam").id,
        )
        assert await rows(services, run.id) == {delivered.id: DEFERRED, absorbed.id: ABSORBED}
        assert await rows(services, new.id) == {}
        assert await trigger_of(services, delivered.id) == ("received", None)
        assert await trigger_of(services, absorbed.id) == ("followup_delivered", None)
        since = await trail.since()
        assert [brief(e) for e in since] == [
            ("run.state_changed", run.id, "failed", 6),
            ("message.updated", run.triggering_message_id, "failed", "runtime_error"),
            ("message.created", since[2].resource_id),
            ("message.updated", delivered.id, "received", None),
            invocation_event(new.id, thread_id, delivered.id),
        ]


class TestAG13_FollowOnRunMovesRestWithSteer:  # noqa: N801 (the seed names the scenario AG-13)
    async def test_rest_moves_queued_with_events_after_the_invocation(
        self, services: Services, ext: DemoWorld
    ) -> None:
        world = ext
        await set_mode(services, world, "steer")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        one = await post(services, world, "sam", thread_id, "f1")
        two = await post(services, world, "alex", thread_id, "f2")
        three = await post(services, world, "sam", thread_id, "f3")
        # The adapter got as far as handing the second one over.
        await patch(services, world, run.id, (two.id, DELIVERED))
        assert await trigger_of(services, two.id) == ("followup_delivered", None)

        trail = Log(services, world)
        await trail.mark()
        ended = await finish(services, world, run.id, RunState.COMPLETED, None)
        new = await follow_on(services, world, ended)
        assert (new.triggering_message_id, new.triggered_by, new.version) == (
            one.id,
            world.principal("sam").id,
            1,
        )
        assert await rows(services, run.id) == {one.id: DEFERRED}
        assert await rows(services, new.id) == {two.id: QUEUED, three.id: QUEUED}
        for moved in (one, two, three):
            assert await trigger_of(services, moved.id) == ("received", None)
        since = await trail.since()
        assert [brief(e) for e in since] == [
            ("run.state_changed", run.id, "completed", 7),
            ("message.updated", run.triggering_message_id, "done", None),
            ("message.created", since[2].resource_id),
            invocation_event(new.id, thread_id, one.id),
            ("message.updated", two.id, "received", None),
            followup_event(new.id, thread_id, two.id),
            followup_event(new.id, thread_id, three.id),
        ]
        moved_events = [e for e in since if e.type is EventType.AGENT_FOLLOWUP]
        assert [e.actor_id for e in moved_events] == [
            world.principal("alex").id,
            world.principal("sam").id,
        ]

        # The feed delivers the follow-on invocation and the moved follow-ups; the old
        # follow-up events of the ended run are skipped.
        page = await services.runs.poll(world.principal("lotse"))
        delivered = [
            (d.event.type.value, d.event.payload["run_id"], d.event.payload["message_id"])
            for d in page.deliveries
        ]
        assert delivered == [
            ("agent.invocation", str(new.id), str(one.id)),
            ("agent.followup", str(new.id), str(two.id)),
            ("agent.followup", str(new.id), str(three.id)),
        ]


class TestAG13_StopDiscardsOpenFollowups:  # noqa: N801 (the seed names the scenario AG-13)
    async def test_cancel_running_then_agent_confirms(
        self, services: Services, ext: DemoWorld
    ) -> None:
        world = ext
        await set_mode(services, world, "steer")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        one = await post(services, world, "sam", thread_id, "f1")
        two = await post(services, world, "alex", thread_id, "f2")
        await patch(services, world, run.id, (two.id, DELIVERED))
        requested = await services.runs.cancel(world.principal("alex"), run.id)
        assert (requested.run.state, requested.run.cancel_requested) == (RunState.RUNNING, True)

        trail = Log(services, world)
        await trail.mark()
        ended = await finish(services, world, run.id, RunState.CANCELLED, "user_cancelled")
        assert (ended.state, ended.state_reason) == (RunState.CANCELLED, "user_cancelled")
        assert await rows(services, run.id) == {one.id: DISCARDED, two.id: DISCARDED}
        for stopped in (one, two):
            assert await trigger_of(services, stopped.id) == ("cancelled", "user_cancelled")
        assert await active_run(services, thread_id) is None
        assert await trail.brief() == [
            ("run.state_changed", run.id, "cancelled", ended.version),
            ("message.updated", run.triggering_message_id, "cancelled", "user_cancelled"),
            ("message.updated", min(one.id, two.id), "cancelled", "user_cancelled"),
            ("message.updated", max(one.id, two.id), "cancelled", "user_cancelled"),
        ]

    async def test_cancel_queued_run_ends_at_once(self, services: Services, ext: DemoWorld) -> None:
        world = ext
        await set_mode(services, world, "steer")
        thread_id = main_thread(world, "allgemein")
        run = await queued(services, world)
        one = await post(services, world, "sam", thread_id, "f1")
        two = await post(services, world, "robin", thread_id, "f2")
        assert await rows(services, run.id) == {one.id: QUEUED, two.id: QUEUED}

        trail = Log(services, world)
        await trail.mark()
        view = await services.runs.cancel(world.principal("alex"), run.id)
        assert (view.run.state, view.run.state_reason, view.run.version) == (
            RunState.CANCELLED,
            "user_cancelled",
            4,
        )
        assert view.followups == {one.id: DISCARDED, two.id: DISCARDED}
        for stopped in (one, two):
            assert await trigger_of(services, stopped.id) == ("cancelled", "user_cancelled")
        assert await active_run(services, thread_id) is None
        assert EventType.AGENT_INVOCATION not in {e.type for e in await trail.since()}
        # Nothing of the stopped run reaches the agent any more.
        assert (await services.runs.poll(world.principal("lotse"))).deliveries == []


class TestAG13_CancelForOtherReasonDefers:  # noqa: N801 (the seed names the scenario AG-13)
    async def test_finish_cancelled_access_revoked(
        self, services: Services, ext: DemoWorld
    ) -> None:
        world = ext
        await set_mode(services, world, "queue")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        followup = await post(services, world, "sam", thread_id, "f1")
        # G-1: Alex loses trigger on Support while Lotse runs her run.
        await revoke(services, world, "alex", world.spaces["support"].id)
        ended = await finish(services, world, run.id, RunState.CANCELLED, "access_revoked")
        assert await trigger_of(services, run.triggering_message_id) == (
            "cancelled",
            "access_revoked",
        )
        new = await follow_on(services, world, ended)
        assert (new.triggering_message_id, new.triggered_by) == (
            followup.id,
            world.principal("sam").id,
        )
        assert await rows(services, run.id) == {followup.id: DEFERRED}
        assert await trigger_of(services, followup.id) == ("received", None)

    async def test_an_agent_cannot_fake_a_persons_stop(
        self, services: Services, ext: DemoWorld
    ) -> None:
        # No person asked to stop: user_cancelled from the agent would discard Sam's
        # follow-up as if someone had stopped the run. It is the server's reason only.
        world = ext
        await set_mode(services, world, "queue")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        followup = await post(services, world, "sam", thread_id, "f1")
        with pytest.raises(ValidationFailed) as caught:
            await finish(services, world, run.id, RunState.CANCELLED, "user_cancelled")
        assert [(e.pointer, e.code) for e in caught.value.errors] == [("/reason", "reserved")]
        assert (await get_run(services, run.id)).state is RunState.RUNNING
        assert await rows(services, run.id) == {followup.id: QUEUED}
        assert await trigger_of(services, followup.id) == ("received", None)

    async def test_cancel_timeout_job(
        self, services: Services, ext: DemoWorld, clock: FakeClock
    ) -> None:
        world = ext
        await set_mode(services, world, "queue")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        followup = await post(services, world, "sam", thread_id, "f1")
        await services.runs.cancel(world.principal("alex"), run.id)
        clock.advance(services.settings.cancel_grace - timedelta(seconds=1))
        assert await services.runs.cancel_timeouts() == 0
        assert await rows(services, run.id) == {followup.id: QUEUED}
        clock.advance(2)
        assert await services.runs.cancel_timeouts() == 1
        ended = await get_run(services, run.id)
        assert (ended.state, ended.state_reason) == (RunState.CANCELLED, "cancel_timeout")
        # Literal 09 7: only user_cancelled discards; a stop that times out defers.
        new = await follow_on(services, world, ended)
        assert (new.triggering_message_id, new.triggered_by) == (
            followup.id,
            world.principal("sam").id,
        )
        assert await rows(services, run.id) == {followup.id: DEFERRED}


class TestAG13_AnswerToWaitingInput:  # noqa: N801 (the seed names the scenario AG-13)
    @pytest.mark.parametrize("mode", ["steer", "queue", "none"])
    async def test_the_followups_token_resumes_the_start_token_is_superseded(
        self, services: Services, ext: DemoWorld, clock: FakeClock, mode: str
    ) -> None:
        world = ext
        lotse = world.principal("lotse")
        await set_mode(services, world, mode)
        thread_id = main_thread(world, "allgemein")
        run, start_token = await started(services, world)
        early = None
        if mode != "steer":
            early = await post(services, world, "sam", thread_id, "while-running")
            assert await poll(services, world, EventType.AGENT_FOLLOWUP) == []
        waiting = await services.runs.await_input(lotse, run.id)
        assert waiting.run.state is RunState.WAITING_INPUT

        trail = Log(services, world)
        await trail.mark()
        answer = await post(services, world, "alex", thread_id, "answer", content="yes, go on")
        assert [brief(e) for e in await trail.since()][-1] == followup_event(
            run.id, thread_id, answer.id
        )
        # The early follow-up was not an answer: it is not delivered later.
        (delivery,) = await poll(services, world, EventType.AGENT_FOLLOWUP)
        got = claims(delivery.invocation_token, clock)
        assert (got.trigger_kind.value, got.sub, got.message_id) == (
            "followup",
            world.principal("alex").id,
            answer.id,
        )
        stored = await get_run(services, run.id)
        assert stored.invocation_jti == got.jti
        assert stored.state is RunState.WAITING_INPUT
        assert await trigger_of(services, answer.id) == ("received", None)

        with pytest.raises(InvalidToken) as superseded:
            await services.runs.resume(lotse, run.id, start_token)
        assert (superseded.value.code, superseded.value.reason) == (
            "invocation_token_invalid",
            "superseded",
        )
        assert delivery.invocation_token is not None
        resumed = await services.runs.resume(lotse, run.id, delivery.invocation_token)
        assert resumed.run.state is RunState.RUNNING
        await patch(services, world, run.id, (answer.id, ABSORBED))
        ended = await finish(services, world, run.id, RunState.COMPLETED, None)
        if early is None:
            assert await rows(services, run.id) == {answer.id: ABSORBED}
            assert await active_run(services, thread_id) is None
        else:
            assert await rows(services, run.id) == {answer.id: ABSORBED, early.id: DEFERRED}
            new = await follow_on(services, world, ended)
            assert (new.triggering_message_id, new.triggered_by) == (
                early.id,
                world.principal("sam").id,
            )


class TestFollowupStatesForwardOnly:
    async def test_backward_is_invalid_and_changes_nothing(
        self, services: Services, ext: DemoWorld
    ) -> None:
        world = ext
        await set_mode(services, world, "steer")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        followup = await post(services, world, "sam", thread_id, "f1")
        absorbed = await patch(services, world, run.id, (followup.id, ABSORBED))
        trail = Log(services, world)
        await trail.mark()
        with pytest.raises(FollowupTransitionError) as refused:
            await patch(services, world, run.id, (followup.id, DELIVERED))
        assert refused.value.code == "invalid_state_transition"
        assert await rows(services, run.id) == {followup.id: ABSORBED}
        assert (await get_run(services, run.id)).version == absorbed.version
        assert await trail.since() == []

    async def test_all_or_nothing(self, services: Services, ext: DemoWorld) -> None:
        world = ext
        await set_mode(services, world, "steer")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        one = await post(services, world, "sam", thread_id, "f1")
        two = await post(services, world, "alex", thread_id, "f2")
        await patch(services, world, run.id, (two.id, ABSORBED))
        before = await get_run(services, run.id)
        trail = Log(services, world)
        await trail.mark()
        with pytest.raises(InvalidStateTransition):
            await patch(services, world, run.id, (one.id, DELIVERED), (two.id, DELIVERED))
        assert await rows(services, run.id) == {one.id: QUEUED, two.id: ABSORBED}
        assert await trigger_of(services, one.id) == ("received", None)
        assert (await get_run(services, run.id)).version == before.version
        assert await trail.since() == []

    async def test_one_patch_moves_each_followup_once_whatever_the_order_of_its_ops(
        self, services: Services, ext: DemoWorld
    ) -> None:
        world = ext
        await set_mode(services, world, "steer")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        one = await post(services, world, "sam", thread_id, "f1")
        two = await post(services, world, "alex", thread_id, "f2")
        before = await get_run(services, run.id)
        trail = Log(services, world)
        await trail.mark()
        after = await patch(
            services, world, run.id, (two.id, DELIVERED), (one.id, ABSORBED), (two.id, ABSORBED)
        )
        assert await rows(services, run.id) == {one.id: ABSORBED, two.id: ABSORBED}
        assert await trigger_of(services, one.id) == ("followup_delivered", None)
        assert await trigger_of(services, two.id) == ("followup_delivered", None)
        assert after.version == before.version + 1
        *updated, changed = await trail.brief()
        assert sorted(updated) == sorted(
            [
                ("message.updated", one.id, "followup_delivered", None),
                ("message.updated", two.id, "followup_delivered", None),
            ]
        )
        assert changed == ("run.state_changed", run.id, "running", after.version)

    async def test_delivered_twice_gives_one_message_updated(
        self, services: Services, ext: DemoWorld
    ) -> None:
        world = ext
        await set_mode(services, world, "steer")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        followup = await post(services, world, "sam", thread_id, "f1")
        trail = Log(services, world)
        await trail.mark()
        first = await patch(services, world, run.id, (followup.id, DELIVERED))
        second = await patch(services, world, run.id, (followup.id, DELIVERED))
        assert first.version == second.version == 4
        assert await trail.brief() == [
            ("message.updated", followup.id, "followup_delivered", None),
            ("run.state_changed", run.id, "running", 4),
        ]
        # absorbed twice: the same.
        third = await patch(services, world, run.id, (followup.id, ABSORBED))
        fourth = await patch(services, world, run.id, (followup.id, ABSORBED))
        assert (third.version, fourth.version) == (5, 5)

    async def test_target_that_is_no_followup_of_this_run(
        self, services: Services, ext: DemoWorld
    ) -> None:
        world = ext
        await set_mode(services, world, "steer")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        followup = await post(services, world, "sam", thread_id, "f1")
        other_thread = main_thread(world, "eskalation")
        await post(services, world, "alex", other_thread, "elsewhere", "lotse")
        other_run = await active_run(services, other_thread)
        assert other_run is not None
        foreign = await post(services, world, "alex", other_thread, "foreign", "lotse")
        assert await rows(services, other_run.id) == {foreign.id: QUEUED}
        version = (await get_run(services, run.id)).version
        trail = Log(services, world)
        await trail.mark()
        for target, index in [
            (uuid.UUID(int=0xFEED), 0),
            (run.triggering_message_id, 0),
            (foreign.id, 1),
            (None, 1),
        ]:
            ops: list[tuple[uuid.UUID | None, str]] = [(target, DELIVERED)]
            if index == 1:
                ops.insert(0, (followup.id, DELIVERED))
            with pytest.raises(ValidationFailed) as missing:
                await patch(services, world, run.id, *ops)
            assert missing.value.errors == (
                FieldError(pointer=f"/ops/{index}/path", code="patch_target_missing"),
            )
        assert await rows(services, run.id) == {followup.id: QUEUED}
        assert await rows(services, other_run.id) == {foreign.id: QUEUED}
        assert (await get_run(services, run.id)).version == version
        assert await trail.since() == []

    async def test_base_version_mismatch_carries_the_current_document(
        self, services: Services, ext: DemoWorld
    ) -> None:
        world = ext
        await set_mode(services, world, "steer")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        followup = await post(services, world, "sam", thread_id, "f1")
        for stale in (run.version, run.version + 5, 0):
            with pytest.raises(BaseVersionConflict) as conflict:
                await patch(services, world, run.id, (followup.id, DELIVERED), base=stale)
            current = await services.runs.get(world.principal("alex"), run.id)
            assert conflict.value.code == "base_version_conflict"
            assert conflict.value.current == run_document(current)
        assert await rows(services, run.id) == {followup.id: QUEUED}

    async def test_ended_run_and_other_agent(self, services: Services, ext: DemoWorld) -> None:
        world = ext
        await set_mode(services, world, "steer")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        followup = await post(services, world, "sam", thread_id, "f1")
        with pytest.raises(AccessDenied) as other:
            await services.runs.patch(
                world.principal("texter"),
                run.id,
                3,
                [FollowupOp(message_id=followup.id, value=FollowupState.DELIVERED)],
            )
        assert (other.value.code, other.value.reason) == ("forbidden", "not_run_agent")
        await patch(services, world, run.id, (followup.id, ABSORBED))
        ended = await finish(services, world, run.id, RunState.COMPLETED, None)
        with pytest.raises(Conflict) as late:
            await patch(services, world, run.id, (followup.id, ABSORBED), base=ended.version)
        assert late.value.reason == "run_not_active"


class TestFollowupDeliveryRechecksAuthor:
    async def test_revoked_author_is_not_delivered(
        self, services: Services, ext: DemoWorld
    ) -> None:
        world = ext
        await set_mode(services, world, "steer")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        followup = await post(services, world, "sam", thread_id, "f1")
        assert (await get_run(services, run.id)).version == 3
        await revoke(services, world, "sam", world.channels["allgemein"].id)
        trail = Log(services, world)
        await trail.mark()

        assert (await services.runs.poll(world.principal("lotse"))).deliveries == []

        assert await rows(services, run.id) == {followup.id: DISCARDED}
        # The message shows the delivery reason; the audit keeps agent.invoke's own.
        assert await trigger_of(services, followup.id) == ("failed", "access_revoked")
        assert await denials(services, world.principal("sam")) == [
            ("agent.invoke", "no_trigger_right", 1)
        ]
        after = await get_run(services, run.id)
        assert (after.state, after.version, after.cancel_requested) == (RunState.RUNNING, 4, False)
        assert await trail.brief() == [
            ("run.state_changed", run.id, "running", 4),
            ("message.updated", followup.id, "failed", "access_revoked"),
        ]
        # The discarded follow-up is settled: the end of the run opens nothing.
        ended = await finish(services, world, run.id, RunState.COMPLETED, None)
        assert ended.state is RunState.COMPLETED
        assert await active_run(services, thread_id) is None
        assert await rows(services, run.id) == {followup.id: DISCARDED}

    async def test_downgraded_author_is_not_delivered(
        self, services: Services, ext: DemoWorld
    ) -> None:
        world = ext
        await set_mode(services, world, "steer")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        followup = await post(services, world, "sam", thread_id, "f1")
        # Sam may still write in Allgemein, but no longer trigger.
        await revoke(services, world, "sam", world.channels["allgemein"].id)
        await _grant(services, world, "sam", "allgemein", Level.WRITE)

        assert (await services.runs.poll(world.principal("lotse"))).deliveries == []

        assert await rows(services, run.id) == {followup.id: DISCARDED}
        assert await trigger_of(services, followup.id) == ("failed", "access_revoked")
        assert await denials(services, world.principal("sam")) == [
            ("agent.invoke", "no_trigger_right", 1)
        ]
        assert (await get_run(services, run.id)).state is RunState.RUNNING


class TestFollowupNotDeliverableAfterEnd:
    @pytest.mark.parametrize(
        ("state", "reason"),
        [(RunState.COMPLETED, None), (RunState.CANCELLED, "user_cancelled")],
        ids=["completed", "stopped"],
    )
    async def test_poll_skips_it_and_the_ack_covers_it(
        self,
        services: Services,
        ext: DemoWorld,
        state: RunState,
        reason: str | None,
    ) -> None:
        world = ext
        lotse = world.principal("lotse")
        await set_mode(services, world, "steer")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        followup = await post(services, world, "sam", thread_id, "f1")
        if state is RunState.CANCELLED:
            # A stop is a person's: Alex asks, the agent confirms.
            await services.runs.cancel(world.principal("alex"), run.id)
        await finish(services, world, run.id, state, reason)

        page = await services.runs.poll(lotse)
        got = [
            (d.event.type.value, d.event.payload["run_id"])
            for d in page.deliveries
            # Alex's cancel request is the agent's own news, not the follow-up's.
            if d.event.type is not EventType.RUN_CANCEL_REQUESTED
        ]
        if state is RunState.COMPLETED:
            new = await follow_on(services, world, await get_run(services, run.id))
            assert got == [("agent.invocation", str(new.id))]
        else:
            assert got == []
        for who in ("sam", "alex"):
            assert await denials(services, world.principal(who)) == []
        feed = await log(services, world)
        old = [
            e
            for e in feed
            if e.type is EventType.AGENT_FOLLOWUP and e.payload["run_id"] == str(run.id)
        ]
        assert [e.payload["message_id"] for e in old] == [str(followup.id)]
        assert page.next_after >= old[0].seq
        await services.runs.ack(lotse, page.next_after)
        assert (await services.runs.poll(lotse)).deliveries == []


class TestMessageWithoutTriggerIsNoFollowup:
    async def test_in_an_eskalation_thread(self, services: Services, ext: DemoWorld) -> None:
        world = ext
        await set_mode(services, world, "steer")
        created = await services.conversation.create_thread(
            world.principal("robin"),
            world.channels["eskalation"].id,
            title="case",
            first_message=MessageDraft(client_msg_id="open", content="a case"),
        )
        thread_id = created.thread.id
        await post(services, world, "alex", thread_id, "go", "lotse")
        run = await active_run(services, thread_id)
        assert run is not None
        trail = Log(services, world)
        await trail.mark()

        quiet = await post(services, world, "alex", thread_id, "quiet")
        assert await trigger_of(services, quiet.id) == (None, None)
        no_right = await post(services, world, "sam", thread_id, "sam", "lotse")
        assert await trigger_of(services, no_right.id) == ("failed", "no_trigger_right")
        other = await post(services, world, "alex", thread_id, "texter", "texter")
        assert await trigger_of(services, other.id) == ("failed", "run_active_other_agent")

        assert await rows(services, run.id) == {}
        assert (await get_run(services, run.id)).version == run.version
        assert await trail.brief() == [
            ("message.created", quiet.id),
            ("message.created", no_right.id),
            ("message.updated", no_right.id, "failed", "no_trigger_right"),
            ("message.created", other.id),
            ("message.updated", other.id, "failed", "run_active_other_agent"),
        ]
        assert await denials(services, world.principal("sam")) == [
            ("run.followup.create", "no_trigger_right", 1)
        ]
        # The mention rule met with trigger: a follow-up.
        loud = await post(services, world, "alex", thread_id, "loud", "lotse")
        assert await rows(services, run.id) == {loud.id: QUEUED}


class TestFollowupNeverReachesPersonalAgentForOthers:
    async def test_robins_run_of_assistent_in_notizen(
        self, services: Services, ext: DemoWorld
    ) -> None:
        world = ext
        assistent = world.principal("assistent")
        await set_mode(services, world, "steer", agent="assistent")
        thread_id = main_thread(world, "notizen")
        await post(services, world, "robin", thread_id, "go", "assistent")
        run = await active_run(services, thread_id)
        assert run is not None
        assert run.agent_id == assistent.id
        trail = Log(services, world)
        await trail.mark()

        mentioned = await post(services, world, "sam", thread_id, "s1", "assistent")
        assert await trigger_of(services, mentioned.id) == ("failed", "no_trigger_right")
        quiet = await post(services, world, "sam", thread_id, "s2")
        assert await trigger_of(services, quiet.id) == (None, None)
        assert await rows(services, run.id) == {}
        assert EventType.AGENT_FOLLOWUP not in {e.type for e in await trail.since()}

        # Even with trigger (I1 would keep it with the holder), I2 refuses Sam.
        await revoke(services, world, "sam", world.channels["notizen"].id)
        await _grant(services, world, "sam", "notizen", Level.TRIGGER)
        holder_only = await post(services, world, "sam", thread_id, "s3", "assistent")
        assert await trigger_of(services, holder_only.id) == (
            "failed",
            "billing_mode_personal_not_holder",
        )
        assert await rows(services, run.id) == {}

        own = await post(services, world, "robin", thread_id, "r1", "assistent")
        assert await rows(services, run.id) == {own.id: QUEUED}
        assert [brief(e) for e in await trail.since() if e.type is EventType.AGENT_FOLLOWUP] == [
            followup_event(run.id, thread_id, own.id)
        ]
        sams = {str(m.id) for m in (mentioned, quiet, holder_only)}
        for event in await log(services, world):
            if event.audience_id == assistent.id:
                assert event.payload.get("message_id") not in sams
        # The end of the run opens nothing for Sam either.
        await services.runs.cancel(world.principal("robin"), run.id)
        assert await active_run(services, thread_id) is None


# -- every end path ------------------------------------------------------------------------


@attrs.frozen
class EndPath:
    """One way a run with one open queued follow-up by Sam ends."""

    name: str
    running: bool
    end: RunEnd
    act: Callable[[Services, DemoWorld, FakeClock, Run], Awaitable[None]]
    #: The follow-up's final state and the trigger state of its message.
    outcome: str
    trigger: tuple[str, str | None]
    follow_on: bool


def _finishing(state: RunState, reason: str | None) -> Callable[..., Awaitable[None]]:
    async def act(services: Services, world: DemoWorld, clock: FakeClock, run: Run) -> None:
        await finish(services, world, run.id, state, reason)

    return act


async def _confirming_stop(
    services: Services, world: DemoWorld, clock: FakeClock, run: Run
) -> None:
    await services.runs.cancel(world.principal("alex"), run.id)
    await finish(services, world, run.id, RunState.CANCELLED, "user_cancelled")


async def _cancel_queued(services: Services, world: DemoWorld, clock: FakeClock, run: Run) -> None:
    await services.runs.cancel(world.principal("alex"), run.id)


async def _cancel_timeout(services: Services, world: DemoWorld, clock: FakeClock, run: Run) -> None:
    await services.runs.cancel(world.principal("alex"), run.id)
    clock.advance(services.settings.cancel_grace + timedelta(seconds=1))
    assert await services.runs.cancel_timeouts() == 1


async def _stall(services: Services, world: DemoWorld, clock: FakeClock, run: Run) -> None:
    clock.advance(services.settings.stall_after + timedelta(seconds=1))
    assert await services.runs.stall_check() == 1


async def _disabled(services: Services, world: DemoWorld, clock: FakeClock, run: Run) -> None:
    await services.admin.set_agent_config(
        world.principal("robin"), world.principal("lotse").id, enabled=False
    )
    assert await services.runs.end_runs_of_disabled_agents() == 1


async def _denied_delivery(
    services: Services, world: DemoWorld, clock: FakeClock, run: Run
) -> None:
    await revoke(services, world, "alex", world.spaces["support"].id)
    # The poll refuses the run's invocation and delivers the follow-on run's instead.
    (delivery,) = await poll(services, world, EventType.AGENT_INVOCATION)
    assert delivery.event.payload["run_id"] != str(run.id)


async def _expired(services: Services, world: DemoWorld, clock: FakeClock, run: Run) -> None:
    clock.advance(services.settings.queued_max_age + timedelta(seconds=1))
    assert await services.runs.expire_queued() == 1


async def _archived_then_completed(
    services: Services, world: DemoWorld, clock: FakeClock, run: Run
) -> None:
    await services.admin.archive_channel(world.principal("robin"), world.channels["allgemein"].id)
    await finish(services, world, run.id, RunState.COMPLETED, None)


RECEIVED = ("received", None)
END_PATHS = [
    EndPath(
        "finish-completed",
        True,
        RunEnd(state=RunState.COMPLETED),
        _finishing(RunState.COMPLETED, None),
        DEFERRED,
        RECEIVED,
        True,
    ),
    EndPath(
        "finish-failed",
        True,
        RunEnd(state=RunState.FAILED, reason="runtime_error"),
        _finishing(RunState.FAILED, "runtime_error"),
        DEFERRED,
        RECEIVED,
        True,
    ),
    EndPath(
        "finish-cancelled-user",
        True,
        RunEnd(state=RunState.CANCELLED, reason="user_cancelled"),
        _confirming_stop,
        DISCARDED,
        ("cancelled", "user_cancelled"),
        False,
    ),
    EndPath(
        "cancel-queued",
        False,
        RunEnd(state=RunState.CANCELLED, reason="user_cancelled"),
        _cancel_queued,
        DISCARDED,
        ("cancelled", "user_cancelled"),
        False,
    ),
    EndPath(
        "job-cancel-timeout",
        True,
        RunEnd(state=RunState.CANCELLED, reason="cancel_timeout"),
        _cancel_timeout,
        DEFERRED,
        RECEIVED,
        True,
    ),
    EndPath(
        "job-stall-check",
        True,
        RunEnd(state=RunState.FAILED, reason="stale"),
        _stall,
        DEFERRED,
        RECEIVED,
        True,
    ),
    EndPath(
        "job-agent-disabled",
        True,
        RunEnd(state=RunState.CANCELLED, reason="agent_disabled"),
        _disabled,
        # Deferred, then refused as the trigger of the follow-on run (delivery reason).
        DISCARDED,
        ("failed", "agent_disabled"),
        False,
    ),
    EndPath(
        "denied-delivery",
        False,
        RunEnd(state=RunState.FAILED, reason="access_revoked"),
        _denied_delivery,
        DEFERRED,
        # The poll that refused the run delivered the follow-on run's invocation.
        ("queued", None),
        True,
    ),
    EndPath(
        "finish-completed-channel-archived",
        True,
        RunEnd(state=RunState.COMPLETED),
        _archived_then_completed,
        # Deferred, then refused as the trigger of the follow-on run (delivery reason).
        DISCARDED,
        ("failed", "channel_read_only"),
        False,
    ),
    EndPath(
        "job-queued-expiry",
        False,
        RunEnd(state=RunState.FAILED, reason="queued_expired"),
        _expired,
        DEFERRED,
        RECEIVED,
        True,
    ),
]


class TestRunEndSettlesOnEveryEndPath:
    @pytest.mark.parametrize("mode", ["queue", "steer"])
    @pytest.mark.parametrize("path", END_PATHS, ids=[p.name for p in END_PATHS])
    async def test_one_open_queued_followup(
        self, services: Services, ext: DemoWorld, clock: FakeClock, path: EndPath, mode: str
    ) -> None:
        world = ext
        await set_mode(services, world, mode)
        thread_id = main_thread(world, "allgemein")
        run = (await started(services, world))[0] if path.running else await queued(services, world)
        followup = await post(services, world, "sam", thread_id, "f1")
        assert await rows(services, run.id) == {followup.id: QUEUED}
        open_set = [
            OpenFollowup(
                message_id=followup.id,
                thread_seq=followup.thread_seq,
                author_id=followup.author_id,
            )
        ]
        plan = plan_run_end(path.end, open_set)
        assert (plan.stopped == tuple(open_set)) is (
            path.trigger == ("cancelled", "user_cancelled")
        )
        assert (plan.candidates == tuple(open_set)) is (
            path.trigger != ("cancelled", "user_cancelled")
        )

        await path.act(services, world, clock, run)

        ended = await get_run(services, run.id)
        assert (ended.state, ended.state_reason) == (path.end.state, path.end.reason)
        assert await rows(services, run.id) == {followup.id: path.outcome}
        assert await trigger_of(services, followup.id) == path.trigger
        new = await active_run(services, thread_id)
        if path.follow_on:
            assert new is not None
            assert (new.triggering_message_id, new.triggered_by, new.state) == (
                followup.id,
                world.principal("sam").id,
                RunState.QUEUED,
            )
            assert await rows(services, new.id) == {}
            # The follow-on run is delivered for the follow-up's author.
            (delivery,) = [
                d
                for d in await poll(services, world, EventType.AGENT_INVOCATION)
                if d.event.payload["run_id"] == str(new.id)
            ]
            got = claims(delivery.invocation_token, clock)
            assert (got.sub, got.message_id, got.trigger_kind.value) == (
                world.principal("sam").id,
                followup.id,
                "message",
            )
        else:
            assert new is None
        ends = [
            e
            for e in await log(services, world)
            if e.type is EventType.RUN_STATE_CHANGED
            and e.resource_id == run.id
            and e.payload["state"] == path.end.state.value
        ]
        assert len(ends) == 1


class TestDeniedDeliveryDeliversTheFollowOnRun:
    async def test_the_poll_that_refuses_an_invocation_delivers_the_run_it_opened(
        self, services: Services, ext: DemoWorld
    ) -> None:
        world = ext
        await set_mode(services, world, "queue")
        thread_id = main_thread(world, "allgemein")
        run = await queued(services, world)
        followup = await post(services, world, "sam", thread_id, "f1")
        # Alex loses the right to trigger: the invocation of the run is refused at delivery.
        await revoke(services, world, "alex", world.spaces["support"].id)

        page = await services.runs.poll(world.principal("lotse"))

        ended = await get_run(services, run.id)
        assert (ended.state, ended.state_reason) == (RunState.FAILED, "access_revoked")
        assert await trigger_of(services, run.triggering_message_id) == ("failed", "access_revoked")
        assert await denials(services, world.principal("alex")) == [
            ("agent.invoke", "no_trigger_right", 1)
        ]
        new = await active_run(services, thread_id)
        assert new is not None
        assert new.triggering_message_id == followup.id
        # A page is empty only when nothing deliverable is left after the cursor (API.md):
        # the follow-on run's invocation, appended by this very poll, is in it.
        assert [(d.event.type, d.event.payload["run_id"]) for d in page.deliveries] == [
            (EventType.AGENT_INVOCATION, str(new.id))
        ]
        assert not page.deliveries[0].redelivered


class TestFollowOnRunRefusedWhenAgentDisabled:
    async def test_both_followups_discarded_no_new_run(
        self, services: Services, ext: DemoWorld
    ) -> None:
        world = ext
        await set_mode(services, world, "steer")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        one = await post(services, world, "sam", thread_id, "f1")
        two = await post(services, world, "alex", thread_id, "f2")
        await services.admin.set_agent_config(
            world.principal("robin"), world.principal("lotse").id, enabled=False
        )
        trail = Log(services, world)
        await trail.mark()
        assert (await services.runs.run_jobs_once())["agent_disabled"] == 1
        ended = await get_run(services, run.id)
        assert (ended.state, ended.state_reason) == (RunState.CANCELLED, "agent_disabled")
        assert await rows(services, run.id) == {one.id: DISCARDED, two.id: DISCARDED}
        # The messages show the delivery reason; the audit keeps agent.invoke's own.
        for refused in (one, two):
            assert await trigger_of(services, refused.id) == ("failed", "agent_disabled")
        assert await active_run(services, thread_id) is None
        assert await denials(services, world.principal("sam")) == [
            ("agent.invoke", "agent_not_reachable", 1)
        ]
        assert await denials(services, world.principal("alex")) == [
            ("agent.invoke", "agent_not_reachable", 1)
        ]
        assert await trail.brief() == [
            ("run.state_changed", run.id, "cancelled", ended.version),
            ("message.updated", run.triggering_message_id, "cancelled", "agent_disabled"),
            ("message.updated", one.id, "failed", "agent_disabled"),
            ("message.updated", two.id, "failed", "agent_disabled"),
        ]


class TestFollowOnRunRefusedInAnArchivedChannel:
    async def test_both_followups_fail_channel_read_only_no_new_run(
        self, services: Services, ext: DemoWorld
    ) -> None:
        world = ext
        await set_mode(services, world, "queue")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        one = await post(services, world, "sam", thread_id, "f1")
        two = await post(services, world, "alex", thread_id, "f2")
        await services.admin.archive_channel(
            world.principal("robin"), world.channels["allgemein"].id
        )
        trail = Log(services, world)
        await trail.mark()

        ended = await finish(services, world, run.id, RunState.COMPLETED, None)

        assert await rows(services, run.id) == {one.id: DISCARDED, two.id: DISCARDED}
        # The messages show the delivery reason; the audit keeps agent.invoke's own.
        for refused in (one, two):
            assert await trigger_of(services, refused.id) == ("failed", "channel_read_only")
        for who in ("sam", "alex"):
            assert await denials(services, world.principal(who)) == [
                ("agent.invoke", "channel_archived", 1)
            ]
        assert await active_run(services, thread_id) is None
        assert await trail.brief() == [
            ("run.state_changed", run.id, "completed", ended.version),
            ("message.updated", run.triggering_message_id, "done", None),
            ("message.updated", one.id, "failed", "channel_read_only"),
            ("message.updated", two.id, "failed", "channel_read_only"),
        ]


class TestRepeatedFinishCreatesOneFollowOnRun:
    async def test_second_finish_is_a_no_op(self, services: Services, ext: DemoWorld) -> None:
        world = ext
        await set_mode(services, world, "queue")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        followup = await post(services, world, "sam", thread_id, "f1")
        first = await finish(services, world, run.id, RunState.COMPLETED, None)
        new = await follow_on(services, world, first)
        trail = Log(services, world)
        await trail.mark()
        again = await services.runs.finish(
            world.principal("lotse"), run.id, RunState.COMPLETED, None
        )
        assert (again.run.version, again.run.state) == (first.version, RunState.COMPLETED)
        assert again.followups == {followup.id: DEFERRED}
        assert await trail.since() == []
        assert await active_run(services, thread_id) == new
        invocations = [
            e
            for e in await log(services, world)
            if e.type is EventType.AGENT_INVOCATION and e.payload["message_id"] == str(followup.id)
        ]
        assert len(invocations) == 1


class TestConcurrentMessagesOneRunOneFollowup:
    """Sequential service-level version; the concurrent one is
    tests/concurrency/test_run_races.py::test_concurrent_messages_one_run_one_followup."""

    async def test_second_message_is_a_followup_of_the_first_ones_run(
        self, services: Services, ext: DemoWorld
    ) -> None:
        world = ext
        await set_mode(services, world, "queue")
        thread_id = main_thread(world, "allgemein")
        first = await post(services, world, "alex", thread_id, "a")
        second = await post(services, world, "robin", thread_id, "r")
        run = await active_run(services, thread_id)
        assert run is not None
        assert (run.triggering_message_id, run.version, run.state) == (
            first.id,
            2,
            RunState.QUEUED,
        )
        assert await rows(services, run.id) == {second.id: QUEUED}
        assert await trigger_of(services, first.id) == ("received", None)
        assert await trigger_of(services, second.id) == ("received", None)


class TestCreateMessageReplayNoSecondFollowup:
    async def test_replay_returns_the_original(self, services: Services, ext: DemoWorld) -> None:
        world = ext
        await set_mode(services, world, "steer")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        original = await services.conversation.create_message(
            world.principal("sam"), thread_id, MessageDraft(client_msg_id="f1", content="more")
        )
        trail = Log(services, world)
        await trail.mark()
        replay = await services.conversation.create_message(
            world.principal("sam"), thread_id, MessageDraft(client_msg_id="f1", content="more")
        )
        assert replay.replayed is True
        assert replay.message.id == original.message.id
        assert await rows(services, run.id) == {original.message.id: QUEUED}
        assert (await get_run(services, run.id)).version == 3
        assert await trail.since() == []


class TestRunDocumentListsFollowups:
    async def test_states_keyed_by_message_id(self, services: Services, ext: DemoWorld) -> None:
        world = ext
        await set_mode(services, world, "steer")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        one = await post(services, world, "sam", thread_id, "f1")
        two = await post(services, world, "alex", thread_id, "f2")
        three = await post(services, world, "sam", thread_id, "f3")
        await patch(services, world, run.id, (one.id, ABSORBED), (two.id, DELIVERED))
        view = await services.runs.get(world.principal("sam"), run.id)
        document = run_document(view)
        assert document["version"] == view.run.version == 6
        assert document["followups"] == {
            str(one.id): {"state": ABSORBED},
            str(two.id): {"state": DELIVERED},
            str(three.id): {"state": QUEUED},
        }
        ended = await finish(services, world, run.id, RunState.COMPLETED, None)
        new = await follow_on(services, world, ended)
        ended_doc = run_document(await services.runs.get(world.principal("sam"), run.id))
        new_doc = run_document(await services.runs.get(world.principal("sam"), new.id))
        assert ended_doc["followups"] == {
            str(one.id): {"state": ABSORBED},
            str(two.id): {"state": DEFERRED},
        }
        assert new_doc["followups"] == {str(three.id): {"state": QUEUED}}
        assert (new_doc["triggering_message_id"], new_doc["triggered_by"]) == (
            str(two.id),
            str(world.principal("alex").id),
        )


class TestFollowOnRunChecksEachCandidatesAuthor:
    async def test_refused_first_candidate_makes_the_second_the_trigger(
        self, services: Services, ext: DemoWorld
    ) -> None:
        world = ext
        await set_mode(services, world, "steer")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        one = await post(services, world, "sam", thread_id, "f1")
        two = await post(services, world, "alex", thread_id, "f2")
        three = await post(services, world, "sam", thread_id, "f3")
        await revoke(services, world, "sam", world.channels["allgemein"].id)
        trail = Log(services, world)
        await trail.mark()
        ended = await finish(services, world, run.id, RunState.COMPLETED, None)
        new = await follow_on(services, world, ended)
        # Checked for the candidate's author (Sam), not for the run's (Alex).
        assert (new.triggering_message_id, new.triggered_by) == (
            two.id,
            world.principal("alex").id,
        )
        assert await rows(services, run.id) == {one.id: DISCARDED, two.id: DEFERRED}
        # The rest moves unchecked; its own delivery checks Sam again.
        assert await rows(services, new.id) == {three.id: QUEUED}
        assert await trigger_of(services, one.id) == ("failed", "access_revoked")
        assert await denials(services, world.principal("sam")) == [
            ("agent.invoke", "no_trigger_right", 1)
        ]
        since = await trail.since()
        assert [brief(e) for e in since] == [
            ("run.state_changed", run.id, "completed", ended.version),
            ("message.updated", run.triggering_message_id, "done", None),
            ("message.updated", one.id, "failed", "access_revoked"),
            ("message.created", since[3].resource_id),
            invocation_event(new.id, thread_id, two.id),
            followup_event(new.id, thread_id, three.id),
        ]
        page = await services.runs.poll(world.principal("lotse"))
        assert [(d.event.type.value, d.event.payload["message_id"]) for d in page.deliveries] == [
            ("agent.invocation", str(two.id))
        ]
        assert await rows(services, new.id) == {three.id: DISCARDED}
        assert await trigger_of(services, three.id) == ("failed", "access_revoked")


class TestFollowupRedeliveryOnlyWhileOpen:
    async def test_delivered_is_redelivered_absorbed_is_not(
        self, services: Services, ext: DemoWorld, clock: FakeClock
    ) -> None:
        world = ext
        lotse = world.principal("lotse")
        await set_mode(services, world, "steer")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        one = await post(services, world, "sam", thread_id, "f1")
        two = await post(services, world, "alex", thread_id, "f2")
        first = await poll(services, world, EventType.AGENT_FOLLOWUP)
        assert [(d.event.payload["message_id"], d.redelivered) for d in first] == [
            (str(one.id), False),
            (str(two.id), False),
        ]
        await patch(services, world, run.id, (one.id, DELIVERED), (two.id, ABSORBED))
        again = await poll(services, world, EventType.AGENT_FOLLOWUP)
        assert [(d.event.payload["message_id"], d.redelivered) for d in again] == [
            (str(one.id), True)
        ]
        # Every delivery carries a fresh token.
        assert (
            claims(again[0].invocation_token, clock).jti
            != claims(first[0].invocation_token, clock).jti
        )
        assert (await get_run(services, run.id)).state is RunState.RUNNING
        assert lotse.id == run.agent_id


class TestAgentMessagesAreNeverFollowups:
    @pytest.mark.parametrize("mentions", [(), ("lotse",)], ids=["plain", "mentions-lotse"])
    async def test_texter_writes_during_lotses_run(
        self, services: Services, ext: DemoWorld, mentions: tuple[str, ...]
    ) -> None:
        world = ext
        await set_mode(services, world, "steer")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        trail = Log(services, world)
        await trail.mark()
        written = await post(services, world, "texter", thread_id, "t1", *mentions)
        assert await trigger_of(services, written.id) == (None, None)
        assert await rows(services, run.id) == {}
        assert await trail.brief() == [("message.created", written.id)]


class TestFollowOnRunUsesThreadOrderNotIdOrder:
    @pytest.fixture
    async def rev(
        self, uow_factory: UnitOfWorkFactory, settings: Settings, clock: FakeClock
    ) -> tuple[Services, DemoWorld]:
        services = services_over(uow_factory, settings, clock, DescendingIds())
        world = await build_demo_world(services)
        return services, await extend(services, world)

    async def test_first_in_thread_order_triggers(self, rev: tuple[Services, DemoWorld]) -> None:
        services, world = rev
        await set_mode(services, world, "steer")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        one = await post(services, world, "sam", thread_id, "f1")
        two = await post(services, world, "alex", thread_id, "f2")
        three = await post(services, world, "sam", thread_id, "f3")
        assert one.id > two.id > three.id
        assert one.thread_seq < two.thread_seq < three.thread_seq
        trail = Log(services, world)
        await trail.mark()
        ended = await finish(services, world, run.id, RunState.COMPLETED, None)
        new = await follow_on(services, world, ended)
        assert new.triggering_message_id == one.id
        assert await rows(services, new.id) == {two.id: QUEUED, three.id: QUEUED}
        moved = [brief(e) for e in await trail.since() if e.type is EventType.AGENT_FOLLOWUP]
        assert moved == [
            followup_event(new.id, thread_id, two.id),
            followup_event(new.id, thread_id, three.id),
        ]


class TestFollowOnRunInADoneThread:
    """A thread closed while a run was busy: the run's end opens the follow-on run in it.

    The follow-on run's anchor is a message like any other, so the thread is reopened
    with its system line first (DESIGN section 4: posting into a done thread reopens it),
    found by the differential model test (close, then finish with a follow-up queued).
    """

    async def test_the_thread_is_reopened_before_the_anchor(
        self, services: Services, ext: DemoWorld
    ) -> None:
        world = ext
        await set_mode(services, world, "queue")
        thread_id = main_thread(world, "allgemein")
        run, _ = await started(services, world)
        first = await post(services, world, "sam", thread_id, "f1")
        closed = await services.conversation.close_thread(world.principal("alex"), thread_id)
        assert closed.state is ThreadState.DONE
        trail = Log(services, world)
        await trail.mark()

        ended = await finish(services, world, run.id, RunState.COMPLETED, None)

        new = await follow_on(services, world, ended)
        assert new.triggering_message_id == first.id
        thread = await services.conversation.get_thread(world.principal("alex"), thread_id)
        assert thread.state is ThreadState.OPEN
        events = await trail.since()
        kinds = [e.type for e in events]
        reopened = kinds.index(EventType.THREAD_REOPENED)
        page = await services.conversation.list_messages(world.principal("robin"), thread_id)
        line, anchor = page.messages[-2:]
        assert (line.origin, line.kind) == (Origin.SYSTEM, MessageKind.SYSTEM)
        assert anchor.run_id == new.id
        assert line.thread_seq + 1 == anchor.thread_seq
        assert line.thread_seq > first.thread_seq
        created = [e.resource_id for e in events if e.type is EventType.MESSAGE_CREATED]
        assert created == [line.id, anchor.id]
        first_created = kinds.index(EventType.MESSAGE_CREATED)
        assert reopened < first_created, "the reopening comes before the line and the anchor"


class TestPollReadsItsFirstPageWithTheCursor:
    """`AgentFeedRepository.lock_cursor_and_read`: one round trip, the two calls' answer."""

    async def test_the_page_starts_where_the_cursor_or_the_caller_says(
        self, services: Services, ext: DemoWorld
    ) -> None:
        world = ext
        lotse = world.principal("lotse")
        thread = main_thread(world, "allgemein")
        for index in range(3):
            await post(services, world, "alex", thread, f"t{index}", content="help")
            run = await active_run(services, thread)
            assert run is not None
            await services.runs.cancel(world.principal("alex"), run.id)
        async with services.uow() as uow:
            every = await uow.agent_feed.read(lotse.id, 0, 100)
        assert len(every) >= 3
        page = await services.runs.poll(lotse)
        await services.runs.ack(lotse, every[0].seq)

        async with services.uow() as uow:
            cursor, from_ack = await uow.agent_feed.lock_cursor_and_read(lotse.id, None, 100)
            _, from_given = await uow.agent_feed.lock_cursor_and_read(lotse.id, every[1].seq, 1)
            _, from_zero = await uow.agent_feed.lock_cursor_and_read(lotse.id, 0, 100)
        assert cursor.acked_seq == every[0].seq
        assert cursor.delivered_seq >= page.next_after
        assert [e.seq for e in from_ack] == [e.seq for e in every[1:]]
        assert [e.seq for e in from_given] == [every[2].seq]
        assert [e.seq for e in from_zero] == [e.seq for e in every]
