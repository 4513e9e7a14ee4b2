"""An agent's feed poll takes no lock for the events of runs that ended.

Found by a black-box audit (a deadlock hunt): a poll walks past the events it cannot
deliver, and it locked the thread row and the run row of each (`LockRun`), also of runs
that had ended and would never move again. A poll over a backlog then held the threads
of many runs for seconds, people's posts into them waited, and two agents whose feeds
named two threads in opposite orders deadlocked. A run that ended is skipped without a
lock (`RunRepository.lock_active`); only a run that can still move is locked.
"""

from __future__ import annotations

import asyncio

import psycopg

from tests.support.locks import LOCK_WAIT_POLL_SECONDS, LOCK_WAIT_TRIES
from tests.support.scenario import draft, main_thread
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.domain.runs import RunState

#: Rounds of the scenario.
ROUNDS = 3
#: The longest a poll that waits for nothing may take (the bound of `wait_until_blocked`).
POLL_BOUND_SECONDS = LOCK_WAIT_TRIES * LOCK_WAIT_POLL_SECONDS


async def test_a_poll_over_an_ended_runs_invocation_waits_for_no_thread(
    pg_conninfo: str, world_on_pg: tuple[Services, DemoWorld]
) -> None:
    services, world = world_on_pg
    alex, lotse = world.principal("alex"), world.principal("lotse")
    thread_id = main_thread(world, "allgemein")
    for round_ in range(ROUNDS):
        posted = await services.conversation.create_message(
            alex, thread_id, draft(f"ask-{round_}", "@lotse can you help?", mentions=(lotse.id,))
        )
        run_id = posted.trigger.run_id
        assert run_id is not None
        cancelled = await services.runs.cancel(alex, run_id)
        assert cancelled.run.state is RunState.CANCELLED
        async with await psycopg.AsyncConnection.connect(pg_conninfo) as holder:
            # Another unit holds the thread, as a post under way does.
            await holder.execute(
                b"SELECT 1 FROM threads WHERE id = %(id)s FOR UPDATE", {"id": thread_id}
            )
            page = await asyncio.wait_for(services.runs.poll(lotse), POLL_BOUND_SECONDS)
            await holder.rollback()
        # The invocation of the ended run is not delivered, and the poll read past it.
        assert all(d.event.resource_id != run_id for d in page.deliveries)
        await services.runs.ack(lotse, page.next_after)
