"""A message posted or sent by bearer token: authenticated in the unit's first read (ADR 0026).

Run on both adapters. The use case answers what a request authenticated first would:
401 for an unknown or revoked token before the body rules, the body rules before 404
and 403; it reads the token in its own unit (no separate read-only unit), and records
the token's last use once per ``auth.token_last_used_interval``, as `authenticate` does.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from tests.support.fakes import FakeClock
from tests.support.scenario import draft, main_thread, shared_events
from tests.support.services import CountingFactory, services_over
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.errors import Unauthenticated
from turnkeeper.application.ports import UnitOfWorkFactory
from turnkeeper.application.services.identity import BearerToken
from turnkeeper.application.services.send_types import AgentSend, SendFreshness
from turnkeeper.application.settings import Settings
from turnkeeper.application.transactions import AccessDenied
from turnkeeper.domain.errors import NotFound, ValidationFailed
from turnkeeper.domain.freshness import SendState
from turnkeeper.domain.trigger_report import TriggerOutcomeKind
from turnkeeper.domain.world import thread_target_key

#: ``auth.token_last_used_interval`` of these tests, in seconds.
INTERVAL = 60


async def _setup(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> tuple[Services, DemoWorld, CountingFactory]:
    counting = CountingFactory(uow_factory)
    settings = Settings(token_last_used_interval=timedelta(seconds=INTERVAL))
    services = services_over(counting, settings, clock)
    return services, await build_demo_world(services), counting


def _bearer(world: DemoWorld, handle: str) -> BearerToken:
    return BearerToken.of((world.people.get(handle) or world.agents[handle]).token)


async def _latest_seq(services: Services, world: DemoWorld, thread_id: uuid.UUID) -> int:
    return (await services.conversation.get_thread(world.owner.principal, thread_id)).latest_seq


async def test_a_post_by_token_is_written_as_its_principal_in_one_unit(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, counting = await _setup(uow_factory, clock)
    thread = main_thread(world, "allgemein")
    alex = world.principal("alex")
    reads, writes = counting.reads, counting.writes

    posted = await services.conversation.create_message(
        _bearer(world, "alex"), thread, draft("b-1", "Sam, the draft is in.")
    )

    assert posted.author == alex
    assert posted.message.author_id == alex.id
    assert not posted.replayed
    # The token was read in the post's unit; its first use was recorded in one more.
    assert (counting.reads, counting.writes) == (reads, writes + 2)
    (token,) = await services.tokens.list_tokens(world.owner.principal, alex.id)
    assert token.last_used_at == clock.now()


async def test_the_last_use_of_a_posting_token_is_written_once_per_interval(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, counting = await _setup(uow_factory, clock)
    thread = main_thread(world, "allgemein")
    bearer = _bearer(world, "alex")
    await services.conversation.create_message(bearer, thread, draft("b-1"))
    writes = counting.writes
    clock.advance(INTERVAL - 1)
    await services.conversation.create_message(bearer, thread, draft("b-2"))
    assert counting.writes == writes + 1, "within the interval: the post's unit only"
    clock.advance(1)
    await services.conversation.create_message(bearer, thread, draft("b-3"))
    assert counting.writes == writes + 3, "the interval passed: the use is written again"
    (token,) = await services.tokens.list_tokens(world.owner.principal, world.principal("alex").id)
    assert token.last_used_at == clock.now()


async def test_a_replay_by_token_answers_the_stored_message(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, _ = await _setup(uow_factory, clock)
    thread = main_thread(world, "allgemein")
    first = await services.conversation.create_message(_bearer(world, "alex"), thread, draft("b-1"))
    again = await services.conversation.create_message(_bearer(world, "alex"), thread, draft("b-1"))
    assert again.replayed
    assert again.message.id == first.message.id
    assert again.author == world.principal("alex")


@pytest.mark.parametrize("body_valid", [True, False])
async def test_an_unknown_token_is_refused_before_anything_else_and_changes_nothing(
    uow_factory: UnitOfWorkFactory, clock: FakeClock, body_valid: bool
) -> None:
    services, world, _ = await _setup(uow_factory, clock)
    thread = main_thread(world, "allgemein")
    before = (len(await shared_events(services)), await _latest_seq(services, world, thread))
    message = draft("b-1") if body_valid else draft("b-1", "")
    for where in (thread, uuid.uuid4()):
        with pytest.raises(Unauthenticated):
            await services.conversation.create_message(BearerToken.of("tk_unknown"), where, message)
    after = (len(await shared_events(services)), await _latest_seq(services, world, thread))
    assert after == before


async def test_a_revoked_token_cannot_post(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, _ = await _setup(uow_factory, clock)
    alex = world.principal("alex")
    issued = await services.tokens.issue_token(world.owner.principal, alex.id, label="phone")
    thread = main_thread(world, "allgemein")
    posted = await services.conversation.create_message(
        BearerToken.of(issued.secret), thread, draft("b-1")
    )
    assert posted.author == alex
    await services.tokens.revoke_token(world.owner.principal, alex.id, issued.token.id)
    with pytest.raises(Unauthenticated):
        await services.conversation.create_message(
            BearerToken.of(issued.secret), thread, draft("b-2")
        )


async def test_a_known_token_gets_the_body_rules_before_not_found_and_access(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, _ = await _setup(uow_factory, clock)
    lotse = _bearer(world, "lotse")
    hidden = main_thread(world, "kampagnen")
    with pytest.raises(ValidationFailed):
        await services.conversation.create_message(lotse, uuid.uuid4(), draft("b-1", ""))
    with pytest.raises(ValidationFailed):
        await services.conversation.create_message(lotse, hidden, draft("b-2", ""))
    with pytest.raises(NotFound):
        await services.conversation.create_message(lotse, uuid.uuid4(), draft("b-3"))
    with pytest.raises(AccessDenied) as denied:
        await services.conversation.create_message(lotse, hidden, draft("b-4"))
    assert denied.value.code == "not_found"


async def test_a_post_by_token_is_decided_on_as_its_principals(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    # The first message of the main thread opens a run, then the next one follows it up:
    # the trigger rules see the token's principal as the author.
    services, world, _ = await _setup(uow_factory, clock)
    thread = main_thread(world, "allgemein")
    opened = await services.conversation.create_message(
        _bearer(world, "alex"), thread, draft("b-1", "Robin, see the plan.")
    )
    followed = await services.conversation.create_message(
        world.principal("alex"), thread, draft("b-2", "Robin, and the budget.")
    )
    assert opened.trigger.outcome is TriggerOutcomeKind.RUN_OPENED
    assert followed.trigger.outcome is TriggerOutcomeKind.FOLLOWUP


# -- the gated send of an agent, by token ----------------------------------------------------


def _send(thread_id: uuid.UUID, cid: str, seen: int, content: str = "Done, Alex.") -> AgentSend:
    return AgentSend(
        target=thread_id,
        content=content,
        client_message_id=cid,
        freshness=SendFreshness(target_key=thread_target_key(thread_id), seen_up_to_seq=seen),
    )


async def test_an_agents_send_by_token_is_sent_as_the_agent_in_one_unit(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, counting = await _setup(uow_factory, clock)
    thread = main_thread(world, "eskalation")
    seen = await _latest_seq(services, world, thread)
    reads, writes = counting.reads, counting.writes

    sent = await services.agent_send.send(_bearer(world, "lotse"), _send(thread, "s-1", seen))

    assert sent.state is SendState.SENT
    assert sent.accepted_seq == seen + 1
    # The token was read in the send's unit; its first use was recorded in one more.
    assert (counting.reads, counting.writes) == (reads, writes + 2)
    async with services.uow() as uow:
        stored = await uow.messages.by_client_id(world.principal("lotse").id, "s-1")
    assert stored is not None
    assert stored.id == sent.message_id
    (token,) = await services.tokens.list_tokens(world.owner.principal, world.principal("lotse").id)
    assert token.last_used_at == clock.now()
    again = await services.agent_send.send(_bearer(world, "lotse"), _send(thread, "s-1", seen))
    assert again.state is SendState.ALREADY_SENT


async def test_a_persons_send_by_token_is_agents_only_and_audited(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, _ = await _setup(uow_factory, clock)
    thread = main_thread(world, "eskalation")
    # The invalid body does not matter: agents_only comes first, as for a principal.
    with pytest.raises(AccessDenied) as caught:
        await services.agent_send.send(_bearer(world, "alex"), _send(thread, "", -1))
    assert (caught.value.code, caught.value.reason) == ("forbidden", "agents_only")
    async with services.uow() as uow:
        denials = await uow.audit.denials(world.principal("alex").id)
    assert [(d.action, d.reason) for d in denials] == [("agent.send", "agents_only")]


async def test_a_send_by_token_gets_401_then_the_body_rules_then_access(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, _ = await _setup(uow_factory, clock)
    thread = main_thread(world, "eskalation")
    before = await _latest_seq(services, world, thread)
    with pytest.raises(Unauthenticated):
        await services.agent_send.send(BearerToken.of("tk_unknown"), _send(thread, "", -1))
    with pytest.raises(ValidationFailed) as invalid:
        await services.agent_send.send(_bearer(world, "lotse"), _send(uuid.uuid4(), "s-1", -1))
    assert {(e.pointer, e.code) for e in invalid.value.errors} == {
        ("/freshness/seen_up_to_seq", "negative")
    }
    with pytest.raises(NotFound):
        await services.agent_send.send(_bearer(world, "lotse"), _send(uuid.uuid4(), "s-2", 0))
    with pytest.raises(AccessDenied) as hidden:
        await services.agent_send.send(
            _bearer(world, "lotse"), _send(main_thread(world, "notizen"), "s-3", 0)
        )
    assert hidden.value.code == "not_found"
    assert await _latest_seq(services, world, thread) == before
