"""The operations of the suite: how each one is prepared and run on each side.

Every operation prepares, per worker, a list of work items (threads, runs, frontiers)
through the application services, and runs one item three ways:

- ``service``: the application service called in-process;
- ``raw``: `bench.raw` (the same statements in the same transactions on psycopg);
- ``http``: the Litestar app in-process through `bench.asgi.AsgiClient`, with the
  worker's bearer token (so authentication is part of it, as for every real request).

Items are consumed: each side prepares its own, on its own workers.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs

from bench import raw
from bench.asgi import AsgiClient, AsgiResponse
from bench.harness import gather_limited
from bench.world import SETUP_CONCURRENCY, BenchWorld, Worker
from turnkeeper.adapters.postgres import queries as q
from turnkeeper.application.services.agent_send import AgentSend, SendFreshness
from turnkeeper.domain.followups import FollowupMode
from turnkeeper.domain.freshness import SendState
from turnkeeper.domain.messaging import MessageDraft
from turnkeeper.domain.runs import RunState
from turnkeeper.domain.world import thread_target_key


@attrs.define
class Item:
    """One unit of work of one worker.

    Attributes:
        worker: the worker.
        thread_id: the target thread.
        run_id: the run (answer, finish).
        sender: the frontier state of a freshness sender.
    """

    worker: Worker
    thread_id: uuid.UUID | None = None
    run_id: uuid.UUID | None = None
    sender: Sender | None = None


@attrs.define
class Sender:
    """A freshness sender: its threads and the frontier it knows of each.

    Attributes:
        known: thread id -> the latest seq the sender knows.
        sent: sends that were stored (the rest were held).
    """

    known: dict[uuid.UUID, int]
    sent: int = 0

    def learn(self, thread_id: uuid.UUID, state: str, seq: int) -> None:
        """Take the answer of a send into account.

        Args:
            thread_id: the thread.
            state: sent, already_sent or held.
            seq: accepted seq (sent) or latest seq (held).
        """
        if state == SendState.SENT.value:
            self.sent += 1
        self.known[thread_id] = seq


Run = Callable[[BenchWorld, AsgiClient, Item], Awaitable[object]]
Prepare = Callable[[BenchWorld, Sequence[Worker], int], Awaitable[list[list[Item]]]]


@attrs.frozen(kw_only=True)
class Operation:
    """An operation of the table.

    Attributes:
        name: its row label.
        prepare: makes the items of each worker (worker list, items per worker).
        service: runs an item through the application service.
        raw: runs an item as the raw psycopg loop.
        http: runs an item through the HTTP app (None: not measured over HTTP).
        ops_scale: multiplies the size's item count (expensive set-ups get fewer items).
    """

    name: str
    prepare: Prepare
    service: Run
    raw: Run
    http: Run | None
    ops_scale: float = 1.0


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def _check(response: AsgiResponse) -> dict[str, Any]:
    if response.status_code >= 300:
        raise RuntimeError(f"{response.url}: {response.status_code} {response.text}")
    body: dict[str, Any] = response.json()
    return body


async def _per_worker(
    workers: Sequence[Worker], job: Callable[[Worker], Awaitable[list[Item]]]
) -> list[list[Item]]:
    return await gather_limited([job(w) for w in workers], SETUP_CONCURRENCY)


async def last_event_seq(world: BenchWorld) -> int:
    """The seq of the newest readable event (agent feeds of new set-ups start after it)."""
    async with world.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT coalesce(max(seq), 0) FROM events WHERE seq < turnkeeper_event_horizon()"
        )
        row = await cur.fetchone()
        await conn.commit()
    return int(row[0]) if row else 0


# -- human messages ------------------------------------------------------------------------


async def _service_message(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    assert item.thread_id is not None
    return await world.services.conversation.create_message(
        item.worker.person.principal,
        item.thread_id,
        MessageDraft(client_msg_id=item.worker.cid("m"), content="Sam, the report is ready."),
    )


async def _raw_message(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    assert item.thread_id is not None
    return await raw.human_message(
        world, item.worker, item.thread_id, item.worker.cid("m"), "Sam, the report is ready."
    )


async def _http_message(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    return _check(
        await http.post(
            f"/v1/threads/{item.thread_id}/messages",
            json={"client_msg_id": item.worker.cid("m"), "content": "Sam, the report is ready."},
            headers=_bearer(item.worker.person.token),
        )
    )


async def _prepare_quiet(world: BenchWorld, workers: Sequence[Worker], n: int) -> list[list[Item]]:
    async def job(worker: Worker) -> list[Item]:
        thread = await world.quiet_thread(worker)
        return [Item(worker=worker, thread_id=thread) for _ in range(n)]

    return await _per_worker(workers, job)


async def _prepare_fresh_threads(
    world: BenchWorld, workers: Sequence[Worker], n: int
) -> list[list[Item]]:
    async def job(worker: Worker) -> list[Item]:
        return [
            Item(worker=worker, thread_id=await world.operated_thread(worker)) for _ in range(n)
        ]

    return await _per_worker(workers, job)


# -- agent answers and follow-ups ----------------------------------------------------------


async def _prepare_active_run(
    world: BenchWorld, workers: Sequence[Worker], n: int
) -> list[list[Item]]:
    """One thread per worker with a queued run of the worker's agent."""

    async def job(worker: Worker) -> list[Item]:
        thread = await world.operated_thread(worker)
        await world.human(worker, thread)
        async with world.pool.connection() as conn:
            run = await q.lock_active_run_in_thread(conn, thread_id=thread)
            await conn.commit()
        assert run is not None
        return [Item(worker=worker, thread_id=thread, run_id=run.id) for _ in range(n)]

    return await _per_worker(workers, job)


async def _service_answer(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    assert item.thread_id is not None
    return await world.services.conversation.create_message(
        item.worker.agent.principal,
        item.thread_id,
        MessageDraft(client_msg_id=item.worker.cid("a"), content="Done, Alex.", run_id=item.run_id),
    )


async def _raw_answer(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    assert item.thread_id is not None
    assert item.run_id is not None
    return await raw.agent_answer(
        world, item.worker, item.thread_id, item.run_id, item.worker.cid("a"), "Done, Alex."
    )


async def _http_answer(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    return _check(
        await http.post(
            f"/v1/threads/{item.thread_id}/messages",
            json={
                "client_msg_id": item.worker.cid("a"),
                "content": "Done, Alex.",
                "run_id": str(item.run_id),
            },
            headers=_bearer(item.worker.agent.token),
        )
    )


async def _raw_followup(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    assert item.thread_id is not None
    return await raw.human_message(
        world, item.worker, item.thread_id, item.worker.cid("m"), "Sam, the report is ready."
    )


# -- run finish ----------------------------------------------------------------------------

#: Empty feed pages the finish rows' set-up polls again before it gives up: the event log
#: holds committed invocations back while a write with a lower transaction id is still
#: open (ADR 0020), so under concurrent set-up a page can be empty for a moment.
SETUP_EMPTY_POLLS = 200
#: Seconds between two polls of an empty page in that set-up (untimed).
SETUP_POLL_PAUSE_SECONDS = 0.02


async def running_runs(
    world: BenchWorld, worker: Worker, count: int, followups: int
) -> list[uuid.UUID]:
    """Runs of the worker's agent, started, each with `followups` open follow-ups.

    Args:
        world: the world.
        worker: the worker.
        count: how many runs.
        followups: open follow-ups per run.

    Returns:
        The run ids.
    """
    threads = [await world.operated_thread(worker) for _ in range(count)]
    for thread in threads:
        await world.human(worker, thread)
    tokens: dict[uuid.UUID, str] = {}
    empty = 0
    while len(tokens) < count:
        page = await world.services.runs.poll(
            worker.agent.principal,
            after=worker.feed_after,
            limit=world.services.settings.page_max_limit,
        )
        if not page.deliveries and page.next_after == worker.feed_after:
            empty += 1
            if empty > SETUP_EMPTY_POLLS:
                raise RuntimeError("set-up: the invocations did not arrive")
            await asyncio.sleep(SETUP_POLL_PAUSE_SECONDS)
            continue
        empty = 0
        worker.feed_after = page.next_after
        for delivery in page.deliveries:
            if delivery.invocation_token is not None:
                tokens[delivery.event.resource_id] = delivery.invocation_token
    for run_id, token in tokens.items():
        await world.services.runs.start(worker.agent.principal, run_id, token)
    for thread in threads:
        for i in range(followups):
            await world.human(worker, thread, f"one more thing, number {i}")
    return list(tokens)


def _prepare_finish(followups: int, mode: FollowupMode = FollowupMode.NONE) -> Prepare:
    # Every finish row reports its agents' follow-up mode first: a steer row leaves its
    # workers in steer, and the next row must not inherit that.
    reported = None if mode is FollowupMode.NONE else mode.value

    async def prepare(world: BenchWorld, workers: Sequence[Worker], n: int) -> list[list[Item]]:
        start = await last_event_seq(world)

        async def job(worker: Worker) -> list[Item]:
            await world.services.agent_feed.heartbeat(worker.agent.principal, reported)
            worker.feed_after = max(worker.feed_after, start)
            runs = await running_runs(world, worker, n, followups)
            return [Item(worker=worker, run_id=r) for r in runs]

        return await _per_worker(workers, job)

    return prepare


async def _service_finish(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    assert item.run_id is not None
    return await world.services.runs.finish(
        item.worker.agent.principal, item.run_id, RunState.COMPLETED, None
    )


async def _raw_finish(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    assert item.run_id is not None
    return await raw.finish_run(world, item.worker, item.run_id)


async def _raw_finish_steer(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    assert item.run_id is not None
    return await raw.finish_run(world, item.worker, item.run_id, steer=True)


async def _http_finish(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    return _check(
        await http.post(
            f"/v1/runs/{item.run_id}/finish",
            json={"state": "completed"},
            headers=_bearer(item.worker.agent.token),
        )
    )


# -- the freshness gate --------------------------------------------------------------------


def _prepare_sends(*, hot: bool, threads_each: int) -> Prepare:
    async def prepare(world: BenchWorld, workers: Sequence[Worker], n: int) -> list[list[Item]]:
        shared = [await world.quiet_thread(workers[0])] if hot else []

        async def job(worker: Worker) -> list[Item]:
            threads = shared or [await world.quiet_thread(worker) for _ in range(threads_each)]
            sender = Sender(known=dict.fromkeys(threads, 1))
            return [
                Item(worker=worker, thread_id=threads[i % len(threads)], sender=sender)
                for i in range(n)
            ]

        return await _per_worker(workers, job)

    return prepare


async def _service_send(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    assert item.thread_id is not None
    assert item.sender is not None
    outcome = await world.services.agent_send.send(
        item.worker.agent.principal,
        AgentSend(
            target=item.thread_id,
            content="Alex, here is the summary.",
            client_message_id=item.worker.cid("s"),
            freshness=SendFreshness(
                target_key=thread_target_key(item.thread_id),
                seen_up_to_seq=item.sender.known[item.thread_id],
            ),
        ),
    )
    item.sender.learn(item.thread_id, outcome.state.value, outcome.latest_seq)
    return outcome


async def _raw_send(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    assert item.thread_id is not None
    assert item.sender is not None
    state, seq = await raw.gated_send(
        world,
        item.worker,
        item.thread_id,
        item.sender.known[item.thread_id],
        item.worker.cid("s"),
        "Alex, here is the summary.",
    )
    item.sender.learn(item.thread_id, state, seq)
    return state


async def _http_send(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    assert item.thread_id is not None
    assert item.sender is not None
    body = _check(
        await http.post(
            "/v1/agent/send",
            json={
                "target": str(item.thread_id),
                "content": "Alex, here is the summary.",
                "client_message_id": item.worker.cid("s"),
                "freshness": {
                    "target_key": thread_target_key(item.thread_id),
                    "seen_up_to_seq": item.sender.known[item.thread_id],
                },
            },
            headers=_bearer(item.worker.agent.token),
        )
    )
    item.sender.learn(item.thread_id, str(body["state"]), int(body["latest_seq"]))
    return body


# -- the agent feed ------------------------------------------------------------------------


async def _prepare_poll(world: BenchWorld, workers: Sequence[Worker], n: int) -> list[list[Item]]:
    start = await last_event_seq(world)

    async def job(worker: Worker) -> list[Item]:
        worker.feed_after = max(worker.feed_after, start)
        for _ in range(n):
            await world.human(worker, await world.operated_thread(worker))
        return [Item(worker=worker) for _ in range(n)]

    return await _per_worker(workers, job)


async def _service_poll(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    worker = item.worker
    page = await world.services.runs.poll(worker.agent.principal, after=worker.feed_after, limit=1)
    if len(page.deliveries) != 1 or page.deliveries[0].invocation_token is None:
        raise RuntimeError("poll: expected one invocation with a token")
    worker.feed_after = page.next_after
    return page


async def _raw_poll(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    worker = item.worker
    worker.feed_after, delivered = await raw.poll(world, worker, worker.feed_after)
    if delivered != 1:
        raise RuntimeError("raw poll: expected one invocation with a token")
    return delivered


async def _http_poll(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    worker = item.worker
    body = _check(
        await http.get(
            "/v1/agent/events",
            params={"after": worker.feed_after, "limit": 1},
            headers=_bearer(worker.agent.token),
        )
    )
    events = body["events"]
    if len(events) != 1 or "invocation_token" not in events[0]:
        raise RuntimeError("http poll: expected one invocation with a token")
    worker.feed_after = int(body["next_after"])
    return body


# -- history ---------------------------------------------------------------------------------

#: Messages in each thread the history read pages through (one page of `HISTORY_PAGE`).
HISTORY_MESSAGES = 60
#: The page size of the history read.
HISTORY_PAGE = 50


async def _prepare_history(
    world: BenchWorld, workers: Sequence[Worker], n: int
) -> list[list[Item]]:
    async def job(worker: Worker) -> list[Item]:
        thread = await world.quiet_thread(worker)
        for i in range(HISTORY_MESSAGES - 1):
            await world.human(worker, thread, f"line {i} of the history")
        return [Item(worker=worker, thread_id=thread) for _ in range(n)]

    return await _per_worker(workers, job)


async def _service_history(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    assert item.thread_id is not None
    page = await world.services.conversation.list_messages(
        item.worker.person.principal, item.thread_id, limit=HISTORY_PAGE
    )
    if len(page.messages) != HISTORY_PAGE:
        raise RuntimeError("history: short page")
    return page


async def _raw_history(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    assert item.thread_id is not None
    return await raw.history(world, item.worker, item.thread_id, HISTORY_PAGE)


async def _http_history(world: BenchWorld, http: AsgiClient, item: Item) -> object:
    return _check(
        await http.get(
            f"/v1/threads/{item.thread_id}/messages",
            params={"limit": HISTORY_PAGE},
            headers=_bearer(item.worker.person.token),
        )
    )


#: The history read (a page of 50 of a 60-message thread): measured by the scaling run.
HISTORY = Operation(
    name="history read, 50",
    prepare=_prepare_history,
    service=_service_history,
    raw=_raw_history,
    http=_http_history,
    ops_scale=0.5,
)

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        name="message, no trigger",
        prepare=_prepare_quiet,
        service=_service_message,
        raw=_raw_message,
        http=_http_message,
    ),
    Operation(
        name="message opens run",
        prepare=_prepare_fresh_threads,
        service=_service_message,
        raw=_raw_message,
        http=_http_message,
        ops_scale=0.5,
    ),
    Operation(
        name="agent answer, run_id",
        prepare=_prepare_active_run,
        service=_service_answer,
        raw=_raw_answer,
        http=_http_answer,
    ),
    Operation(
        name="follow-up accepted",
        prepare=_prepare_active_run,
        service=_service_message,
        raw=_raw_followup,
        http=_http_message,
    ),
    Operation(
        name="finish, 0 follow-ups",
        prepare=_prepare_finish(0),
        service=_service_finish,
        raw=_raw_finish,
        http=_http_finish,
        ops_scale=0.25,
    ),
    Operation(
        name="finish, 10 follow-ups",
        prepare=_prepare_finish(10),
        service=_service_finish,
        raw=_raw_finish,
        http=_http_finish,
        ops_scale=0.1,
    ),
    Operation(
        name="finish, 100 follow-ups",
        prepare=_prepare_finish(100),
        service=_service_finish,
        raw=_raw_finish,
        http=None,
        ops_scale=0.02,
    ),
    Operation(
        name="finish, 100 follow-ups, steer",
        prepare=_prepare_finish(100, FollowupMode.STEER),
        service=_service_finish,
        raw=_raw_finish_steer,
        http=None,
        ops_scale=0.02,
    ),
    Operation(
        name="gated send, hot thread",
        prepare=_prepare_sends(hot=True, threads_each=1),
        service=_service_send,
        raw=_raw_send,
        http=_http_send,
    ),
    Operation(
        name="gated send, many threads",
        prepare=_prepare_sends(hot=False, threads_each=4),
        service=_service_send,
        raw=_raw_send,
        http=_http_send,
    ),
    Operation(
        name="agent poll + delivery",
        prepare=_prepare_poll,
        service=_service_poll,
        raw=_raw_poll,
        http=_http_poll,
        ops_scale=0.5,
    ),
)

__all__ = [
    "HISTORY",
    "OPERATIONS",
    "Item",
    "Operation",
    "Prepare",
    "Run",
    "Sender",
    "last_event_seq",
    "running_runs",
]
