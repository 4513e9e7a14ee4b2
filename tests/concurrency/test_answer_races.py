"""An agent answer naming its run races the end of that run (DESIGN section 8).

Every answer stored with a run_id must commit while its run is active: its
message.created has a lower seq than the run.state_changed that ends the run. An answer
that loses the race is refused with 409 conflict / run_not_active and stores nothing.
No RetriableConflict (deadlock, serialization failure) ever reaches a caller.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from tests.support.scenario import EVERYTHING, READ_ALL, main_thread
from turnkeeper.adapters.memory import MemoryUnitOfWorkFactory
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.ports import UnitOfWorkFactory
from turnkeeper.application.services.conversation import PostedMessage
from turnkeeper.application.services.runs import RunView
from turnkeeper.application.settings import Settings
from turnkeeper.domain.errors import Conflict
from turnkeeper.domain.events import Event, EventType
from turnkeeper.domain.messaging import MessageDraft, Origin
from turnkeeper.domain.runs import Run, RunState

#: Rounds of the race on PostgreSQL.
ROUNDS = 200
#: Rounds on the memory adapter, where units are serialized and only the order varies.
MEMORY_ROUNDS = 40
#: A bucket big enough that the rate limit never takes part in the race.
UNLIMITED = 1_000_000


@pytest.fixture
def settings() -> Settings:
    return Settings(rl_message_burst=UNLIMITED, rl_message_per_minute=UNLIMITED)


async def _shared_events(services: Services, after: int) -> list[Event]:
    async with services.uow() as uow:
        return await uow.events.read(EVERYTHING, after, READ_ALL)


async def _open_and_start(services: Services, world: DemoWorld, i: int) -> Run:
    """Alex writes in Allgemein (a new run of Lotse); Lotse polls, acks and starts it."""
    alex, lotse = world.principal("alex"), world.principal("lotse")
    thread_id = main_thread(world, "allgemein")
    await services.conversation.create_message(
        alex, thread_id, MessageDraft(client_msg_id=f"trigger-{i}", content=f"question {i}")
    )
    page = await services.runs.poll(lotse)
    (delivery,) = page.deliveries
    assert delivery.event.type is EventType.AGENT_INVOCATION
    assert delivery.invocation_token is not None
    await services.runs.ack(lotse, page.next_after)
    run_id = uuid.UUID(delivery.event.payload["run_id"])
    view = await services.runs.start(lotse, run_id, delivery.invocation_token)
    return view.run


class TestAnswer_ConcurrentWithFinish:  # noqa: N801 (the seed names the test)
    @pytest.mark.slow
    async def test_answer_commits_before_the_end_or_is_refused(
        self, services: Services, world: DemoWorld, uow_factory: UnitOfWorkFactory
    ) -> None:
        rounds = MEMORY_ROUNDS if isinstance(uow_factory, MemoryUnitOfWorkFactory) else ROUNDS
        lotse = world.principal("lotse")
        outcomes = {"answered": 0, "refused": 0}
        cursor = 0
        for i in range(rounds):
            run = await _open_and_start(services, world, i)
            barrier = asyncio.Barrier(2)
            cid = f"answer-{i}"

            async def answer(
                run: Run = run, cid: str = cid, barrier: asyncio.Barrier = barrier
            ) -> PostedMessage:
                await barrier.wait()
                return await services.conversation.create_message(
                    lotse,
                    run.thread_id,
                    MessageDraft(client_msg_id=cid, content="the answer", run_id=run.id),
                )

            async def finish(run: Run = run, barrier: asyncio.Barrier = barrier) -> RunView:
                await barrier.wait()
                return await services.runs.finish(lotse, run.id, RunState.COMPLETED, None)

            # Alternate which call is scheduled first, so both orders occur on every
            # adapter (the memory adapter serializes units in arrival order).
            if i % 2 == 0:
                answered, finished = await asyncio.gather(
                    answer(), finish(), return_exceptions=True
                )
            else:
                finished, answered = await asyncio.gather(
                    finish(), answer(), return_exceptions=True
                )

            # The end of the run never fails, whatever the answer did.
            assert isinstance(finished, RunView), f"round {i}: finish raised {finished!r}"
            assert finished.run.state is RunState.COMPLETED

            events = await _shared_events(services, cursor)
            cursor = events[-1].seq if events else cursor
            (end,) = [
                e
                for e in events
                if e.type is EventType.RUN_STATE_CHANGED
                and e.resource_id == run.id
                and e.payload["state"] == "completed"
            ]
            async with services.uow() as uow:
                stored = await uow.messages.by_client_id(lotse.id, cid)

            if isinstance(answered, PostedMessage):
                outcomes["answered"] += 1
                assert not answered.replayed
                assert (answered.message.origin, answered.message.run_id) == (Origin.AGENT, None)
                assert stored is not None
                assert stored.id == answered.message.id
                (created,) = [
                    e
                    for e in events
                    if e.type is EventType.MESSAGE_CREATED and e.resource_id == answered.message.id
                ]
                assert created.seq < end.seq, f"round {i}: answer committed after the end"
            else:
                # Anything but a Conflict run_not_active (a RetriableConflict above all)
                # fails the test here.
                assert isinstance(answered, Conflict), f"round {i}: answer raised {answered!r}"
                assert (answered.code, answered.reason) == ("conflict", "run_not_active")
                outcomes["refused"] += 1
                assert stored is None
                assert not [
                    e
                    for e in events
                    if e.type is EventType.MESSAGE_CREATED
                    and e.payload["message"]["origin"] == Origin.AGENT.value
                ]

        assert outcomes["answered"] + outcomes["refused"] == rounds
        if isinstance(uow_factory, MemoryUnitOfWorkFactory):
            assert outcomes == {"answered": rounds // 2, "refused": rounds - rounds // 2}
