"""A reply names a message its author may see: a restricted one is as unknown to others.

Replying to a message restricted from the author was taken while an unknown id was
refused, which told the author that the restricted message exists.
"""

from __future__ import annotations

import uuid

import pytest

from tests.support.scenario import main_thread, post
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.services.conversation import PostedMessage
from turnkeeper.domain.errors import ValidationFailed
from turnkeeper.domain.messaging import MessageDraft


async def _reply(
    services: Services, world: DemoWorld, who: str, reply_to_id: uuid.UUID, cid: str
) -> PostedMessage:
    return await services.conversation.create_message(
        world.principal(who),
        main_thread(world, "allgemein"),
        MessageDraft(client_msg_id=cid, content="Agreed", reply_to_id=reply_to_id),
    )


async def test_a_reply_to_a_message_restricted_from_the_author_is_not_in_thread(
    services: Services, world: DemoWorld
) -> None:
    thread_id = main_thread(world, "allgemein")
    private = await post(services, world, "alex", thread_id, "p-1", restricted_to=["sam"])
    unknown = uuid.UUID("01900000-0000-7000-8000-0000000fffff")
    answers = []
    for target, cid in ((private.id, "r-1"), (unknown, "r-2")):
        with pytest.raises(ValidationFailed) as caught:
            await _reply(services, world, "texter", target, cid)
        answers.append([(e.pointer, e.code) for e in caught.value.errors])
    # The same answer for the restricted message as for one that does not exist.
    assert answers == [[("/reply_to_id", "not_in_thread")]] * 2


@pytest.mark.parametrize("who", ["texter", "alex"])
async def test_the_audience_and_the_author_may_reply(
    services: Services, world: DemoWorld, who: str
) -> None:
    thread_id = main_thread(world, "allgemein")
    private = await post(services, world, "alex", thread_id, "p-1", restricted_to=["texter"])
    posted = await _reply(services, world, who, private.id, f"r-{who}")
    assert posted.message.reply_to_id == private.id
