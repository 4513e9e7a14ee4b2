"""Real parallel sends through the freshness gate on PostgreSQL.

Many agents send into one thread from the same frontier at once: the compare-and-set lets
exactly one through per round, every other send is held with the advanced frontier, and
thread_seq stays without gaps. Racing sends with one client id store one message. The
shared `pg_pool` is smaller than a round of senders, so this module opens its own pool
on the same test database.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from psycopg_pool import AsyncConnectionPool

from tests.support.services import services_over
from turnkeeper.adapters.postgres.uow import Conn, PostgresUnitOfWorkFactory, create_pool
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.services.agent_send import AgentSend, SendFreshness, SendOutcome
from turnkeeper.application.settings import Settings
from turnkeeper.domain.errors import IdempotencyConflict
from turnkeeper.domain.freshness import SendState
from turnkeeper.domain.messaging import MessageDraft
from turnkeeper.domain.world import Level, Principal, PrincipalKind, ResourceKind, thread_target_key

#: Concurrent senders per round (one agent each, so no rate bucket serializes them).
SENDERS = 16
#: Rounds of the frontier race.
ROUNDS = 100
#: Rounds of the client-id races.
KEY_ROUNDS = 20
#: Connections of this module's pool: every sender of a round holds one at once.
POOL_SIZE = SENDERS + 4
#: A bucket that never runs dry in these tests (the rate limit is tested elsewhere).
BURST = 100_000


@pytest.fixture
async def race_pool(pg_conninfo: str) -> AsyncIterator[AsyncConnectionPool[Conn]]:
    pool = await create_pool(pg_conninfo, min_size=POOL_SIZE, max_size=POOL_SIZE)
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture
def race_services(race_pool: AsyncConnectionPool[Conn]) -> Services:
    settings = Settings(rl_message_burst=BURST, pool_max_size=POOL_SIZE)
    return services_over(PostgresUnitOfWorkFactory(race_pool), settings)


@pytest.fixture
async def race_world(race_services: Services) -> DemoWorld:
    return await build_demo_world(race_services)


async def senders(services: Services, world: DemoWorld, count: int) -> list[Principal]:
    """Agents with write on Eskalation, one per concurrent sender."""
    robin = world.principal("robin")
    agents = []
    for i in range(count):
        created = await services.admin.create_principal(
            robin, kind=PrincipalKind.AGENT, handle=f"racer{i:02d}"
        )
        await services.admin.create_grant(
            robin,
            principal_id=created.principal.id,
            resource_kind=ResourceKind.CHANNEL,
            resource_id=world.channels["eskalation"].id,
            level=Level.WRITE,
        )
        agents.append(created.principal)
    return agents


def eskalation(world: DemoWorld) -> uuid.UUID:
    thread_id = world.channels["eskalation"].main_thread_id
    assert thread_id is not None
    return thread_id


def gated(thread_id: uuid.UUID, cid: str, seen: int, content: str) -> AgentSend:
    return AgentSend(
        target=thread_id,
        content=content,
        client_message_id=cid,
        freshness=SendFreshness(target_key=thread_target_key(thread_id), seen_up_to_seq=seen),
    )


async def all_seqs(services: Services, thread_id: uuid.UUID) -> list[int]:
    async with services.uow() as uow:
        owner = await uow.principals.owner()
        assert owner is not None
        messages = await uow.messages.list_visible(thread_id, owner.id, 0, 1_000_000)
    return [m.thread_seq for m in messages]


@pytest.mark.slow
async def test_one_send_per_frontier_wins_and_the_rest_are_held_with_the_advanced_latest(
    race_services: Services, race_world: DemoWorld
) -> None:
    services = race_services
    agents = await senders(services, race_world, SENDERS)
    thread_id = eskalation(race_world)
    for round_ in range(ROUNDS):
        # Every round starts from the frontier the round before left: one message each.
        seen = round_
        outcomes = await asyncio.gather(
            *(
                services.agent_send.send(
                    agent, gated(thread_id, f"r{round_}", seen, f"round {round_}")
                )
                for agent in agents
            )
        )
        sent = [o for o in outcomes if o.state is SendState.SENT]
        held = [o for o in outcomes if o.state is SendState.HELD]
        assert len(sent) == 1, (round_, [o.state for o in outcomes])
        assert len(held) == SENDERS - 1
        assert sent[0].accepted_seq == seen + 1
        assert {(o.latest_seq, o.needs_refresh_until_seq) for o in held} == {(seen + 1, seen + 1)}
    assert await all_seqs(services, thread_id) == list(range(1, ROUNDS + 1))
    thread = await services.conversation.get_thread(race_world.principal("robin"), thread_id)
    assert thread.latest_seq == ROUNDS


async def test_second_cas_race_in_a_private_gap_never_holds_on_the_invisible_seq(
    race_services: Services, race_world: DemoWorld
) -> None:
    services = race_services
    agents = await senders(services, race_world, SENDERS)
    thread_id = eskalation(race_world)
    alex = race_world.principal("alex")
    seen = 0
    for round_ in range(KEY_ROUNDS):
        # A message the senders cannot see moves the frontier past their seen seq.
        hidden = await services.conversation.create_message(
            alex,
            thread_id,
            MessageDraft(
                client_msg_id=f"hidden-{round_}",
                content="for Robin only",
                restricted_to=(race_world.principal("robin").id,),
            ),
        )
        invisible = hidden.message.thread_seq
        outcomes = await asyncio.gather(
            *(
                services.agent_send.send(agent, gated(thread_id, f"p{round_}", seen, "answer"))
                for agent in agents
            )
        )
        sent = [o for o in outcomes if o.state is SendState.SENT]
        held = [o for o in outcomes if o.state is SendState.HELD]
        # All missed the first CAS; one won the second CAS against the invisible seq, and
        # the others saw its (visible) message on their retry.
        assert len(sent) == 1
        assert sent[0].accepted_seq == invisible + 1
        assert {o.latest_seq for o in held} <= {invisible + 1}
        assert all(o.latest_seq != invisible for o in held)
        seen = invisible + 1
    seqs = await all_seqs(services, thread_id)
    assert seqs == list(range(1, len(seqs) + 1))


async def test_same_key_other_content_racing_stores_one_message_and_one_conflict(
    race_services: Services, race_world: DemoWorld
) -> None:
    services = race_services
    lotse = race_world.principal("lotse")
    thread_id = eskalation(race_world)
    for round_ in range(KEY_ROUNDS):
        cid, seen = f"k{round_}", round_
        results = await asyncio.gather(
            services.agent_send.send(lotse, gated(thread_id, cid, seen, "first text")),
            services.agent_send.send(lotse, gated(thread_id, cid, seen, "second text")),
            return_exceptions=True,
        )
        outcomes = [r for r in results if isinstance(r, SendOutcome)]
        errors = [r for r in results if isinstance(r, BaseException)]
        assert [o.state for o in outcomes] == [SendState.SENT], results
        assert len(errors) == 1
        assert isinstance(errors[0], IdempotencyConflict)
        async with services.uow() as uow:
            stored = await uow.messages.by_client_id(lotse.id, cid)
        assert stored is not None
        assert stored.id == outcomes[0].message_id
    assert await all_seqs(services, thread_id) == list(range(1, KEY_ROUNDS + 1))


async def test_identical_sends_racing_store_one_message(
    race_services: Services, race_world: DemoWorld
) -> None:
    services = race_services
    lotse = race_world.principal("lotse")
    thread_id = eskalation(race_world)
    results = await asyncio.gather(
        *(
            services.agent_send.send(lotse, gated(thread_id, "same", 0, "only once"))
            for _ in range(SENDERS)
        ),
        return_exceptions=True,
    )
    assert not [r for r in results if isinstance(r, BaseException)]
    outcomes = [r for r in results if isinstance(r, SendOutcome)]
    assert sum(o.state is SendState.SENT for o in outcomes) == 1
    assert {o.state for o in outcomes} <= {SendState.SENT, SendState.ALREADY_SENT}
    assert len({o.message_id for o in outcomes}) == 1
    assert {o.accepted_seq for o in outcomes} == {1}
    assert await all_seqs(services, thread_id) == [1]
