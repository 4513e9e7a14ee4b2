"""The example agent of docs/agents.md answers in a thread longer than one history page.

Served as in `tests.integration.test_agent_example`, but with a small
``page.default_limit``: the thread holds more than two pages before the mention. An
agent that read only the first page would be held by the freshness gate on every
attempt and fail its run; the example reads to the latest message and answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.integration.test_agent_example import BOUND_SECONDS, World, _example
from tests.live_server import served_app
from tests.support.fakes import TEST_KEY, FakeClock, SequentialIds
from turnkeeper.adapters.memory import MemoryUnitOfWorkFactory
from turnkeeper.adapters.tokens import JwtSigner
from turnkeeper.application.bootstrap import build_services
from turnkeeper.application.demo import build_demo_world
from turnkeeper.application.settings import Settings
from turnkeeper.domain.messaging import MessageDraft, Origin
from turnkeeper.domain.runs import RunState

#: The server's page size when a read names none.
PAGE_LIMIT = 3
#: Messages written before the mention: more than two pages.
EARLIER_MESSAGES = PAGE_LIMIT * 2 + 1
QUESTION = "Can you check the invoice on example.com?"


@pytest.fixture
async def served() -> AsyncIterator[World]:
    services = build_services(
        MemoryUnitOfWorkFactory(),
        Settings(page_default_limit=PAGE_LIMIT),
        FakeClock(),
        SequentialIds(),
        JwtSigner(TEST_KEY),
    )
    world = await build_demo_world(services)
    async with served_app(services) as app:
        yield World(url=app.url, services=services, world=world)


async def test_the_example_agent_answers_a_mention_at_the_end_of_a_long_thread(
    served: World,
) -> None:
    conversation = served.services.conversation
    alex = served.world.principal("alex")
    robin = served.world.principal("robin")
    lotse = served.world.principal("lotse")
    for number in range(EARLIER_MESSAGES):
        await conversation.create_message(
            alex if number % 2 else robin,
            served.eskalation(),
            MessageDraft(client_msg_id=f"note-{number}", content=f"Note {number}"),
        )
    agent = asyncio.create_task(
        _example().serve(served.url, served.world.agents["lotse"].token, handled=1)
    )
    posted = await conversation.create_message(
        alex,
        served.eskalation(),
        MessageDraft(client_msg_id="ask-1", content=QUESTION, mentions=(lotse.id,)),
    )
    assert posted.message.thread_seq > PAGE_LIMIT * 2
    assert await asyncio.wait_for(agent, BOUND_SECONDS) == 1

    after_question = await conversation.list_messages(
        alex, served.eskalation(), after_seq=posted.message.thread_seq
    )
    # The run's anchor (origin system) is the agent's too; its answer is the agent message.
    answers = [
        m.content
        for m in after_question.messages
        if m.author_id == lotse.id and m.origin is Origin.AGENT
    ]
    assert answers == [f"You wrote {len(QUESTION.split())} words. Noted, I am on it."]
    (run_id,) = [m.run_id for m in after_question.messages if m.run_id is not None]
    run = await served.services.runs.get(alex, run_id)
    assert run.run.state is RunState.COMPLETED
    assert run.run.triggering_message_id == posted.message.id
