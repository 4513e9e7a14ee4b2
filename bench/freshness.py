"""Throughput of the freshness gate against a raw psycopg loop of the same statements.

Two workloads, each at concurrency 1 and 8 (one agent per worker):

- **hot thread**: every worker sends into one thread, each with the frontier its last
  answer gave it (sent: the accepted seq; held: the latest seq), so sends race on the
  compare-and-set and most of them are held;
- **many threads**: every worker sends into threads of its own, so every send is sent.

Each workload runs twice in the same process on the same PostgreSQL: through
`AgentSendService` (authorization, rules, rate limit, the gate, events, logs) and as a raw
loop that runs the same SQL statements (the generated functions of
`turnkeeper.adapters.postgres.queries`, one psycopg ``execute`` each) in the same
transactions on the same kind of pool, without the application layer. The report gives
sends per second of both and the ratio service / raw.

The database: ``TURNKEEPER_DATABASE_URL`` when set (a scratch database is created on that
server and dropped afterwards; the role needs CREATEDB), else an embedded server in a
temporary directory. ``--quick`` runs a tiny size, for the smoke test.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import TextIO

import attrs
import structlog
from psycopg_pool import AsyncConnectionPool

from bench.harness import BENCH_DATABASE_PREFIX, bench_server, run_stoppable
from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.postgres.databases import scratch_database
from turnkeeper.adapters.postgres.events import payload_json
from turnkeeper.adapters.postgres.uow import Conn, PostgresUnitOfWorkFactory, create_pool
from turnkeeper.adapters.system import SystemClock, UuidV7Generator
from turnkeeper.adapters.tokens import JwtSigner
from turnkeeper.application.bootstrap import Services, build_services
from turnkeeper.application.demo import build_demo_world
from turnkeeper.application.services.agent_send import AgentSend, SendFreshness, send_digest
from turnkeeper.application.settings import Settings
from turnkeeper.domain.freshness import SendState
from turnkeeper.domain.messaging import MessageDraft
from turnkeeper.domain.ratelimit import RL_MESSAGE, SECONDS_PER_MINUTE, TOLERANCE
from turnkeeper.domain.world import Level, Principal, PrincipalKind, ResourceKind, thread_target_key

#: The concurrency levels the report compares.
CONCURRENCY = (1, 8)
#: A rate-limit bucket no benchmark worker empties.
BENCH_BURST = 10_000_000


@attrs.frozen(kw_only=True)
class BenchSize:
    """How much work one measurement does.

    Attributes:
        sends_per_worker: sends each worker makes per measurement.
        threads_per_worker: threads each worker of the many-threads workload owns.
        warmup: unmeasured sends of each side first (connections, caches, plans).
        concurrency: the concurrency levels to measure.
    """

    sends_per_worker: int
    threads_per_worker: int
    warmup: int
    concurrency: tuple[int, ...] = CONCURRENCY


#: The default size: long enough for stable numbers on a laptop.
FULL = BenchSize(sends_per_worker=300, threads_per_worker=8, warmup=50)
#: The smoke-test size: every code path once, in well under a second per measurement.
QUICK = BenchSize(sends_per_worker=3, threads_per_worker=2, warmup=1)


@attrs.frozen(kw_only=True)
class Measurement:
    """One workload at one concurrency, through the service and raw.

    Attributes:
        workload: ``hot thread`` or ``many threads``.
        concurrency: concurrent workers.
        sends: sends each side made.
        service_per_second: sends per second through `AgentSendService`.
        raw_per_second: sends per second of the raw psycopg loop.
        service_sent: how many of the service's sends were sent (the rest held).
        raw_sent: how many of the raw loop's sends were sent.
    """

    workload: str
    concurrency: int
    sends: int
    service_per_second: float
    raw_per_second: float
    service_sent: int
    raw_sent: int

    @property
    def ratio(self) -> float:
        """Service throughput as a fraction of the raw loop's."""
        return self.service_per_second / self.raw_per_second if self.raw_per_second else 0.0


@attrs.define
class _Worker:
    """One sender: its agent, its targets and the frontier it knows per target."""

    agent: Principal
    threads: list[uuid.UUID]
    known: dict[uuid.UUID, int]
    sent: int = 0


# -- the two send loops --------------------------------------------------------------------


async def _service_send(
    services: Services, worker: _Worker, thread_id: uuid.UUID, cid: str
) -> None:
    outcome = await services.agent_send.send(
        worker.agent,
        AgentSend(
            target=thread_id,
            content=f"bench {cid}",
            client_message_id=cid,
            freshness=SendFreshness(
                target_key=thread_target_key(thread_id), seen_up_to_seq=worker.known[thread_id]
            ),
        ),
    )
    if outcome.state is SendState.SENT:
        worker.sent += 1
        assert outcome.accepted_seq is not None
        worker.known[thread_id] = outcome.accepted_seq
    else:
        worker.known[thread_id] = outcome.latest_seq


async def _raw_send(
    pool: AsyncConnectionPool[Conn], worker: _Worker, thread_id: uuid.UUID, cid: str
) -> None:
    """The statements of one gated send, in one transaction, straight on psycopg."""
    seen = worker.known[thread_id]
    agent = worker.agent.id
    content = f"bench {cid}"
    async with pool.connection() as conn:
        # The unit of work: authorization facts, idempotency lookup, rate bucket, CAS.
        thread = await q.get_thread(conn, id=thread_id)
        assert thread is not None
        channel = await q.get_channel(conn, id=thread.channel_id)
        assert channel is not None
        await q.get_space(conn, id=channel.space_id)
        await q.list_grants_for_principal(conn, principal_id=agent)
        await q.get_message_by_client_id(conn, author_id=agent, client_msg_id=cid)
        now = datetime.now(UTC)
        await q.take_bucket_token(
            conn,
            principal_id=agent,
            limit_class=RL_MESSAGE,
            burst=float(BENCH_BURST),
            now=now,
            per_minute=float(Settings().rl_message_per_minute),
            seconds_per_minute=SECONDS_PER_MINUTE,
            tolerance=TOLERANCE,
        )
        seq = await q.cas_thread_seq(conn, id=thread_id, seen_seq=seen)
        if seq is None:
            await q.get_message_by_client_id(conn, author_id=agent, client_msg_id=cid)
            frontier = await q.read_thread_frontier(conn, id=thread_id)
            assert frontier is not None
            worker.known[thread_id] = frontier.latest_seq
            await conn.commit()
            return
        message_id = uuid.uuid4()
        await q.insert_message(
            conn,
            id=message_id,
            thread_id=thread_id,
            thread_seq=seq,
            author_id=agent,
            origin="agent",
            kind="text",
            content=content,
            mentions=[],
            reply_to_id=None,
            restricted_to=None,
            client_msg_id=cid,
            digest=send_digest(thread_id, content),
            trigger_state=None,
            trigger_state_reason=None,
            run_id=None,
            created_at=now,
            deleted_at=None,
            version=1,
        )
        # The event log's flush: the seq allocation is the last statement before COMMIT.
        payload = {"message": {"id": str(message_id), "thread_seq": seq, "content": content}}
        await q.append_events(
            conn,
            offsets=[1],
            types=["message.created"],
            actor_ids=[agent],
            actor_kinds=["agent"],
            space_ids=[channel.space_id],
            channel_ids=[channel.id],
            thread_ids=[thread_id],
            resource_kinds=["message"],
            resource_ids=[message_id],
            resource_versions=[1],
            audience_ids=[None],
            restricted_tos=[None],
            payloads=[payload_json(payload)],
            created_ats=[now],
        )
        await conn.commit()
    worker.sent += 1
    worker.known[thread_id] = seq


Send = Callable[[_Worker, uuid.UUID, str], Awaitable[None]]


async def _drive(workers: Sequence[_Worker], sends: int, label: str, send: Send) -> float:
    """Run every worker's sends concurrently; the sends per second of all workers."""

    async def loop(index: int, worker: _Worker) -> None:
        for i in range(sends):
            thread_id = worker.threads[i % len(worker.threads)]
            await send(worker, thread_id, f"{label}-{index}-{i}")

    started = time.perf_counter()
    await asyncio.gather(*(loop(i, w) for i, w in enumerate(workers)))
    elapsed = time.perf_counter() - started
    return len(workers) * sends / elapsed if elapsed > 0 else 0.0


# -- the world of the benchmark ------------------------------------------------------------


@attrs.define
class _Bench:
    services: Services
    pool: AsyncConnectionPool[Conn]
    robin: Principal
    channel_id: uuid.UUID
    agents: list[Principal]
    made: int = 0

    async def thread(self) -> uuid.UUID:
        """A new thread in the bench channel with one message (frontier 1)."""
        self.made += 1
        created = await self.services.conversation.create_thread(
            self.robin,
            self.channel_id,
            title=f"bench {self.made}",
            first_message=MessageDraft(client_msg_id=f"bench-thread-{self.made}", content="go"),
        )
        return created.thread.id

    async def workers(self, count: int, threads_each: int, *, shared: bool) -> list[_Worker]:
        hot = [await self.thread()] if shared else []
        found = []
        for agent in self.agents[:count]:
            threads = hot or [await self.thread() for _ in range(threads_each)]
            found.append(_Worker(agent=agent, threads=threads, known=dict.fromkeys(threads, 1)))
        return found


async def _prepare(conninfo: str, size: BenchSize) -> _Bench:
    most = max(size.concurrency)
    pool = await create_pool(conninfo, min_size=most + 2, max_size=most + 2)
    settings = Settings(rl_message_burst=BENCH_BURST, pool_max_size=most + 2)
    services = build_services(
        PostgresUnitOfWorkFactory(pool),
        settings,
        SystemClock(),
        UuidV7Generator(),
        JwtSigner(os.urandom(32)),
    )
    world = await build_demo_world(services)
    robin = world.principal("robin")
    channel = world.channels["reports"]
    agents = []
    for i in range(most):
        created = await services.admin.create_principal(
            robin, kind=PrincipalKind.AGENT, handle=f"bench{i:02d}"
        )
        await services.admin.create_grant(
            robin,
            principal_id=created.principal.id,
            resource_kind=ResourceKind.CHANNEL,
            resource_id=channel.id,
            level=Level.WRITE,
        )
        agents.append(created.principal)
    return _Bench(services=services, pool=pool, robin=robin, channel_id=channel.id, agents=agents)


async def run(conninfo: str, size: BenchSize = FULL) -> list[Measurement]:
    """Measure every workload at every concurrency on a migrated, empty database.

    Args:
        conninfo: the database (migrated; the benchmark adds its own world to it).
        size: how much work each measurement does.

    Returns:
        One measurement per workload and concurrency.
    """
    bench = await _prepare(conninfo, size)
    results = []
    try:

        async def warm_service(w: _Worker, t: uuid.UUID, cid: str) -> None:
            await _service_send(bench.services, w, t, cid)

        async def warm_raw(w: _Worker, t: uuid.UUID, cid: str) -> None:
            await _raw_send(bench.pool, w, t, cid)

        most = max(size.concurrency)
        await _drive(await bench.workers(most, 1, shared=False), size.warmup, "ws", warm_service)
        await _drive(await bench.workers(most, 1, shared=False), size.warmup, "wr", warm_raw)
        for concurrency in size.concurrency:
            for workload, shared in (("hot thread", True), ("many threads", False)):
                label = f"{'hot' if shared else 'many'}{concurrency}"
                service_workers = await bench.workers(
                    concurrency, size.threads_per_worker, shared=shared
                )
                raw_workers = await bench.workers(
                    concurrency, size.threads_per_worker, shared=shared
                )

                async def service_send(w: _Worker, t: uuid.UUID, cid: str) -> None:
                    await _service_send(bench.services, w, t, cid)

                async def raw_send(w: _Worker, t: uuid.UUID, cid: str) -> None:
                    await _raw_send(bench.pool, w, t, cid)

                service_rate = await _drive(
                    service_workers, size.sends_per_worker, f"s-{label}", service_send
                )
                raw_rate = await _drive(raw_workers, size.sends_per_worker, f"r-{label}", raw_send)
                results.append(
                    Measurement(
                        workload=workload,
                        concurrency=concurrency,
                        sends=concurrency * size.sends_per_worker,
                        service_per_second=service_rate,
                        raw_per_second=raw_rate,
                        service_sent=sum(w.sent for w in service_workers),
                        raw_sent=sum(w.sent for w in raw_workers),
                    )
                )
    finally:
        await bench.pool.close()
    return results


def report(results: Sequence[Measurement], out: TextIO) -> None:
    """Print the measurements as a table.

    Args:
        results: the measurements.
        out: where to write.
    """
    header = (
        f"{'workload':<13} {'conc':>4} {'sends':>6} {'service/s':>10} {'raw/s':>10} "
        f"{'ratio':>6} {'sent svc/raw':>13}"
    )
    print(header, file=out)
    for m in results:
        print(
            f"{m.workload:<13} {m.concurrency:>4} {m.sends:>6} {m.service_per_second:>10.1f} "
            f"{m.raw_per_second:>10.1f} {m.ratio:>6.2f} {f'{m.service_sent}/{m.raw_sent}':>13}",
            file=out,
        )


async def main_async(argv: Sequence[str], out: TextIO) -> int:
    """Run the benchmark from the command line.

    Args:
        argv: the arguments (``--quick`` for the tiny size).
        out: where to print the report.

    Returns:
        The exit code.
    """
    unknown = [a for a in argv if a != "--quick"]
    if unknown:
        print(f"usage: python -m bench [--quick] (unknown: {' '.join(unknown)})", file=sys.stderr)
        return 2
    size = QUICK if "--quick" in argv else FULL
    # One record per send would swamp the report: only warnings and errors here.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    async with (
        bench_server() as server,
        scratch_database(server.conninfo, prefix=BENCH_DATABASE_PREFIX) as conninfo,
    ):
        results = await run(conninfo, size)
    print(f"freshness gate: sends per second, service vs raw psycopg ({server.where})", file=out)
    report(results, out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench``.

    Args:
        argv: the arguments; ``sys.argv[1:]`` when None.

    Returns:
        The exit code.
    """
    return run_stoppable(main_async(list(sys.argv[1:] if argv is None else argv), sys.stdout))


__all__ = ["FULL", "QUICK", "BenchSize", "Measurement", "main", "report", "run"]
