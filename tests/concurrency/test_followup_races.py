"""A follow-up racing the end of its run, on real concurrent units (seed TestFollowupRacesRunEnd).

Each round opens a fresh report thread of Lotse in Bulletin, Alex's message triggers a
run, Lotse starts it, then Sam's createMessage and Lotse's finish(completed) run
concurrently (asyncio.gather, the order of scheduling alternating per round). On
PostgreSQL the acceptance (thread row, then run row) and the end (thread row, run row,
follow-ups, then the anchor of a follow-on run in the thread) take the rows in one
order, so they wait for each other and never deadlock: both calls succeed, also with no
rerun of a unit allowed (TestFollowupBurstAgainstRunEnd). Whatever the interleaving: no
queued or delivered follow-up on an ended run, at most one active run in the thread, and
Sam's message is exactly one of a settled
follow-up of the ended run (then the trigger of the follow-on run), a follow-up of the
follow-on run, or the trigger of a new run.

The race of two first messages in an idle thread is
tests/concurrency/test_run_races.py::test_concurrent_messages_one_run_one_followup.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from typing import TypeVar

import pytest

from tests.support.scenario import personal_events, shared_events
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.services.runs import RunView
from turnkeeper.application.settings import Settings
from turnkeeper.domain.events import EventType
from turnkeeper.domain.followups import OPEN_STATES, FollowupState
from turnkeeper.domain.messaging import MessageDraft, TriggerState
from turnkeeper.domain.runs import RunState
from turnkeeper.domain.world import Level, ResourceKind

T = TypeVar("T")

#: The finish starts 0 to STAGGER_SLOTS - 1 steps of STAGGER_SECONDS after the message
#: (a createMessage takes some milliseconds on PostgreSQL), so that the end of the run
#: meets the acceptance before, during and after its statements.
STAGGER_SLOTS = 16
STAGGER_SECONDS = 0.001
STAGGER_STEP = 7
#: Rounds per backend: the interleavings worth seeing need real concurrency.
ROUNDS = {"postgres": 200, "memory": 40}
#: Rounds of the variant with an open follow-up (before the thread row was locked first,
#: about a third of them deadlocked, each costing the server's deadlock_timeout).
ROUNDS_WITH_OPEN_FOLLOWUP = {"postgres": 50, "memory": 20}


@pytest.fixture
def settings() -> Settings:
    """Room in rl.message for every round (the fake clock does not move)."""
    return Settings(rl_message_burst=10 * max(ROUNDS.values()))


@pytest.fixture
async def racers(services: Services, world: DemoWorld) -> DemoWorld:
    """Sam gets trigger on Bulletin; Lotse takes follow-ups with steer."""
    await services.admin.create_grant(
        world.principal("robin"),
        principal_id=world.principal("sam").id,
        resource_kind=ResourceKind.CHANNEL,
        resource_id=world.channels["bulletin"].id,
        level=Level.TRIGGER,
    )
    await services.runs.heartbeat(world.principal("lotse"), "steer")
    return world


async def _running(services: Services, world: DemoWorld, i: int) -> tuple[uuid.UUID, uuid.UUID]:
    """A report thread of Lotse with Alex's running run: (thread, run)."""
    lotse, alex = world.principal("lotse"), world.principal("alex")
    created = await services.conversation.create_thread(
        lotse,
        world.channels["bulletin"].id,
        title=f"report {i}",
        first_message=MessageDraft(client_msg_id=f"report-{i}", content=f"report {i}"),
    )
    thread_id = created.thread.id
    await services.conversation.create_message(
        alex, thread_id, MessageDraft(client_msg_id=f"go-{i}", content="please look")
    )
    page = await services.runs.poll(lotse)
    await services.runs.ack(lotse, page.next_after)
    (delivery,) = [
        d
        for d in page.deliveries
        if d.event.type is EventType.AGENT_INVOCATION
        and d.event.payload["thread_id"] == str(thread_id)
    ]
    assert delivery.invocation_token is not None
    run_id = uuid.UUID(delivery.event.payload["run_id"])
    view = await services.runs.start(lotse, run_id, delivery.invocation_token)
    assert view.run.state is RunState.RUNNING
    return thread_id, run_id


async def _staggered(slot: int, work: Awaitable[T]) -> T:
    # A scheduling offset, not a wait for a window: it moves the start of the end of the
    # run across the duration of the acceptance.
    await asyncio.sleep(slot * STAGGER_SECONDS)
    return await work


async def _one_end_and_rising_versions(services: Services, rounds: int) -> None:
    """One completed event per ended run; each run's versions rise without repeating."""
    changes = [e for e in await shared_events(services) if e.type is EventType.RUN_STATE_CHANGED]
    ends = [e for e in changes if e.payload["state"] == "completed"]
    assert len(ends) == rounds
    assert len({e.resource_id for e in ends}) == rounds
    by_run: dict[uuid.UUID, list[int]] = {}
    for event in changes:
        by_run.setdefault(event.resource_id, []).append(event.payload["version"])
    for run_id, versions in by_run.items():
        assert versions == sorted(set(versions)), f"{run_id}: {versions}"


class TestFollowupRacesRunEnd:
    @pytest.mark.slow
    async def test_create_message_against_finish(
        self,
        services: Services,
        racers: DemoWorld,
        request: pytest.FixtureRequest,
    ) -> None:
        world = racers
        backend = request.node.callspec.params["uow_factory"]
        lotse, sam = world.principal("lotse"), world.principal("sam")
        outcomes: dict[str, int] = {}
        for i in range(ROUNDS[backend]):
            thread_id, run_id = await _running(services, world, i)
            post = services.conversation.create_message(
                sam, thread_id, MessageDraft(client_msg_id=f"sam-{i}", content="and also")
            )
            end = _staggered(
                i // 2 * STAGGER_STEP % STAGGER_SLOTS,
                services.runs.finish(lotse, run_id, RunState.COMPLETED, None),
            )
            if i % 2:
                ended_view, posted = await asyncio.gather(end, post, return_exceptions=True)
            else:
                posted, ended_view = await asyncio.gather(post, end, return_exceptions=True)
            assert not isinstance(posted, BaseException), f"round {i}: {posted!r}"
            assert not isinstance(ended_view, BaseException), f"round {i}: {ended_view!r}"
            assert isinstance(ended_view, RunView)
            assert ended_view.run.state is RunState.COMPLETED
            message_id = posted.message.id

            async with services.uow() as uow:
                ended = await uow.runs.get(run_id)
                in_thread = [
                    r
                    for r in await uow.runs.lock_active_of_agent(lotse.id, 1_000_000)
                    if r.thread_id == thread_id
                ]
                on_ended = await uow.followups.states(run_id)
                on_active = {r.id: await uow.followups.states(r.id) for r in in_thread}
                stored = await uow.messages.get(message_id)
            assert ended is not None
            assert stored is not None
            assert ended.state is RunState.COMPLETED, f"round {i}"
            # Never an open follow-up on an ended run.
            assert not (set(on_ended.values()) & OPEN_STATES), f"round {i}: {on_ended}"
            # At most one active run in the thread; here exactly one: Sam's message is its
            # trigger whether it came before the end (a follow-up, deferred, then the
            # trigger of the follow-on run) or after it (the trigger of a new run).
            assert len(in_thread) == 1, f"round {i}: {in_thread}"
            (active,) = in_thread
            assert (active.triggering_message_id, active.triggered_by, active.state) == (
                message_id,
                sam.id,
                RunState.QUEUED,
            ), f"round {i}"
            assert on_active == {active.id: {}}, f"round {i}: {on_active}"
            assert stored.trigger_state is TriggerState.RECEIVED, f"round {i}"
            if on_ended:
                # A follow-up of the ended run, settled; its row stays there, deferred.
                assert on_ended == {message_id: FollowupState.DEFERRED}, f"round {i}"
                outcomes["followup-then-trigger"] = outcomes.get("followup-then-trigger", 0) + 1
            else:
                outcomes["trigger"] = outcomes.get("trigger", 0) + 1

        await _one_end_and_rising_versions(services, ROUNDS[backend])
        # Every round gave one agent.invocation for Sam's message.
        sam_invocations = [
            e
            for e in (await personal_events(services, world))["lotse"]
            if e.type is EventType.AGENT_INVOCATION and e.actor_id == sam.id
        ]
        assert len(sam_invocations) == ROUNDS[backend]
        assert sum(outcomes.values()) == ROUNDS[backend]

    @pytest.mark.slow
    async def test_with_an_open_followup_the_end_opens_a_follow_on_run(
        self,
        services: Services,
        racers: DemoWorld,
        request: pytest.FixtureRequest,
    ) -> None:
        """Alex's open follow-up makes the end take the thread row for the follow-on run
        while Sam's acceptance holds it and waits for the run row: on PostgreSQL the two
        can deadlock, and the retried unit must still leave one consistent outcome."""
        world = racers
        backend = request.node.callspec.params["uow_factory"]
        lotse, sam, alex = (world.principal(h) for h in ("lotse", "sam", "alex"))
        for i in range(ROUNDS_WITH_OPEN_FOLLOWUP[backend]):
            thread_id, run_id = await _running(services, world, i)
            first = await services.conversation.create_message(
                alex, thread_id, MessageDraft(client_msg_id=f"more-{i}", content="one more")
            )
            post = services.conversation.create_message(
                sam, thread_id, MessageDraft(client_msg_id=f"sam-{i}", content="and also")
            )
            end = _staggered(
                i // 2 * STAGGER_STEP % STAGGER_SLOTS,
                services.runs.finish(lotse, run_id, RunState.COMPLETED, None),
            )
            if i % 2:
                ended_view, posted = await asyncio.gather(end, post, return_exceptions=True)
            else:
                posted, ended_view = await asyncio.gather(post, end, return_exceptions=True)
            assert not isinstance(posted, BaseException), f"round {i}: {posted!r}"
            assert not isinstance(ended_view, BaseException), f"round {i}: {ended_view!r}"
            message_id = posted.message.id

            async with services.uow() as uow:
                in_thread = [
                    r
                    for r in await uow.runs.lock_active_of_agent(lotse.id, 1_000_000)
                    if r.thread_id == thread_id
                ]
                on_ended = await uow.followups.states(run_id)
                on_active = {r.id: await uow.followups.states(r.id) for r in in_thread}
                stored = await uow.messages.get(message_id)
            assert stored is not None
            assert not (set(on_ended.values()) & OPEN_STATES), f"round {i}: {on_ended}"
            # Alex's follow-up triggered the follow-on run; Sam's message is its follow-up,
            # moved there at the end or accepted there after the end.
            assert len(in_thread) == 1, f"round {i}: {in_thread}"
            (active,) = in_thread
            assert (active.triggering_message_id, active.triggered_by) == (
                first.message.id,
                alex.id,
            ), f"round {i}"
            assert on_ended == {first.message.id: FollowupState.DEFERRED}, f"round {i}"
            assert on_active == {active.id: {message_id: FollowupState.QUEUED}}, f"round {i}"
            assert stored.trigger_state is TriggerState.RECEIVED, f"round {i}"
            # Steer: exactly one agent.followup of the follow-on run names Sam's message.
            followups = [
                e
                for e in (await personal_events(services, world))["lotse"]
                if e.type is EventType.AGENT_FOLLOWUP
                and e.payload["message_id"] == str(message_id)
                and e.payload["run_id"] == str(active.id)
            ]
            assert len(followups) == 1, f"round {i}: {followups}"
        await _one_end_and_rising_versions(services, ROUNDS_WITH_OPEN_FOLLOWUP[backend])


#: Messages posted at once against the finish of their run (the audit's burst was nine;
#: the pool of the test database leaves room for these and the finish).
BURST = 6
#: Rounds of the burst per backend.
BURST_ROUNDS = {"postgres": 20, "memory": 5}


class TestFollowupBurstAgainstRunEnd:
    """Every unit takes a thread's row before its run's, so no burst closes a cycle."""

    @pytest.fixture
    def settings(self) -> Settings:
        """No rerun of a unit at all: a deadlock fails the call that lost it."""
        return Settings(rl_message_burst=10 * BURST * max(BURST_ROUNDS.values()), tx_retry_max=0)

    @pytest.mark.slow
    async def test_a_burst_of_followups_against_the_finish_needs_no_rerun(
        self,
        services: Services,
        racers: DemoWorld,
        request: pytest.FixtureRequest,
    ) -> None:
        # Found by a black-box audit: nine messages and the finish of their run at once,
        # with a follow-up open (the end opens a follow-on run), deadlocked again at every
        # rerun until the reruns ran out: 500 for the finish, 503 for messages.
        world = racers
        backend = request.node.callspec.params["uow_factory"]
        lotse, sam, alex = (world.principal(h) for h in ("lotse", "sam", "alex"))
        for i in range(BURST_ROUNDS[backend]):
            thread_id, run_id = await _running(services, world, i)
            await services.conversation.create_message(
                alex, thread_id, MessageDraft(client_msg_id=f"open-{i}", content="one more")
            )
            posts = [
                services.conversation.create_message(
                    (sam, alex)[k % 2],
                    thread_id,
                    MessageDraft(client_msg_id=f"burst-{i}-{k}", content="and also"),
                )
                for k in range(BURST)
            ]
            end = services.runs.finish(lotse, run_id, RunState.COMPLETED, None)
            done = await asyncio.gather(
                *posts[: i % BURST], end, *posts[i % BURST :], return_exceptions=True
            )
            failed = [d for d in done if isinstance(d, BaseException)]
            assert failed == [], f"round {i}: {failed!r}"
            async with services.uow() as uow:
                in_thread = [
                    r
                    for r in await uow.runs.lock_active_of_agent(lotse.id, 1_000_000)
                    if r.thread_id == thread_id
                ]
                on_ended = await uow.followups.states(run_id)
            # One follow-on run, and no follow-up left open on the ended run.
            assert len(in_thread) == 1, f"round {i}: {in_thread}"
            assert not (set(on_ended.values()) & OPEN_STATES), f"round {i}: {on_ended}"
