"""A subscriber of `MessagePosted` refuses a message: its pointers reach the caller.

docs/embedding.md: a subscriber that raises a `ValidationFailed` refuses the message
altogether, the error reaches the caller (over HTTP a 400 with its pointers) and nothing
of the message is stored. A subscriber points into the message it was given; in a
thread's creation that message is the request's ``first_message``, and the pointer must
say so (API.md: a 400 names the offending member with its JSON pointer).
"""

from __future__ import annotations

import pytest

from tests.support.http import http_world
from tests.support.scenario import draft, main_thread, shared_events
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.bus import MessagePosted
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.ports import UnitOfWork
from turnkeeper.domain.errors import FieldError, ValidationFailed

#: The code the subscriber of these tests refuses with.
SHOUTING = "shouting"


async def no_shouting(uow: UnitOfWork, event: MessagePosted) -> None:
    """The subscriber of docs/embedding.md: refuses a message written in capitals."""
    if event.message.content.isupper():
        raise ValidationFailed([FieldError(pointer="/content", code=SHOUTING)])


async def test_a_refused_message_names_its_content_and_stores_nothing(
    services: Services, world: DemoWorld
) -> None:
    services.bus.subscribe(MessagePosted, no_shouting)
    thread_id = main_thread(world, "allgemein")
    before = len(await shared_events(services))
    with pytest.raises(ValidationFailed) as refused:
        await services.conversation.create_message(
            world.principal("alex"), thread_id, draft("s1", "HELLO")
        )
    assert [(e.pointer, e.code) for e in refused.value.errors] == [("/content", SHOUTING)]
    assert len(await shared_events(services)) == before
    thread = await services.conversation.get_thread(world.principal("alex"), thread_id)
    assert thread.latest_seq == 0


async def test_a_refused_first_message_names_it_under_first_message(
    services: Services, world: DemoWorld
) -> None:
    services.bus.subscribe(MessagePosted, no_shouting)
    alex = world.principal("alex")
    channel_id = world.channels["reports"].id
    before = len(await shared_events(services))
    with pytest.raises(ValidationFailed) as refused:
        await services.conversation.create_thread(
            alex, channel_id, title="Report", first_message=draft("s2", "HELLO")
        )
    assert [(e.pointer, e.code) for e in refused.value.errors] == [
        ("/first_message/content", SHOUTING)
    ]
    assert len(await shared_events(services)) == before
    # The same request without capitals is stored: the refusal left nothing half made.
    created = await services.conversation.create_thread(
        alex, channel_id, title="Report", first_message=draft("s2", "hello")
    )
    assert created.message.thread_seq == 1


async def test_over_http_the_refusal_is_a_400_with_the_request_pointer() -> None:
    async with http_world() as h:
        h.services.bus.subscribe(MessagePosted, no_shouting)
        created = await h.client.post(
            f"/v1/channels/{h.world.channels['reports'].id}/threads",
            json={"title": "T", "first_message": {"client_msg_id": "s3", "content": "HELLO"}},
            headers=h.headers("alex"),
        )
        assert created.status_code == 400
        assert created.json()["errors"] == [{"pointer": "/first_message/content", "code": SHOUTING}]
        posted = await h.client.post(
            f"/v1/threads/{h.main_thread('allgemein')}/messages",
            json={"client_msg_id": "s4", "content": "HELLO"},
            headers=h.headers("alex"),
        )
        assert posted.status_code == 400
        assert posted.json()["errors"] == [{"pointer": "/content", "code": SHOUTING}]
