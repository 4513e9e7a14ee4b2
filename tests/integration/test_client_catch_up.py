"""The agent runtime client catching up against the real HTTP application.

On the memory adapter and on PostgreSQL, with a small ``page.default_limit`` so that a
thread of a few messages is longer than one page: `read_history_to_latest` covers the
latest seq and so ends a hold that reading the first page again never ends, and a poll
without a cursor reads from the acknowledged position (an acknowledged invocation is
not delivered again).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from turnkeeper.adapters.client import AgentRuntimeClient
from turnkeeper.adapters.http import create_app
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.settings import Settings
from turnkeeper.domain.freshness import SendState
from turnkeeper.domain.messaging import MessageDraft

BASE_URL = "http://turnkeeper.example.com"
#: The server's page size when a read names none.
PAGE_LIMIT = 3
#: Messages of the long thread: more than two pages.
LONG_THREAD = PAGE_LIMIT * 2 + 1


@pytest.fixture
def settings() -> Settings:
    """Short history pages, so that a thread of a few messages spans several."""
    return Settings(page_default_limit=PAGE_LIMIT)


@pytest.fixture
async def lotse(services: Services, world: DemoWorld) -> AsyncIterator[AgentRuntimeClient]:
    transport = httpx.ASGITransport(app=create_app(services, services.settings))
    async with AgentRuntimeClient(
        BASE_URL, world.agents["lotse"].token, transport=transport
    ) as client:
        yield client


def eskalation(world: DemoWorld) -> uuid.UUID:
    thread_id = world.channels["eskalation"].main_thread_id
    assert thread_id is not None
    return thread_id


async def long_thread(services: Services, world: DemoWorld) -> tuple[uuid.UUID, int]:
    """Posts of Alex and Robin until the thread is `LONG_THREAD` seqs long."""
    thread_id = eskalation(world)
    latest = 0
    for number in range(LONG_THREAD):
        author = world.principal("alex" if number % 2 else "robin")
        posted = await services.conversation.create_message(
            author,
            thread_id,
            MessageDraft(client_msg_id=f"note-{number}", content=f"Note {number} on example.com"),
        )
        latest = posted.message.thread_seq
    return thread_id, latest


async def test_reading_to_the_latest_ends_a_hold_in_a_thread_longer_than_a_page(
    services: Services, world: DemoWorld, lotse: AgentRuntimeClient
) -> None:
    thread_id, latest = await long_thread(services, world)
    assert latest > PAGE_LIMIT
    first_page = await lotse.read_history(thread_id)
    assert first_page.covers_through_seq == PAGE_LIMIT
    held = await lotse.send(thread_id, "Done, Alex.", "reply-1")
    assert (held.state, held.held_locally, held.latest_seq) == (SendState.HELD, False, latest)
    # Reading the first page again covers no more: the send stays held.
    await lotse.read_history(thread_id)
    still = await lotse.send(thread_id, "Done, Alex.", "reply-1")
    assert (still.state, still.held_locally) == (SendState.HELD, True)

    caught_up = await lotse.read_history_to_latest(thread_id)
    assert caught_up.covers_through_seq == latest
    assert [m.thread_seq for m in caught_up.messages] == list(range(1, latest + 1))
    sent = await lotse.send(thread_id, "Done, Alex.", "reply-1")
    assert (sent.state, sent.accepted_seq) == (SendState.SENT, latest + 1)


async def test_a_poll_without_a_cursor_does_not_deliver_an_acknowledged_event_again(
    services: Services, world: DemoWorld, lotse: AgentRuntimeClient
) -> None:
    await services.conversation.create_message(
        world.principal("alex"),
        eskalation(world),
        MessageDraft(
            client_msg_id="ask-1",
            content="Can you check the invoice?",
            mentions=(world.principal("lotse").id,),
        ),
    )
    page = await lotse.poll_events()
    assert [e.type for e in page.events] == ["agent.invocation"]
    await lotse.ack(page.next_after)

    again = await lotse.poll_events()
    assert again.events == ()
