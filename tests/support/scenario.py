"""Steps and reads on the demo world through the services (the scenario suites share them).

The demo world (`turnkeeper.application.demo`) is built through the services; these
helpers post, start runs and read the store the way the scenario tests of
tests/integration, tests/concurrency and tests/reliability do, on either adapter.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.ports import ReaderScope
from turnkeeper.application.services.runs import Delivery
from turnkeeper.domain.events import Event, EventType
from turnkeeper.domain.messaging import Message, MessageDraft
from turnkeeper.domain.runs import Run
from turnkeeper.domain.world import Principal

#: The agents of the demo world, by handle.
AGENTS = ("lotse", "texter", "assistent")

#: A reader scope that sees every shared event (the tests read the whole log with it).
EVERYTHING = ReaderScope(reader_id=uuid.UUID(int=0), everything=True)

#: More events or messages than any test writes: reads with it return everything.
READ_ALL = 1_000_000


def main_thread(world: DemoWorld, channel: str) -> uuid.UUID:
    """The main thread of a text channel of the demo world."""
    thread_id = world.channels[channel].main_thread_id
    assert thread_id is not None
    return thread_id


def draft(client_id: str, content: str = "hello", **fields: object) -> MessageDraft:
    """A message draft with a client id (and any other field of `MessageDraft`)."""
    return MessageDraft(client_msg_id=client_id, content=content, **fields)  # type: ignore[arg-type]


async def post(
    services: Services,
    world: DemoWorld,
    who: str,
    where: uuid.UUID,
    cid: str,
    *mentions: str,
    content: str = "hello",
    run_id: uuid.UUID | None = None,
    restricted_to: Sequence[str] | None = None,
) -> Message:
    """One message by a person or agent of the world, through createMessage.

    Args:
        services: the services.
        world: the demo world.
        who: the author's handle.
        where: the thread.
        cid: the client message id.
        *mentions: handles of mentioned principals.
        content: the text.
        run_id: the run an agent answers in.
        restricted_to: handles of the audience of a restricted message.

    Returns:
        The stored (or replayed) message.
    """
    posted = await services.conversation.create_message(
        world.principal(who),
        where,
        draft(
            cid,
            content,
            mentions=tuple(world.principal(m).id for m in mentions),
            run_id=run_id,
            restricted_to=None
            if restricted_to is None
            else tuple(world.principal(h).id for h in restricted_to),
        ),
    )
    return posted.message


async def message(services: Services, message_id: uuid.UUID) -> Message:
    """A stored message (it must exist)."""
    async with services.uow() as uow:
        found = await uow.messages.get(message_id)
    assert found is not None
    return found


async def get_run(services: Services, run_id: uuid.UUID) -> Run:
    """A stored run (it must exist)."""
    async with services.uow() as uow:
        run = await uow.runs.get(run_id)
    assert run is not None
    return run


async def active_run(services: Services, thread_id: uuid.UUID) -> Run | None:
    """The active run of a thread, if any."""
    async with services.uow() as uow:
        return await uow.runs.lock_active_in_thread(thread_id)


async def runs_of(services: Services, thread_id: uuid.UUID) -> list[Run]:
    """The active run of a thread as a list (empty when none)."""
    active = await active_run(services, thread_id)
    return [active] if active else []


async def invocations(services: Services, agent: Principal) -> list[Delivery]:
    """The agent.invocation deliveries of one poll of the agent."""
    page = await services.runs.poll(agent)
    return [d for d in page.deliveries if d.event.type is EventType.AGENT_INVOCATION]


async def start_delivered(services: Services, agent: Principal) -> tuple[Run, str]:
    """The agent polls its one new invocation, starts that run and acknowledges it.

    Returns:
        The running run and the invocation token it was started with.
    """
    (delivery,) = await invocations(services, agent)
    assert delivery.invocation_token is not None
    run_id = uuid.UUID(delivery.event.payload["run_id"])
    view = await services.runs.start(agent, run_id, delivery.invocation_token)
    await services.runs.ack(agent, delivery.event.seq)
    return view.run, delivery.invocation_token


async def started_run(services: Services, world: DemoWorld) -> tuple[Run, str]:
    """Alex writes in Allgemein; Lotse polls and starts the run (see `start_delivered`)."""
    await post(services, world, "alex", main_thread(world, "allgemein"), "trigger")
    return await start_delivered(services, world.principal("lotse"))


async def shared_events(services: Services) -> list[Event]:
    """Every shared event of the log, in seq order."""
    async with services.uow() as uow:
        return await uow.events.read(EVERYTHING, 0, READ_ALL)


async def personal_events(services: Services, world: DemoWorld) -> dict[str, list[Event]]:
    """Every agent's personal events, by agent handle."""
    async with services.uow() as uow:
        return {
            handle: await uow.agent_feed.read(world.principal(handle).id, 0, READ_ALL)
            for handle in AGENTS
        }


async def latest_seq(services: Services, world: DemoWorld, thread_id: uuid.UUID) -> int:
    """The latest thread_seq of a thread, as the owner sees it."""
    thread = await services.conversation.get_thread(world.principal("robin"), thread_id)
    return thread.latest_seq


async def denials(services: Services, principal: Principal) -> list[tuple[str, str, int]]:
    """The aggregated denial audit of a principal: (action, reason, count) rows."""
    async with services.uow() as uow:
        rows = await uow.audit.denials(principal.id)
    return [(r.action, r.reason, r.count) for r in rows]
