"""The world of the benchmark suite, built through the application services.

Robin owns everything. Space ``Bench`` has no default operator; its forum ``Quiet``
(operator mode none) holds the threads where nothing triggers. Each worker of each side
(service, raw, http) is one person (trigger on the space), one agent (write on the space)
and one forum whose operator is that agent, so that a person's message in one of its
threads opens a run for the worker's own agent. Workers never share a rate-limit bucket,
an agent feed or a thread (except the hot thread of the freshness workload), so what a
measurement shows is the cost of the operation, not contention the benchmark made up.
"""

from __future__ import annotations

import os
import uuid

import attrs
from psycopg_pool import AsyncConnectionPool

from bench.harness import gather_limited
from turnkeeper.adapters.postgres.uow import Conn, PostgresUnitOfWorkFactory
from turnkeeper.adapters.system import SystemClock, UuidV7Generator
from turnkeeper.adapters.tokens import JwtSigner
from turnkeeper.application.bootstrap import Services, build_services
from turnkeeper.application.services.admin import NewPrincipal
from turnkeeper.application.settings import Settings
from turnkeeper.domain.messaging import MessageDraft
from turnkeeper.domain.world import ChannelType, Level, OperatorMode, PrincipalKind, ResourceKind

#: A rate-limit bucket no benchmark worker empties.
BENCH_BURST = 10_000_000
#: The sides of a measurement.
SIDES = ("service", "raw", "http")
#: Concurrent set-up calls (thread creation, seeding messages).
SETUP_CONCURRENCY = 16


@attrs.define
class Worker:
    """One concurrent client of one side.

    Attributes:
        side: service, raw or http.
        index: its number within the side.
        person: its person (with an API token).
        agent: its agent (with an API token).
        forum: the forum its agent operates.
        feed_after: the agent feed position already consumed.
        made: threads made so far (for unique titles and client ids).
    """

    side: str
    index: int
    person: NewPrincipal
    agent: NewPrincipal
    forum: uuid.UUID
    feed_after: int = 0
    made: int = 0

    def cid(self, label: str) -> str:
        """A client message id unique in the whole run.

        Args:
            label: what it is for.

        Returns:
            The id.
        """
        self.made += 1
        return f"{label}-{self.side}-{self.index}-{self.made}"


@attrs.define
class BenchWorld:
    """Services, pool and workers of a benchmark run.

    Attributes:
        services: the application services over the traced pool.
        pool: the traced pool (both sides use it).
        key: the invocation token key (the raw poll loop signs with it too).
        robin: the owner.
        space_id: the bench space.
        quiet: the forum without operator.
        workers: per side, its workers.
    """

    services: Services
    pool: AsyncConnectionPool[Conn]
    key: bytes
    robin: NewPrincipal
    space_id: uuid.UUID
    quiet: uuid.UUID
    workers: dict[str, list[Worker]]

    async def quiet_thread(self, worker: Worker) -> uuid.UUID:
        """A new thread in the forum without operator, made by the worker's person."""
        created = await self.services.conversation.create_thread(
            worker.person.principal,
            self.quiet,
            title=f"quiet {worker.side} {worker.index}",
            first_message=MessageDraft(client_msg_id=worker.cid("quiet"), content="go"),
        )
        return created.thread.id

    async def operated_thread(self, worker: Worker) -> uuid.UUID:
        """A new thread in the worker's forum, made by its agent (so nothing triggers)."""
        created = await self.services.conversation.create_thread(
            worker.agent.principal,
            worker.forum,
            title=f"run {worker.side} {worker.index}",
            first_message=MessageDraft(client_msg_id=worker.cid("thread"), content="ready"),
        )
        return created.thread.id

    async def human(self, worker: Worker, thread_id: uuid.UUID, content: str = "hello") -> None:
        """A message of the worker's person (opens a run or becomes a follow-up)."""
        await self.services.conversation.create_message(
            worker.person.principal,
            thread_id,
            MessageDraft(client_msg_id=worker.cid("human"), content=content),
        )


def _services(pool: AsyncConnectionPool[Conn], key: bytes) -> Services:
    settings = Settings(rl_message_burst=BENCH_BURST, pool_max_size=pool.max_size)
    return build_services(
        PostgresUnitOfWorkFactory(pool), settings, SystemClock(), UuidV7Generator(), JwtSigner(key)
    )


def rebind(world: BenchWorld, pool: AsyncConnectionPool[Conn]) -> BenchWorld:
    """The same world (database, workers, key) with services and pool on another pool.

    Args:
        world: the world.
        pool: the other pool (for example the census's one traced connection).

    Returns:
        A world whose services and floor functions use `pool`.
    """
    return attrs.evolve(world, services=_services(pool, world.key), pool=pool)


async def build_world(pool: AsyncConnectionPool[Conn], workers_per_side: int) -> BenchWorld:
    """Create the bench world on a migrated, empty database.

    Args:
        pool: the traced pool.
        workers_per_side: workers of each side (the highest concurrency).

    Returns:
        The world.
    """
    key = os.urandom(32)
    services = _services(pool, key)
    admin = services.admin
    robin = await admin.ensure_owner("robin", None)
    assert robin is not None
    owner = robin.principal
    space = await admin.create_space(owner, name="Bench")
    quiet = await admin.create_channel(
        owner, space.id, name="Quiet", type=ChannelType.FORUM, operator_mode=OperatorMode.NONE
    )

    async def worker(side: str, index: int) -> Worker:
        name = f"{side}{index:02d}"
        person = await admin.create_principal(
            owner, kind=PrincipalKind.PERSON, handle=f"alex-{name}", display_name="Alex"
        )
        agent = await admin.create_principal(
            owner, kind=PrincipalKind.AGENT, handle=f"lotse-{name}"
        )
        for principal, level in ((person, Level.TRIGGER), (agent, Level.WRITE)):
            await admin.create_grant(
                owner,
                principal_id=principal.principal.id,
                resource_kind=ResourceKind.SPACE,
                resource_id=space.id,
                level=level,
            )
        forum = await admin.create_channel(
            owner,
            space.id,
            name=f"Runs {name}",
            type=ChannelType.FORUM,
            operator_mode=OperatorMode.AGENT,
            operator_id=agent.principal.id,
        )
        return Worker(side=side, index=index, person=person, agent=agent, forum=forum.id)

    made = await gather_limited(
        [worker(side, i) for side in SIDES for i in range(workers_per_side)], SETUP_CONCURRENCY
    )
    return BenchWorld(
        services=services,
        pool=pool,
        key=key,
        robin=robin,
        space_id=space.id,
        quiet=quiet.id,
        workers={side: [w for w in made if w.side == side] for side in SIDES},
    )


__all__ = [
    "BENCH_BURST",
    "SETUP_CONCURRENCY",
    "SIDES",
    "BenchWorld",
    "Worker",
    "build_world",
    "rebind",
]
