"""The hot operations take the round trips issue 18 allows, counted on the wire.

Each operation runs through its service on a pool of one traced connection
(`bench.roundtrips`): libpq's protocol trace counts the client's waits (Sync, simple
Query, and the Flush psycopg's pipeline mode sends to fetch) and the statements
(Execute and Query, BEGIN and COMMIT included). A first item runs uncounted, as in the
benchmark's census: on a connection's first use each statement is prepared once.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Literal

import pytest

from bench.operations import HISTORY as HISTORY_READ
from bench.operations import OPERATIONS, Item, Operation, Prepare, running_runs
from bench.world import SIDES, BenchWorld, Worker
from tests.support.census import on_the_wire
from turnkeeper.application.services.runs.run_patch import FollowupOp
from turnkeeper.domain.errors import ValidationFailed
from turnkeeper.domain.followups import FollowupState
from turnkeeper.domain.messaging import MessageDraft
from turnkeeper.domain.runs import RunState

#: Round trips per operation at most: issue 18 item 2 allows 3, 5, 3 and 3; the rate-limit
#: take shares the round trip of the post's facts (ADR 0024), one fewer each.
TARGETS = {
    "message, no trigger": 2,
    "message opens run": 4,
    "gated send, hot thread": 2,
    "gated send, many threads": 2,
}
#: Over HTTP, the token of a message or a send is read in the round trip of its facts
#: (ADR 0026): the request costs what the service costs, authentication included.
HTTP_TARGETS = {
    "message, no trigger": 2,
    "message opens run": 4,
    "gated send, hot thread": 2,
    "gated send, many threads": 2,
}
#: Over HTTP an agent's finish reads its token in the round trip that locks the run, and
#: its poll in the round trip that locks its cursor (ADR 0026): the request costs what the
#: service costs, authentication included.
HTTP_AGENT_OPS = ("agent poll + delivery", "finish, 0 follow-ups", "finish, 10 follow-ups")
#: Finishing a run with follow-ups: the same round trips whatever their number and mode.
FINISHES = ("finish, 10 follow-ups", "finish, 100 follow-ups", "finish, 100 follow-ups, steer")
_OPS = {op.name: op for op in OPERATIONS}


@pytest.mark.parametrize("name", sorted(TARGETS))
async def test_a_hot_operation_takes_at_most_its_round_trips(
    census_worlds: tuple[BenchWorld, BenchWorld], name: str
) -> None:
    exchange = await on_the_wire(census_worlds, _OPS[name], "service")

    assert exchange.round_trips <= TARGETS[name], (exchange.round_trips, exchange.statements)


async def test_a_finish_takes_the_same_round_trips_whatever_its_follow_ups(
    census_worlds: tuple[BenchWorld, BenchWorld],
) -> None:
    found = {
        name: (await on_the_wire(census_worlds, _OPS[name], "service")).round_trips
        for name in FINISHES
    }

    assert len(set(found.values())) == 1, found


@pytest.mark.parametrize("name", sorted(HTTP_TARGETS))
async def test_a_message_over_http_is_authenticated_in_the_round_trips_of_its_post(
    census_worlds: tuple[BenchWorld, BenchWorld], name: str
) -> None:
    op = _OPS[name]
    exchange = await on_the_wire(census_worlds, op, "http")

    service = await on_the_wire(census_worlds, op, "service")
    assert exchange.round_trips <= HTTP_TARGETS[name], (exchange.round_trips, exchange.statements)
    # Not one statement more than the service's own: no token read of its own.
    assert (exchange.round_trips, exchange.statements) == (
        service.round_trips,
        service.statements,
    )


@pytest.mark.parametrize("name", HTTP_AGENT_OPS)
async def test_an_agent_request_is_authenticated_in_the_round_trip_of_its_lock(
    census_worlds: tuple[BenchWorld, BenchWorld], name: str
) -> None:
    op = _OPS[name]
    exchange = await on_the_wire(census_worlds, op, "http")

    service = await on_the_wire(census_worlds, op, "service")
    # The service's statements with LockRunForToken in place of LockRun (or
    # LockAgentCursorForToken in place of LockAgentCursor): no more.
    assert (exchange.round_trips, exchange.statements) == (
        service.round_trips,
        service.statements,
    )


#: A history page: the thread, the reader's grants and the page share one round trip,
#: the page's authors take a second (from 4); over HTTP the bearer token's read comes
#: first, in a unit of its own.
HISTORY_ROUND_TRIPS: dict[Literal["service", "http"], int] = {"service": 2, "http": 3}


@pytest.mark.parametrize("side", sorted(HISTORY_ROUND_TRIPS))
async def test_a_history_page_reads_its_facts_in_one_round_trip(
    census_worlds: tuple[BenchWorld, BenchWorld], side: Literal["service", "http"]
) -> None:
    exchange = await on_the_wire(census_worlds, HISTORY_READ, side)

    assert exchange.round_trips <= HISTORY_ROUND_TRIPS[side], (
        exchange.round_trips,
        exchange.statements,
    )


async def _quiet_threads(world: BenchWorld, workers: Sequence[Worker], n: int) -> list[list[Item]]:
    items = []
    for worker in workers:
        thread = await world.quiet_thread(worker)
        items.append([Item(worker=worker, thread_id=thread) for _ in range(n)])
    return items


async def _read_thread(world: BenchWorld, http: object, item: Item) -> object:
    assert item.thread_id is not None
    return await world.services.conversation.get_thread(
        item.worker.person.principal, item.thread_id
    )


async def _close_thread(world: BenchWorld, http: object, item: Item) -> object:
    assert item.thread_id is not None
    return await world.services.conversation.close_thread(
        item.worker.person.principal, item.thread_id
    )


#: A thread read and a close read the thread and the caller's grants in one round trip
#: (`authorized_thread`): the read in 1 (from 2), the close in 3 with its write and its
#: COMMIT (from 4).
THREAD_USES = {
    "thread read": (_read_thread, 1),
    "thread close": (_close_thread, 3),
}


@pytest.mark.parametrize("name", sorted(THREAD_USES))
async def test_a_thread_and_the_callers_grants_share_a_round_trip(
    census_worlds: tuple[BenchWorld, BenchWorld], name: str
) -> None:
    use, most = THREAD_USES[name]
    operation = Operation(name=name, prepare=_quiet_threads, service=use, raw=use, http=None)

    exchange = await on_the_wire(census_worlds, operation, "service")

    assert exchange.round_trips <= most, (exchange.round_trips, exchange.statements)


#: A poll delivering one invocation: the cursor's lock and the first page share a round
#: trip, the message, the author, the agent and the author's grants arrive with the
#: thread, and the cursor's save (its row locked first) travels with the event and the
#: COMMIT (5 round trips, from 11).
POLL_ROUND_TRIPS = 5


async def test_a_delivered_invocation_reads_its_facts_with_the_thread(
    census_worlds: tuple[BenchWorld, BenchWorld],
) -> None:
    exchange = await on_the_wire(census_worlds, _OPS["agent poll + delivery"], "service")

    assert exchange.round_trips <= POLL_ROUND_TRIPS, (exchange.round_trips, exchange.statements)


#: A finish: the triggering message, its author and the agent arrive with the thread,
#: the run's update travels with the next statement, and the follow-ups' state changes
#: and moves (their rows locked before) with the statements after them, and the run's
#: view (its follow-ups) is read with the COMMIT (5 round trips from 9 without
#: follow-ups, 9 from 16 with them, whatever their number).
FINISH_ROUND_TRIPS = {"finish, 0 follow-ups": 5, **dict.fromkeys(FINISHES, 9)}


@pytest.mark.parametrize("name", sorted(FINISH_ROUND_TRIPS))
async def test_a_finish_reads_its_people_with_the_thread(
    census_worlds: tuple[BenchWorld, BenchWorld], name: str
) -> None:
    exchange = await on_the_wire(census_worlds, _OPS[name], "service")

    assert exchange.round_trips <= FINISH_ROUND_TRIPS[name], (
        exchange.round_trips,
        exchange.statements,
    )


def _mention_threads(operated: bool) -> Prepare:
    async def prepare(world: BenchWorld, workers: Sequence[Worker], n: int) -> list[list[Item]]:
        # The agent's forum (written in by the agent: nothing runs) sets it in motion on a
        # mention; the quiet forum refuses the mention (its forums allow no guest agents).
        made = world.operated_thread if operated else world.quiet_thread
        return [[Item(worker=w, thread_id=await made(w)) for _ in range(n)] for w in workers]

    return prepare


async def _mention_agent(world: BenchWorld, http: object, item: Item) -> object:
    assert item.thread_id is not None
    worker = item.worker
    return await world.services.conversation.create_message(
        worker.person.principal,
        item.thread_id,
        MessageDraft(
            client_msg_id=worker.cid("mention"),
            content="please look",
            mentions=(worker.agent.principal.id, world.robin.principal.id),
            restricted_to=(worker.person.principal.id, worker.agent.principal.id),
        ),
    )


#: A message that mentions people (an agent and a person) takes the round trips of one
#: that names nobody: the people it names and their grants arrive with the post's facts
#: (from 6 for a run it opens, 5 for a mention the forum refuses).
MENTIONS = {"opens run": (True, TARGETS["message opens run"]), "refused": (False, 3)}


@pytest.mark.parametrize("name", sorted(MENTIONS))
async def test_a_mention_takes_no_round_trip_of_its_own(
    census_worlds: tuple[BenchWorld, BenchWorld], name: str
) -> None:
    operated, most = MENTIONS[name]
    mention = Operation(
        name=name,
        prepare=_mention_threads(operated),
        service=_mention_agent,
        raw=_mention_agent,
        http=None,
    )

    exchange = await on_the_wire(census_worlds, mention, "service")

    assert exchange.round_trips <= most, (exchange.round_trips, exchange.statements)


def _followups_of(authors: int) -> Prepare:
    async def prepare(world: BenchWorld, workers: Sequence[Worker], n: int) -> list[list[Item]]:
        # The persons of the three sides' workers (each with trigger on the space) write
        # the follow-ups, three each, taking turns.
        people = [w.person.principal for side in SIDES for w in world.workers[side]][:authors]
        worker = workers[0]
        runs = await running_runs(world, worker, n, 0)
        for run_id in runs:
            thread_id = (
                await world.services.runs.get(worker.agent.principal, run_id)
            ).run.thread_id
            for i in range(3 * authors):
                await world.services.conversation.create_message(
                    people[i % authors],
                    thread_id,
                    MessageDraft(client_msg_id=worker.cid("more"), content=f"and {i}"),
                )
        return [[Item(worker=worker, run_id=r) for r in runs]]

    return prepare


async def _finish(world: BenchWorld, http: object, item: Item) -> object:
    assert item.run_id is not None
    return await world.services.runs.finish(
        item.worker.agent.principal, item.run_id, RunState.COMPLETED, None
    )


async def test_a_finish_takes_the_same_round_trips_whoever_wrote_its_follow_ups(
    census_worlds: tuple[BenchWorld, BenchWorld],
) -> None:
    found = {}
    for authors in (1, len(SIDES)):
        finish = Operation(
            name=f"finish, follow-ups of {authors}",
            prepare=_followups_of(authors),
            service=_finish,
            raw=_finish,
            http=None,
        )
        found[authors] = (await on_the_wire(census_worlds, finish, "service")).round_trips

    assert found[1] == found[len(SIDES)], found


#: A message that becomes a follow-up of the active run: its row and the run's new
#: version travel with the trigger state's change (4 round trips, from 6).
FOLLOWUP_ROUND_TRIPS = 4


async def test_a_follow_up_is_accepted_without_waiting_for_its_writes(
    census_worlds: tuple[BenchWorld, BenchWorld],
) -> None:
    exchange = await on_the_wire(census_worlds, _OPS["follow-up accepted"], "service")

    assert exchange.round_trips <= FOLLOWUP_ROUND_TRIPS, (
        exchange.round_trips,
        exchange.statements,
    )


#: A gated send held for a frontier behind its thread's: the frontier is the one read
#: under the thread row lock, and the owner arrives with the replay lookup (3 round
#: trips, from 5).
HELD_ROUND_TRIPS = 3


async def test_a_held_send_reads_the_frontier_it_holds_locked(
    census_worlds: tuple[BenchWorld, BenchWorld],
) -> None:
    exchange = await on_the_wire(
        census_worlds, _OPS["gated send, hot thread"], "service", held=True
    )

    assert exchange.round_trips <= HELD_ROUND_TRIPS, (exchange.round_trips, exchange.statements)


#: A run patch: the follow-ups its ops name are locked in one statement, and their
#: messages are read in its round trip (6 round trips whatever the ops, from 7 for one op
#: and 25 for ten).
PATCH_ROUND_TRIPS = 6


def _patches(followups: int) -> Operation:
    """An agent acknowledging every open follow-up of its run, as delivered, in one patch."""
    seen: dict[uuid.UUID, tuple[int, list[uuid.UUID]]] = {}

    async def prepare(world: BenchWorld, workers: Sequence[Worker], n: int) -> list[list[Item]]:
        worker = workers[0]
        runs = await running_runs(world, worker, n, followups)
        for run_id in runs:
            view = await world.services.runs.get(worker.agent.principal, run_id)
            seen[run_id] = (view.run.version, sorted(view.followups))
        return [[Item(worker=worker, run_id=r) for r in runs]]

    async def patch(world: BenchWorld, http: object, item: Item) -> object:
        assert item.run_id is not None
        version, messages = seen[item.run_id]
        return await world.services.runs.patch(
            item.worker.agent.principal,
            item.run_id,
            version,
            [FollowupOp(message_id=m, value=FollowupState.DELIVERED) for m in messages],
        )

    return Operation(
        name=f"patch, {followups} ops", prepare=prepare, service=patch, raw=patch, http=None
    )


async def test_a_run_patch_takes_the_same_round_trips_whatever_its_ops(
    census_worlds: tuple[BenchWorld, BenchWorld],
) -> None:
    found = {ops: await on_the_wire(census_worlds, _patches(ops), "service") for ops in (1, 10)}

    assert found[1].round_trips == found[10].round_trips <= PATCH_ROUND_TRIPS, found
    # Every op changed its follow-up: the patch did its work on both counts.
    assert all(exchange.statements > 0 for exchange in found.values())


def _refused_patches(unknown: int) -> Operation:
    """An agent's patch naming `unknown` messages that are no follow-ups of its run."""

    async def prepare(world: BenchWorld, workers: Sequence[Worker], n: int) -> list[list[Item]]:
        worker = workers[0]
        return [[Item(worker=worker, run_id=r) for r in await running_runs(world, worker, n, 1)]]

    async def patch(world: BenchWorld, http: object, item: Item) -> object:
        assert item.run_id is not None
        view = await world.services.runs.get(item.worker.agent.principal, item.run_id)
        ops = [
            FollowupOp(message_id=uuid.uuid4(), value=FollowupState.DELIVERED)
            for _ in range(unknown)
        ]
        with pytest.raises(ValidationFailed) as refused:
            await world.services.runs.patch(
                item.worker.agent.principal, item.run_id, view.run.version, ops
            )
        return refused.value

    return Operation(
        name=f"patch, {unknown} unknown", prepare=prepare, service=patch, raw=patch, http=None
    )


async def test_a_refused_patch_reads_nothing_for_the_ids_it_names(
    census_worlds: tuple[BenchWorld, BenchWorld],
) -> None:
    found = {
        ops: await on_the_wire(census_worlds, _refused_patches(ops), "service") for ops in (1, 50)
    }

    # Any id may be named: the ids cost one array of the lock's statement, no read each.
    assert found[1] == found[50], found
