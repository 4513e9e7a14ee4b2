"""An agent's thread with a restricted first message gets no auto title (memory, PostgreSQL).

Issue 16 item 2: the first line of a restricted first message became the title, shown to
every reader through GET /v1/threads/{id} and ``thread.created``.
"""

from __future__ import annotations

import pytest

from tests.support.scenario import draft
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.domain.events import EventType
from turnkeeper.domain.world import TitleSource

SECRET = "Salary of Sam\nnot for everyone"


async def test_a_restricted_first_message_gives_no_title(
    services: Services, world: DemoWorld
) -> None:
    lotse, alex = world.principal("lotse"), world.principal("alex")
    created = await services.conversation.create_thread(
        lotse,
        world.channels["reports"].id,
        title=None,
        first_message=draft("secret", SECRET, restricted_to=(world.principal("robin").id,)),
    )
    assert created.thread.title is None
    assert created.thread.title_source is TitleSource.AUTO
    seen = await services.conversation.get_thread(alex, created.thread.id)
    assert seen.title is None
    events = (await services.conversation.list_events(alex, limit=500)).events
    (event,) = [
        e
        for e in events
        if e.type is EventType.THREAD_CREATED and e.resource_id == created.thread.id
    ]
    assert "title" not in event.payload["thread"]
    assert event.payload["thread"]["title_source"] == "auto"
    assert "Salary" not in repr([e.payload for e in events])


async def test_a_public_first_message_still_gives_the_auto_title(
    services: Services, world: DemoWorld
) -> None:
    created = await services.conversation.create_thread(
        world.principal("lotse"),
        world.channels["reports"].id,
        title=None,
        first_message=draft("public", "Nightly report\nall green"),
    )
    assert created.thread.title == "Nightly report"
    seen = await services.conversation.get_thread(world.principal("alex"), created.thread.id)
    assert (seen.title, seen.title_source) == ("Nightly report", TitleSource.AUTO)


async def test_a_title_the_agent_gives_is_kept_with_a_restricted_message(
    services: Services, world: DemoWorld
) -> None:
    created = await services.conversation.create_thread(
        world.principal("lotse"),
        world.channels["reports"].id,
        title="For Robin",
        first_message=draft("given", SECRET, restricted_to=(world.principal("robin").id,)),
    )
    assert created.thread.title == "For Robin"


@pytest.mark.parametrize("blank", ["", "   ", "\t"])
async def test_a_blank_title_counts_as_none_for_people_and_agents(
    services: Services, world: DemoWorld, blank: str
) -> None:
    alex, lotse = world.principal("alex"), world.principal("lotse")
    by_person = await services.conversation.create_thread(
        alex, world.channels["reports"].id, title=blank, first_message=draft("p", "Question\nmore")
    )
    by_agent = await services.conversation.create_thread(
        lotse, world.channels["reports"].id, title=blank, first_message=draft("a", "Report\nmore")
    )
    seen_person = await services.conversation.get_thread(alex, by_person.thread.id)
    seen_agent = await services.conversation.get_thread(alex, by_agent.thread.id)
    assert (seen_person.title, seen_person.title_source) == (None, TitleSource.HUMAN)
    assert (seen_agent.title, seen_agent.title_source) == ("Report", TitleSource.AUTO)


async def test_information_separators_are_text_not_white_space(
    services: Services, world: DemoWorld
) -> None:
    # An audit: content of U+001F alone was refused as missing, and an auto title ended
    # at U+001C (Python's str methods take both for white space and line breaks).
    lotse = world.principal("lotse")
    created = await services.conversation.create_thread(
        lotse,
        world.channels["reports"].id,
        title=None,
        first_message=draft("separators", "Report\x1cday one\x1f\nall green"),
    )
    assert created.thread.title == "Report\x1cday one\x1f"
    posted = await services.conversation.create_message(
        lotse, created.thread.id, draft("separator", "\x1f")
    )
    assert posted.message.content == "\x1f"
