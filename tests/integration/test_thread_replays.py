"""createThread's replay: only the same title, content, reply and audience replay.

The digest of a thread's first message covers the title as a member of its own: text
moved between title and content, or a reply_to added, is another request (409
idempotency_conflict), never a replay of the thread created first.
"""

from __future__ import annotations

import uuid

import pytest

from tests.support.scenario import main_thread
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.services.conversation import CreatedThread
from turnkeeper.domain.errors import IdempotencyConflict
from turnkeeper.domain.messaging import MessageDraft


async def _create(
    services: Services,
    world: DemoWorld,
    title: str | None,
    content: str,
    reply_to_id: uuid.UUID | None = None,
) -> CreatedThread:
    return await services.conversation.create_thread(
        world.principal("alex"),
        world.channels["reports"].id,
        title=title,
        first_message=MessageDraft(client_msg_id="T1", content=content, reply_to_id=reply_to_id),
    )


async def test_the_same_request_replays_the_thread(services: Services, world: DemoWorld) -> None:
    first = await _create(services, world, "Plans\nfor Sam", "Draft")
    again = await _create(services, world, "Plans\nfor Sam", "Draft")
    assert again.replayed is True
    assert again.thread == first.thread


#: Pairs of (title, content) that read the same once joined by a line break.
SPLITS = [(("Plans\nfor Sam", "Draft"), ("Plans", "for Sam\nDraft"))]


@pytest.mark.parametrize("reverse", [False, True])
async def test_text_moved_between_title_and_content_is_a_conflict(
    services: Services, world: DemoWorld, reverse: bool
) -> None:
    ((first_title, first_content), (title, content)) = SPLITS[0]
    if reverse:
        first_title, first_content, title, content = title, content, first_title, first_content
    await _create(services, world, first_title, first_content)
    with pytest.raises(IdempotencyConflict):
        await _create(services, world, title, content)


async def test_a_reply_to_added_on_a_retry_is_a_conflict(
    services: Services, world: DemoWorld
) -> None:
    await _create(services, world, "Plans", "Draft")
    with pytest.raises(IdempotencyConflict):
        await _create(services, world, "Plans", "Draft", reply_to_id=uuid.uuid4())


#: Titles that count as none (docs/messages.md): each retried with another of them.
NO_TITLES = [None, "", "  ", "\t\n"]


@pytest.mark.parametrize("retried", NO_TITLES)
@pytest.mark.parametrize("first", NO_TITLES)
async def test_titles_that_count_as_none_replay_each_other(
    services: Services, world: DemoWorld, first: str | None, retried: str | None
) -> None:
    created = await _create(services, world, first, "Draft")
    again = await _create(services, world, retried, "Draft")
    assert again.replayed is True
    assert again.thread == created.thread
    assert created.thread.title is None


def _restricted(world: DemoWorld, client_msg_id: str, audience: list[str]) -> MessageDraft:
    return MessageDraft(
        client_msg_id=client_msg_id,
        content="Only for Sam",
        restricted_to=tuple(world.principal(h).id for h in audience),
    )


@pytest.mark.parametrize(
    ("first", "retried"),
    [(["sam"], ["sam", "alex"]), (["sam", "alex"], ["sam"]), (["sam"], ["alex", "sam", "alex"])],
)
async def test_an_audience_with_or_without_its_author_replays(
    services: Services, world: DemoWorld, first: list[str], retried: list[str]
) -> None:
    # The stored audience always holds the author: a retry with the audience the answer
    # showed is the same request.
    alex = world.principal("alex")
    thread = main_thread(world, "allgemein")
    posted = await services.conversation.create_message(
        alex, thread, _restricted(world, "R1", first)
    )
    again = await services.conversation.create_message(
        alex, thread, _restricted(world, "R1", retried)
    )
    assert again.replayed is True
    assert again.message.id == posted.message.id
    created = await services.conversation.create_thread(
        alex,
        world.channels["reports"].id,
        title=None,
        first_message=_restricted(world, "R2", first),
    )
    replayed = await services.conversation.create_thread(
        alex,
        world.channels["reports"].id,
        title=None,
        first_message=_restricted(world, "R2", retried),
    )
    assert replayed.replayed is True
    assert (replayed.thread.id, replayed.message.id) == (created.thread.id, created.message.id)


async def test_another_audience_is_a_conflict(services: Services, world: DemoWorld) -> None:
    alex = world.principal("alex")
    thread = main_thread(world, "allgemein")
    await services.conversation.create_message(alex, thread, _restricted(world, "R3", ["sam"]))
    with pytest.raises(IdempotencyConflict):
        await services.conversation.create_message(
            alex, thread, _restricted(world, "R3", ["robin"])
        )
