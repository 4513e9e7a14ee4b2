"""Create answers show the committed state, and createThread's pointers name its member.

On the memory adapter and on PostgreSQL: a message that opens a run or becomes a
follow-up answers with the trigger_state and version the in-transaction decisions gave
it; createThread answers the thread with the latest_seq that counts the run anchor; a
replay answers the message as it is now. A reference error of createThread's first
message points under ``/first_message``.
"""

from __future__ import annotations

import uuid

import pytest

from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.domain.errors import FieldError, ValidationFailed
from turnkeeper.domain.messaging import Message, MessageDraft, TriggerState
from turnkeeper.domain.runs import RunState


def draft(client_id: str, content: str = "hello", **kw: object) -> MessageDraft:
    return MessageDraft(client_msg_id=client_id, content=content, **kw)  # type: ignore[arg-type]


def main_thread(world: DemoWorld, channel: str) -> uuid.UUID:
    thread_id = world.channels[channel].main_thread_id
    assert thread_id is not None
    return thread_id


async def stored(services: Services, message_id: uuid.UUID) -> Message:
    async with services.uow() as uow:
        message = await uow.messages.get(message_id)
    assert message is not None
    return message


async def start_lotse(services: Services, world: DemoWorld) -> None:
    """Lotse takes its invocation and starts the run."""
    lotse = world.principal("lotse")
    page = await services.runs.poll(lotse)
    (delivery,) = [d for d in page.deliveries if d.invocation_token is not None]
    assert delivery.invocation_token is not None
    await services.runs.start(lotse, delivery.event.resource_id, delivery.invocation_token)


class TestCreateMessageAnswersTheCommittedMessage:
    async def test_a_message_that_opens_a_run_answers_received_at_version_2(
        self, services: Services, world: DemoWorld
    ) -> None:
        posted = await services.conversation.create_message(
            world.principal("alex"), main_thread(world, "allgemein"), draft("m1")
        )
        assert (posted.message.trigger_state, posted.message.version) == (
            TriggerState.RECEIVED,
            2,
        )
        assert posted.message == await stored(services, posted.message.id)

    async def test_a_follow_up_answers_received(self, services: Services, world: DemoWorld) -> None:
        alex, here = world.principal("alex"), main_thread(world, "allgemein")
        await services.conversation.create_message(alex, here, draft("m1"))
        await start_lotse(services, world)
        posted = await services.conversation.create_message(alex, here, draft("m2", "and"))
        assert (posted.message.trigger_state, posted.message.version) == (
            TriggerState.RECEIVED,
            2,
        )
        assert posted.message == await stored(services, posted.message.id)

    async def test_a_message_that_triggers_nothing_answers_as_inserted(
        self, services: Services, world: DemoWorld
    ) -> None:
        # Eskalation's main thread: no free response, and no mention.
        posted = await services.conversation.create_message(
            world.principal("alex"), main_thread(world, "eskalation"), draft("m1")
        )
        assert (posted.message.trigger_state, posted.message.version) == (None, 1)
        assert posted.message == await stored(services, posted.message.id)

    async def test_a_replay_answers_the_message_as_it_is_now(
        self, services: Services, world: DemoWorld
    ) -> None:
        alex, here = world.principal("alex"), main_thread(world, "allgemein")
        first = await services.conversation.create_message(alex, here, draft("m1"))
        await start_lotse(services, world)
        again = await services.conversation.create_message(alex, here, draft("m1"))
        assert again.replayed
        assert again.message == await stored(services, first.message.id)
        # received (2), queued at the delivery (3), working at the start (4)
        assert (again.message.trigger_state, again.message.version) == (TriggerState.WORKING, 4)


class TestCreateThreadAnswersTheCommittedThread:
    async def test_a_first_message_that_opens_a_run_counts_the_anchor(
        self, services: Services, world: DemoWorld
    ) -> None:
        alex = world.principal("alex")
        created = await services.conversation.create_thread(
            alex, world.channels["bulletin"].id, title="Printer", first_message=draft("t1")
        )
        assert created.thread.latest_seq == 2
        assert created.thread == await services.conversation.get_thread(alex, created.thread.id)
        assert (created.message.trigger_state, created.message.version) == (
            TriggerState.RECEIVED,
            2,
        )
        assert created.message == await stored(services, created.message.id)
        run = (await services.runs.poll(world.principal("lotse"))).deliveries[0]
        assert (await services.runs.get(alex, run.event.resource_id)).run.state is (RunState.QUEUED)

    async def test_a_replay_answers_the_thread_and_message_as_they_are_now(
        self, services: Services, world: DemoWorld
    ) -> None:
        alex = world.principal("alex")
        channel = world.channels["bulletin"].id
        first = await services.conversation.create_thread(
            alex, channel, title="Printer", first_message=draft("t1")
        )
        await services.conversation.create_message(alex, first.thread.id, draft("t2", "more"))
        again = await services.conversation.create_thread(
            alex, channel, title="Printer", first_message=draft("t1")
        )
        assert again.replayed
        assert again.thread == await services.conversation.get_thread(alex, first.thread.id)
        assert again.thread.latest_seq == 3
        assert again.message == await stored(services, first.message.id)


class TestCreateThreadPointersNameTheFirstMessage:
    @pytest.mark.parametrize(
        ("first", "pointer"),
        [
            (draft("t1", mentions=(uuid.UUID(int=7),)), "/first_message/mentions/0"),
            (draft("t1", restricted_to=(uuid.UUID(int=7),)), "/first_message/restricted_to/0"),
            (draft("t1", reply_to_id=uuid.UUID(int=7)), "/first_message/reply_to_id"),
        ],
    )
    async def test_an_unknown_reference_points_under_first_message(
        self, services: Services, world: DemoWorld, first: MessageDraft, pointer: str
    ) -> None:
        alex = world.principal("alex")
        code = "not_in_thread" if pointer.endswith("reply_to_id") else "unknown_principal"
        with pytest.raises(ValidationFailed) as failed:
            await services.conversation.create_thread(
                alex,
                world.channels["bulletin"].id,
                title="Printer",
                first_message=first,
            )
        assert failed.value.errors == (FieldError(pointer=pointer, code=code),)
        # Nothing was stored: the same key is still free for a valid request.
        created = await services.conversation.create_thread(
            alex, world.channels["bulletin"].id, title="Printer", first_message=draft("t1")
        )
        assert not created.replayed

    async def test_create_message_points_at_the_top_level(
        self, services: Services, world: DemoWorld
    ) -> None:
        with pytest.raises(ValidationFailed) as failed:
            await services.conversation.create_message(
                world.principal("alex"),
                main_thread(world, "allgemein"),
                draft("m1", mentions=(uuid.UUID(int=7),)),
            )
        assert failed.value.errors == (FieldError(pointer="/mentions/0", code="unknown_principal"),)
