"""A NUL character (U+0000) or a lone surrogate in any text member is refused alike on both stores.

PostgreSQL's text cannot hold it, so the memory store kept what PostgreSQL failed on
with a driver error. Every text member of the library's use cases now answers
``invalid_character`` at its pointer, as the HTTP body guard does, and changes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from tests.support.scenario import latest_seq, main_thread, shared_events, started_run
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.services.agent_send import AgentSend, SendFreshness
from turnkeeper.domain.errors import ValidationFailed
from turnkeeper.domain.messaging import MessageDraft
from turnkeeper.domain.runs import RunState
from turnkeeper.domain.world import PrincipalKind, thread_target_key

NUL = "\x00"
#: What no text member may hold: a NUL, and a lone surrogate, which a Python string can
#: carry but UTF-8 cannot (the memory store kept it, PostgreSQL's driver raised
#: UnicodeEncodeError, found by an audit).
UNSTORABLE = {"nul": NUL, "lone surrogate": "\ud800"}


async def _refused(call: Awaitable[object]) -> list[tuple[str, str]]:
    with pytest.raises(ValidationFailed) as caught:
        await call
    return [(e.pointer, e.code) for e in caught.value.errors]


def _message(
    world: DemoWorld, services: Services, *, client_msg_id: str = "a-1", content: str = "Hi"
) -> Awaitable[object]:
    return services.conversation.create_message(
        world.principal("alex"),
        main_thread(world, "allgemein"),
        MessageDraft(client_msg_id=client_msg_id, content=content),
    )


def _thread(world: DemoWorld, services: Services, title: str) -> Awaitable[object]:
    return services.conversation.create_thread(
        world.principal("alex"),
        world.channels["allgemein"].id,
        title=title,
        first_message=MessageDraft(client_msg_id="t-1", content="A new topic"),
    )


def _agent_send(
    world: DemoWorld,
    services: Services,
    seen: int,
    *,
    content: str = "Done, Alex.",
    client_message_id: str = "l-1",
) -> Awaitable[object]:
    thread_id = main_thread(world, "allgemein")
    return services.agent_send.send(
        world.principal("lotse"),
        AgentSend(
            target=thread_id,
            content=content,
            client_message_id=client_message_id,
            freshness=SendFreshness(target_key=thread_target_key(thread_id), seen_up_to_seq=seen),
        ),
    )


Case = Callable[[DemoWorld, Services, int, str], Awaitable[object]]

CASES: dict[str, tuple[Case, tuple[str, str]]] = {
    "message content": (
        lambda w, s, _, bad: _message(w, s, content=f"Hello{bad}Sam"),
        ("/content", "invalid_character"),
    ),
    "message client id": (
        lambda w, s, _, bad: _message(w, s, client_msg_id=f"a{bad}1"),
        ("/client_msg_id", "invalid_character"),
    ),
    "thread title": (
        lambda w, s, _, bad: _thread(w, s, f"Plans{bad}"),
        ("/title", "invalid_character"),
    ),
    "agent send content": (
        lambda w, s, seen, bad: _agent_send(w, s, seen, content=f"Done{bad}"),
        ("/content", "invalid_character"),
    ),
    "agent send client id": (
        lambda w, s, seen, bad: _agent_send(w, s, seen, client_message_id=f"l{bad}1"),
        ("/client_message_id", "invalid_character"),
    ),
    "handle": (
        lambda w, s, _, bad: s.admin.create_principal(
            w.owner.principal, kind=PrincipalKind.PERSON, handle=f"kim{bad}"
        ),
        ("/handle", "invalid_character"),
    ),
    "display name": (
        lambda w, s, _, bad: s.admin.create_principal(
            w.owner.principal, kind=PrincipalKind.PERSON, handle="kim", display_name=f"K{bad}"
        ),
        ("/display_name", "invalid_character"),
    ),
    "space name": (
        lambda w, s, _, bad: s.admin.create_space(w.owner.principal, name=f"Lab{bad}"),
        ("/name", "invalid_character"),
    ),
    "token label": (
        lambda w, s, _, bad: s.tokens.issue_token(
            w.owner.principal, w.principal("alex").id, label=f"phone{bad}"
        ),
        ("/label", "invalid_character"),
    ),
}


@pytest.mark.parametrize("bad", UNSTORABLE)
@pytest.mark.parametrize("case", CASES)
async def test_a_nul_is_refused_at_its_member_and_changes_nothing(
    case: str, bad: str, services: Services, world: DemoWorld
) -> None:
    call, expected = CASES[case]
    thread_id = main_thread(world, "allgemein")
    seen = await latest_seq(services, world, thread_id)
    before = await shared_events(services)

    assert await _refused(call(world, services, seen, UNSTORABLE[bad])) == [expected]

    assert await shared_events(services) == before
    assert await latest_seq(services, world, thread_id) == seen


async def test_a_nul_in_a_finish_reason_is_refused_and_the_run_goes_on(
    services: Services, world: DemoWorld
) -> None:
    run, _ = await started_run(services, world)
    lotse = world.principal("lotse")
    assert await _refused(services.runs.finish(lotse, run.id, RunState.FAILED, f"broke{NUL}")) == [
        ("/reason", "invalid_character")
    ]
    view = await services.runs.get(lotse, run.id)
    assert view.run.state is RunState.RUNNING
