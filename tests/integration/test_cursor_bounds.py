"""A cursor beyond the stores' 64-bit seqs is refused alike on both stores.

Found by an audit of the library: an agent's poll after 2**63 answered an empty page on
the memory store and raised psycopg's NumericValueOutOfRange on PostgreSQL (the cursor
is stored as a bigint). Every cursor of a use case now answers ``out_of_range`` beyond
`MAX_SEQ`, as the HTTP adapter does, and changes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from tests.support.scenario import main_thread, post
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.services.identity import BearerToken
from turnkeeper.domain.errors import ValidationFailed
from turnkeeper.domain.events import MAX_SEQ

Call = Callable[[Services, DemoWorld, int], Awaitable[object]]

CURSORS: dict[str, tuple[Call, str]] = {
    "agent poll": (lambda s, w, after: s.runs.poll(w.principal("lotse"), after=after), "/after"),
    "agent poll by token": (
        lambda s, w, after: s.runs.poll(BearerToken.of(w.agents["lotse"].token), after=after),
        "/after",
    ),
    "shared events": (
        lambda s, w, after: s.conversation.list_events(w.principal("alex"), after=after),
        "/after",
    ),
    "thread history": (
        lambda s, w, after: s.conversation.list_messages(
            w.principal("alex"), main_thread(w, "allgemein"), after_seq=after
        ),
        "/after_seq",
    ),
}


@pytest.mark.parametrize("cursor", CURSORS)
async def test_a_cursor_beyond_the_largest_seq_is_out_of_range(
    cursor: str, services: Services, world: DemoWorld
) -> None:
    call, pointer = CURSORS[cursor]
    await post(services, world, "alex", main_thread(world, "allgemein"), "trigger")
    with pytest.raises(ValidationFailed) as refused:
        await call(services, world, MAX_SEQ + 1)
    assert [(e.pointer, e.code) for e in refused.value.errors] == [(pointer, "out_of_range")]
    # The largest seq itself is a cursor like any other: nothing lies beyond it.
    await call(services, world, MAX_SEQ)
    # Nothing moved: the agent's invocation is still to be delivered.
    page = await services.runs.poll(world.principal("lotse"), after=0)
    assert [d.redelivered for d in page.deliveries] == [False]
