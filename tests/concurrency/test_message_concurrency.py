"""Concurrent writers into one thread: thread_seq without gaps, idempotency races."""

from __future__ import annotations

import asyncio

from tests.support.scenario import main_thread
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.domain.messaging import MessageDraft

#: Concurrent posts into one thread; above the pool size so that writers queue on the lock.
WRITERS = 50
#: Concurrent identical requests racing on one (author, client_msg_id).
IDENTICAL = 20


async def test_concurrent_posts_get_consecutive_seqs(services: Services, world: DemoWorld) -> None:
    thread_id = main_thread(world, "eskalation")
    authors = [world.principal(h) for h in ("alex", "robin", "lotse")]

    async def post(i: int) -> int:
        posted = await services.conversation.create_message(
            authors[i % len(authors)],
            thread_id,
            MessageDraft(client_msg_id=f"c-{i}", content=f"message {i}"),
        )
        return posted.message.thread_seq

    seqs = await asyncio.gather(*(post(i) for i in range(WRITERS)))
    assert sorted(seqs) == list(range(1, WRITERS + 1))
    page = await services.conversation.list_messages(
        world.principal("robin"), thread_id, limit=WRITERS + 1
    )
    assert [m.thread_seq for m in page.messages] == list(range(1, WRITERS + 1))
    thread = await services.conversation.get_thread(world.principal("robin"), thread_id)
    assert thread.latest_seq == WRITERS


async def test_identical_requests_store_one_message(services: Services, world: DemoWorld) -> None:
    thread_id = main_thread(world, "eskalation")
    alex = world.principal("alex")
    same = MessageDraft(client_msg_id="same", content="only once")
    results = await asyncio.gather(
        *(services.conversation.create_message(alex, thread_id, same) for _ in range(IDENTICAL))
    )
    assert len({r.message.id for r in results}) == 1
    assert sum(not r.replayed for r in results) == 1
    page = await services.conversation.list_messages(alex, thread_id)
    assert len(page.messages) == 1
    events = await services.conversation.list_events(alex)
    assert len(events.events) == 1
