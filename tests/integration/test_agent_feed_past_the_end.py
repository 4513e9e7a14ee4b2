"""A poll with a cursor past the end of an agent's feed delivers nothing, and counts so.

The delivered position moves only over events a poll read: a cursor beyond the feed's
end must not mark the next invocation redelivered, nor let an ack up to that cursor
swallow the events that come later (RunsService.ack: an agent that acknowledges a seq
the feed has not reached yet still gets every event that comes later).
"""

from __future__ import annotations

from tests.support.scenario import main_thread, post
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.domain.events import EventType

#: A cursor far beyond any seq a test world reaches.
FAR = 10**15


async def _trigger(services: Services, world: DemoWorld, cid: str) -> None:
    await post(services, world, "alex", main_thread(world, "allgemein"), cid, content="help?")


async def test_a_poll_past_the_end_does_not_mark_the_next_invocation_redelivered(
    services: Services, world: DemoWorld
) -> None:
    lotse = world.principal("lotse")
    far = await services.runs.poll(lotse, after=FAR)
    assert (list(far.deliveries), far.next_after) == ([], FAR)

    await _trigger(services, world, "t-1")
    page = await services.runs.poll(lotse)

    (delivery,) = page.deliveries
    assert delivery.event.type is EventType.AGENT_INVOCATION
    assert delivery.redelivered is False
    again = await services.runs.poll(lotse)
    assert [d.redelivered for d in again.deliveries] == [True]


async def test_an_ack_past_the_end_after_a_poll_past_the_end_loses_no_later_event(
    services: Services, world: DemoWorld
) -> None:
    lotse = world.principal("lotse")
    await services.runs.poll(lotse, after=FAR)
    await services.runs.ack(lotse, FAR)

    await _trigger(services, world, "t-2")
    page = await services.runs.poll(lotse)

    assert [d.event.type for d in page.deliveries] == [EventType.AGENT_INVOCATION]
