"""The benchmark's floor statements do what the services do, in the round trips claimed.

A floor that skipped work would make every ratio against it a lie, so each floor runs
beside its service on twin set-ups and both must leave the same rows and append the
same events (ids, client ids, digests and times aside: they differ by construction).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bench import floor
from bench.harness import open_traced_pool
from bench.operations import last_event_seq, running_runs
from bench.roundtrips import census_pool, count_trace, counted
from bench.world import BenchWorld, Worker, build_world, rebind
from turnkeeper.application.services.agent_send import AgentSend, SendFreshness
from turnkeeper.domain.messaging import MessageDraft
from turnkeeper.domain.runs import RunState
from turnkeeper.domain.world import thread_target_key

TEXT = "Sam, the report is ready."
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
#: Members that differ between twin set-ups by construction.
_VARYING = {
    "client_msg_id": "<cid>",
    "client_message_id": "<cid>",  # of message.held
    "digest": "<digest>",
    "created_at": "<time>",
}


@pytest.fixture
async def bench_world(pg_conninfo: str) -> AsyncIterator[BenchWorld]:
    pool = await open_traced_pool(pg_conninfo, 4)
    try:
        world = await build_world(pool, 1)
        await floor.ensure_floor_sequence(world)
        yield world
    finally:
        await pool.close()


def _worker(world: BenchWorld) -> Worker:
    return world.workers["raw"][0]


async def _rows(world: BenchWorld, query: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    async with world.pool.connection() as conn:
        cur = await conn.execute(query, params)
        names = [d.name for d in cur.description or ()]
        rows = [dict(zip(names, row, strict=True)) for row in await cur.fetchall()]
        await conn.commit()
    return rows


async def effects(world: BenchWorld, threads: list[uuid.UUID], after: int) -> dict[str, Any]:
    """What operations left in threads, with the events about them after a seq."""
    where = {"threads": threads, "after": after}
    return {
        "events": await _rows(
            world,
            "SELECT type, actor_id, actor_kind, space_id, channel_id, thread_id, resource_kind,"
            " resource_id, resource_version, audience_id, restricted_to, payload"
            " FROM events WHERE seq > %(after)s AND thread_id = ANY(%(threads)s) ORDER BY seq",
            where,
        ),
        "threads": await _rows(
            world,
            "SELECT id, latest_seq, state, has_restricted FROM threads"
            " WHERE id = ANY(%(threads)s) ORDER BY array_position(%(threads)s, id)",
            where,
        ),
        "messages": await _rows(
            world,
            "SELECT id, thread_id, thread_seq, author_id, origin, kind, content, mentions,"
            " client_msg_id, digest, trigger_state, trigger_state_reason, run_id, version"
            " FROM messages WHERE thread_id = ANY(%(threads)s)"
            " ORDER BY array_position(%(threads)s, thread_id), thread_seq",
            where,
        ),
        "runs": await _rows(
            world,
            "SELECT id, thread_id, agent_id, state, state_reason, triggering_message_id,"
            " triggered_by, version, cancel_requested FROM runs"
            " WHERE thread_id = ANY(%(threads)s) ORDER BY created_at, id",
            where,
        ),
        "followups": await _rows(
            world,
            "SELECT f.run_id, f.message_id, f.state FROM run_followups f"
            " JOIN runs r ON r.id = f.run_id WHERE r.thread_id = ANY(%(threads)s)"
            " ORDER BY f.message_id",
            where,
        ),
    }


def normalized(value: Any, ids: dict[str, str] | None = None, key: str = "") -> Any:
    """Ids as their order of first appearance; client ids, digests and times masked."""
    ids = {} if ids is None else ids
    if key in _VARYING and value is not None:
        return _VARYING[key]
    if isinstance(value, dict):
        return {k: normalized(v, ids, k) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalized(v, ids) for v in value]
    if isinstance(value, uuid.UUID) or (isinstance(value, str) and _UUID.match(value)):
        return ids.setdefault(str(value), f"#{len(ids)}")
    return value


async def test_a_plain_message_writes_what_create_message_writes(bench_world: BenchWorld) -> None:
    w = _worker(bench_world)
    service_thread, floor_thread, plain_thread = [
        await bench_world.quiet_thread(w) for _ in range(3)
    ]
    start = await last_event_seq(bench_world)
    await bench_world.services.conversation.create_message(
        w.person.principal, service_thread, MessageDraft(client_msg_id=w.cid("m"), content=TEXT)
    )
    middle = await last_event_seq(bench_world)
    path, seq = await floor.create_message(bench_world, w, floor_thread, w.cid("m"), TEXT)
    end = await last_event_seq(bench_world)
    plain = await floor.create_message(bench_world, w, plain_thread, w.cid("m"), TEXT, runs=False)

    assert (path, seq, plain) == ("plain", 2, ("plain", 2))
    expected = normalized(await effects(bench_world, [service_thread], start))
    assert expected["events"]
    for thread, after in ((floor_thread, middle), (plain_thread, end)):
        assert normalized(await effects(bench_world, [thread], after)) == expected


async def test_the_floor_append_with_the_counter_writes_the_service_s_rows(
    bench_world: BenchWorld,
) -> None:
    w = _worker(bench_world)
    service_thread, floor_thread, bare_thread = [
        await bench_world.quiet_thread(w) for _ in range(3)
    ]
    start = await last_event_seq(bench_world)
    await bench_world.services.conversation.create_message(
        w.person.principal, service_thread, MessageDraft(client_msg_id=w.cid("m"), content=TEXT)
    )
    middle = await last_event_seq(bench_world)

    assert await floor.append_one_statement(bench_world, w, floor_thread, counter=True) == 2
    assert await floor.append_one_statement(bench_world, w, bare_thread) == 2
    assert await floor.append_in_transaction(bench_world, w, bare_thread) == 3

    service = await effects(bench_world, [service_thread], start)
    assert normalized(await effects(bench_world, [floor_thread], middle)) == normalized(service)
    bare = await _rows(
        bench_world,
        "SELECT seq, payload FROM events WHERE thread_id = %(t)s AND seq < 0 ORDER BY seq DESC",
        {"t": bare_thread},
    )
    assert [normalized(r["payload"]) for r in bare[:1]] == [
        normalized(service["events"][0]["payload"])
    ]
    assert [r["payload"]["message"]["thread_seq"] for r in bare] == [2, 3]


async def test_a_message_that_opens_a_run_writes_what_the_service_writes(
    bench_world: BenchWorld,
) -> None:
    w = _worker(bench_world)
    service_thread = await bench_world.operated_thread(w)
    floor_thread = await bench_world.operated_thread(w)
    start = await last_event_seq(bench_world)
    await bench_world.services.conversation.create_message(
        w.person.principal, service_thread, MessageDraft(client_msg_id=w.cid("m"), content=TEXT)
    )
    middle = await last_event_seq(bench_world)

    assert await floor.create_message(bench_world, w, floor_thread, w.cid("m"), TEXT) == (
        "run",
        2,
    )

    expected = normalized(await effects(bench_world, [service_thread], start))
    assert [e["type"] for e in expected["events"]] == [
        "message.created",
        "message.created",
        "message.updated",
        "agent.invocation",
    ]
    assert normalized(await effects(bench_world, [floor_thread], middle)) == expected


async def test_a_floor_declines_what_it_does_not_implement_and_writes_nothing(
    bench_world: BenchWorld,
) -> None:
    w = _worker(bench_world)
    operated = await bench_world.operated_thread(w)
    await bench_world.human(w, operated)  # opens a run: the next message is a follow-up
    start = await last_event_seq(bench_world)
    before = await effects(bench_world, [operated], start)

    with pytest.raises(floor.FloorDeclined, match="not_handled"):
        await floor.create_message(bench_world, w, operated, w.cid("m"), TEXT)
    with pytest.raises(floor.FloorDeclined, match="not_handled"):
        await floor.create_message(bench_world, w, operated, w.cid("m"), TEXT, runs=False)

    assert await effects(bench_world, [operated], start) == before


async def _service_send(world: BenchWorld, w: Worker, thread: uuid.UUID, seen: int) -> Any:
    return await world.services.agent_send.send(
        w.agent.principal,
        AgentSend(
            target=thread,
            content="Alex, here is the summary.",
            client_message_id=w.cid("s"),
            freshness=SendFreshness(target_key=thread_target_key(thread), seen_up_to_seq=seen),
        ),
    )


@pytest.mark.parametrize(("seen", "state"), [(1, "sent"), (0, "held")])
async def test_a_gated_send_writes_what_the_service_writes(
    bench_world: BenchWorld, seen: int, state: str
) -> None:
    w = _worker(bench_world)
    service_thread = await bench_world.quiet_thread(w)
    floor_thread = await bench_world.quiet_thread(w)
    start = await last_event_seq(bench_world)
    outcome = await _service_send(bench_world, w, service_thread, seen)
    middle = await last_event_seq(bench_world)

    answer = await floor.gated_send(
        bench_world, w, floor_thread, seen, w.cid("s"), "Alex, here is the summary."
    )

    assert (outcome.state.value, outcome.latest_seq) == (state, answer[1])
    assert answer[0] == state
    expected = normalized(await effects(bench_world, [service_thread], start))
    assert normalized(await effects(bench_world, [floor_thread], middle)) == expected


async def _running_run(world: BenchWorld, w: Worker, followups: int) -> uuid.UUID:
    w.feed_after = await last_event_seq(world)
    (run_id,) = await running_runs(world, w, 1, followups)
    return run_id


async def _thread_of(world: BenchWorld, run_id: uuid.UUID) -> uuid.UUID:
    rows = await _rows(world, "SELECT thread_id FROM runs WHERE id = %(r)s", {"r": run_id})
    return uuid.UUID(str(rows[0]["thread_id"]))


@pytest.mark.parametrize("followups", [0, 3])
async def test_a_run_finish_settles_as_the_service_settles(
    bench_world: BenchWorld, followups: int
) -> None:
    w = _worker(bench_world)
    service_run = await _running_run(bench_world, w, followups)
    floor_run = await _running_run(bench_world, w, followups)
    start = await last_event_seq(bench_world)
    view = await bench_world.services.runs.finish(
        w.agent.principal, service_run, RunState.COMPLETED, None
    )
    middle = await last_event_seq(bench_world)

    follow_on = await floor.finish_run(bench_world, w, floor_run)

    assert (follow_on is not None) == bool(followups) == bool(view.followups)
    service_thread = await _thread_of(bench_world, service_run)
    floor_thread = await _thread_of(bench_world, floor_run)
    expected = normalized(await effects(bench_world, [service_thread], start))
    assert normalized(await effects(bench_world, [floor_thread], middle)) == expected


async def test_a_poll_delivers_and_queues_as_the_service_does(bench_world: BenchWorld) -> None:
    w = _worker(bench_world)
    service_thread = await bench_world.operated_thread(w)
    floor_thread = await bench_world.operated_thread(w)
    before_service = await last_event_seq(bench_world)
    await bench_world.human(w, service_thread)
    page = await bench_world.services.runs.poll(w.agent.principal, after=before_service, limit=1)
    start = await last_event_seq(bench_world)
    before_floor = start
    await bench_world.human(w, floor_thread)
    middle = await last_event_seq(bench_world)

    next_after, delivered = await floor.poll(bench_world, w, before_floor)

    assert (len(page.deliveries), delivered) == (1, 1)
    assert next_after == middle
    expected = await effects(bench_world, [service_thread], before_service)
    found = await effects(bench_world, [floor_thread], before_floor)
    assert normalized(found) == normalized(expected)
    cursor = await _rows(
        bench_world,
        "SELECT delivered_seq FROM agent_cursors WHERE agent_id = %(a)s",
        {"a": w.agent.principal.id},
    )
    assert cursor == [{"delivered_seq": next_after}]


async def test_the_floors_take_the_round_trips_the_table_claims(
    bench_world: BenchWorld, pg_conninfo: str
) -> None:
    w = _worker(bench_world)
    pool = await census_pool(pg_conninfo)
    try:
        traced = rebind(bench_world, pool)
        threads = [await bench_world.quiet_thread(w) for _ in range(2)]
        found = []
        for thread in threads:  # the second one on a connection that prepared them
            async with counted(pool) as one:
                await floor.create_message(traced, w, thread, w.cid("m"), TEXT)
            async with counted(pool) as five:
                await floor.append_in_transaction(traced, w, thread)
            run_id = await _running_run(bench_world, w, 2)
            async with counted(pool) as pipeline:
                await floor.finish_run(traced, w, run_id)
            found.append((one.round_trips, five.round_trips, pipeline.round_trips))
    finally:
        await pool.close()

    assert found[1] == (1, 5, 1)
    assert (one.statements, five.statements, pipeline.statements) == (1, 5, 4)


def test_a_trace_counts_ready_for_query_as_round_trips() -> None:
    trace = "\n".join(
        [
            'F\t13\tQuery\t "BEGIN"',
            "B\t5\tReadyForQuery\t T",
            'F\t22\tBind\t "" "s1" 0 0 1 0',
            'F\t9\tExecute\t "" 0',
            'F\t22\tBind\t "" "s2" 0 0 1 0',
            'F\t9\tExecute\t "" 0',
            "F\t4\tSync",
            "B\t5\tReadyForQuery\t T",
        ]
    )

    counts = count_trace(trace)

    assert (counts.round_trips, counts.statements) == (2, 3)
