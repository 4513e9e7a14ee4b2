"""createThread's replay: only the same title, content, reply and audience replay.

The digest of a thread's first message covers the title as a member of its own: text
moved between title and content, or a reply_to added, is another request (409
idempotency_conflict), never a replay of the thread created first.
"""

from __future__ import annotations

import uuid

import pytest

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
