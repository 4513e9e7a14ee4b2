"""The growth run: do send, history read, event poll and run finish stay flat with size?

``python -m bench --scale`` measures four operations on the small tables of a fresh
database, then loads 10,000 threads with 100 messages each (1,000,000 messages), one
``message.created`` event per message, 10,000 ended runs with 10 settled follow-ups each
and 100,000 personal events of other agents, all with ``COPY``, runs ``ANALYZE``, and
measures the same operations again on new items. It prints each figure with the ratio
large / small, and the indexes PostgreSQL chose for the statements on the large tables.

Not part of ``--quick`` nor of ``make test``: the load alone takes a minute or two.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

import attrs
import psycopg
from psycopg.types.json import Jsonb

from bench.asgi import AsgiClient
from bench.harness import open_traced_pool
from bench.operations import HISTORY, OPERATIONS, Operation
from bench.suite import POOL_SPARE, Row, SuiteSize, measure
from bench.world import build_world
from turnkeeper.adapters.event_seqs import MAX_EVENTS_PER_UNIT
from turnkeeper.adapters.http.app import create_app
from turnkeeper.domain.world import ChannelType, OperatorMode, PrincipalKind

#: Threads of the large tables.
THREADS = 10_000
#: Messages per thread (THREADS * MESSAGES_PER_THREAD = 1M).
MESSAGES_PER_THREAD = 100
#: Settled follow-ups per ended run.
FOLLOWUPS_PER_RUN = 10
#: Personal events of other agents (agent.invocation).
PERSONAL_EVENTS = 100_000
#: Agents and people the bulk rows are spread over.
BULK_AUTHORS = 20
#: The size of each measurement of the growth run.
SCALE_SIZE = SuiteSize(ops=400, warmup=5, concurrency=(1, 8), http=False)

_BY_NAME = {op.name: op for op in OPERATIONS}
#: The operations the growth run measures.
SCALE_OPERATIONS: tuple[Operation, ...] = (
    _BY_NAME["message, no trigger"],
    HISTORY,
    _BY_NAME["agent poll + delivery"],
    _BY_NAME["finish, 10 follow-ups"],
)

#: Statements whose plans are shown on the large tables, with sample arguments.
_EXPLAINED = {
    "GetPostFacts": (
        "SELECT t.id, (SELECT count(*) FROM grants g WHERE g.principal_id = %(author)s),"
        " m.id FROM threads t JOIN channels c ON c.id = t.channel_id"
        " JOIN spaces s ON s.id = c.space_id LEFT JOIN messages m"
        " ON m.author_id = %(author)s AND m.client_msg_id = 'bulk-1'"
        " WHERE t.id = %(thread)s FOR UPDATE OF t"
    ),
    "AllocateThreadSeq": "UPDATE threads SET latest_seq = latest_seq WHERE id = %(thread)s",
    "GetMessageByClientId": (
        "SELECT * FROM messages WHERE author_id = %(author)s AND client_msg_id = 'bulk-1'"
    ),
    "ListVisibleMessages": (
        "SELECT * FROM messages WHERE thread_id = %(thread)s AND thread_seq > 0"
        " AND deleted_at IS NULL AND (restricted_to IS NULL OR author_id = %(author)s"
        " OR %(author)s = ANY(restricted_to)) ORDER BY thread_seq LIMIT 50"
    ),
    "ReadAudienceEvents": (
        "SELECT * FROM events WHERE audience_id = %(agent)s AND seq > 0 ORDER BY seq LIMIT 1"
    ),
    "LockActiveRunInThread": (
        "SELECT * FROM runs WHERE thread_id = %(thread)s"
        " AND state IN ('queued', 'running', 'waiting_input') FOR UPDATE"
    ),
    "LockOpenFollowups": (
        "SELECT f.message_id FROM run_followups f JOIN messages m ON m.id = f.message_id"
        " WHERE f.run_id = %(run)s AND f.state IN ('queued', 'delivered')"
        " ORDER BY f.message_id FOR UPDATE OF f"
    ),
}


@attrs.frozen(kw_only=True)
class Loaded:
    """What the bulk load made (sample ids for the plans).

    Attributes:
        thread: one bulk thread.
        author: one bulk author.
        agent: one bulk agent.
        run: one bulk run.
        seconds: how long the load took.
    """

    thread: uuid.UUID
    author: uuid.UUID
    agent: uuid.UUID
    run: uuid.UUID
    seconds: float


async def bulk_load(
    conninfo: str,
    owner: uuid.UUID,
    channel: uuid.UUID,
    space: uuid.UUID,
    authors: list[uuid.UUID],
    agents: list[uuid.UUID],
) -> Loaded:
    """COPY the large tables into the database.

    Args:
        conninfo: the database.
        owner: who created the threads.
        channel: the forum the threads live in.
        space: its space.
        authors: people the messages are spread over.
        agents: agents the runs and personal events are spread over.

    Returns:
        Sample ids and the time taken.
    """
    started = time.perf_counter()
    now = datetime.now(UTC) - timedelta(days=1)
    threads = [uuid.uuid4() for _ in range(THREADS)]
    first_messages: list[uuid.UUID] = []
    runs = [uuid.uuid4() for _ in range(THREADS)]
    async with await psycopg.AsyncConnection.connect(conninfo) as conn:
        cur = conn.cursor()
        async with cur.copy(
            "COPY threads (id, channel_id, is_main, title, title_source, state, latest_seq,"
            " has_restricted, created_by, created_at) FROM STDIN"
        ) as copy:
            for i, thread in enumerate(threads):
                await copy.write_row(
                    (
                        thread,
                        channel,
                        False,
                        f"bulk {i}",
                        "human",
                        "open",
                        MESSAGES_PER_THREAD,
                        False,
                        owner,
                        now,
                    )
                )
        followup_rows: list[tuple[uuid.UUID, uuid.UUID]] = []
        async with cur.copy(
            "COPY messages (id, thread_id, thread_seq, author_id, origin, kind, content,"
            " client_msg_id, digest, created_at) FROM STDIN"
        ) as copy:
            n = 0
            for t, thread in enumerate(threads):
                for seq in range(1, MESSAGES_PER_THREAD + 1):
                    message = uuid.uuid4()
                    n += 1
                    if seq == 1:
                        first_messages.append(message)
                    elif seq <= FOLLOWUPS_PER_RUN + 1:
                        followup_rows.append((runs[t], message))
                    content = f"bulk message {n}: Alex asks Sam about the report."
                    await copy.write_row(
                        (
                            message,
                            thread,
                            seq,
                            authors[n % len(authors)],
                            "human",
                            "text",
                            content,
                            f"bulk-{n}",
                            hashlib.sha256(content.encode()).hexdigest(),
                            now,
                        )
                    )
        async with cur.copy(
            "COPY runs (id, thread_id, agent_id, state, trigger_kind, triggering_message_id,"
            " triggered_by, version, created_at, updated_at) FROM STDIN"
        ) as copy:
            for t, run in enumerate(runs):
                await copy.write_row(
                    (
                        run,
                        threads[t],
                        agents[t % len(agents)],
                        "completed",
                        "message",
                        first_messages[t],
                        authors[t % len(authors)],
                        3,
                        now,
                        now,
                    )
                )
        async with cur.copy(
            "COPY run_followups (run_id, message_id, state, created_at, updated_at,"
            " accepted_run_id, mode) FROM STDIN"
        ) as copy:
            for run, message in followup_rows:
                # Accepted into the run they belong to, in the default mode (migration 0006).
                await copy.write_row((run, message, "discarded", now, now, run, "queue"))
        await conn.commit()
        rows: list[tuple[Any, ...]] = []
        for thread in threads:
            for k in range(MESSAGES_PER_THREAD):
                rows.append(
                    (
                        "message.created",
                        authors[k % len(authors)],
                        "person",
                        space,
                        channel,
                        thread,
                        "message",
                        uuid.uuid4(),
                        1,
                        None,
                        Jsonb({"message": {"thread_seq": k + 1}}),
                        now,
                    )
                )
        for p in range(PERSONAL_EVENTS):
            t = p % THREADS
            rows.append(
                (
                    "agent.invocation",
                    authors[p % len(authors)],
                    "person",
                    space,
                    channel,
                    threads[t],
                    "run",
                    runs[t],
                    None,
                    agents[p % len(agents)],
                    Jsonb({"run_id": str(runs[t])}),
                    now,
                )
            )
        # Seqs as the service gives them (ADR 0020): one transaction numbers at most
        # MAX_EVENTS_PER_UNIT events after its own base, so the log is loaded in chunks.
        for start in range(0, len(rows), MAX_EVENTS_PER_UNIT):
            await cur.execute("SELECT turnkeeper_event_seq_base()")
            base_row = await cur.fetchone()
            base = int(base_row[0]) if base_row else 0
            async with cur.copy(
                "COPY events (seq, type, actor_id, actor_kind, space_id, channel_id, thread_id,"
                " resource_kind, resource_id, resource_version, audience_id, payload,"
                " created_at) FROM STDIN"
            ) as copy:
                chunk = rows[start : start + MAX_EVENTS_PER_UNIT]
                for number, row in enumerate(chunk, start=1):
                    await copy.write_row((base + number, *row))
            await conn.commit()
        await conn.commit()
        await conn.set_autocommit(True)
        await conn.execute("ANALYZE")
    return Loaded(
        thread=threads[0],
        author=authors[0],
        agent=agents[0],
        run=runs[0],
        seconds=time.perf_counter() - started,
    )


def _indexes(plan: Any) -> list[str]:
    found: list[str] = []
    if isinstance(plan, dict):
        for key, value in plan.items():
            if key == "Index Name":
                found.append(str(value))
            elif key == "Node Type" and value == "Seq Scan":
                found.append(f"Seq Scan on {plan.get('Relation Name')}")
            else:
                found.extend(_indexes(value))
    elif isinstance(plan, list):
        for part in plan:
            found.extend(_indexes(part))
    return found


async def explain(conninfo: str, loaded: Loaded) -> dict[str, list[str]]:
    """The indexes (or sequential scans) of the hot statements on the large tables.

    Args:
        conninfo: the database.
        loaded: sample ids.

    Returns:
        Statement name -> index names in plan order.
    """
    params = {
        "thread": loaded.thread,
        "author": loaded.author,
        "agent": loaded.agent,
        "run": loaded.run,
    }
    found: dict[str, list[str]] = {}
    async with await psycopg.AsyncConnection.connect(conninfo) as conn:
        for name, statement in _EXPLAINED.items():
            cur = await conn.execute(f"EXPLAIN (FORMAT JSON) {statement}", params)
            row = await cur.fetchone()
            found[name] = list(dict.fromkeys(_indexes(row[0] if row else [])))
        await conn.rollback()
    return found


async def run_scale(conninfo: str, out: TextIO, *, data_dir: Path | None = None) -> None:
    """Measure on small tables, bulk load, measure again, print the ratios.

    Args:
        conninfo: a fresh, migrated database.
        out: where to print.
        data_dir: the embedded server's data directory (for memory figures).
    """
    most = max(SCALE_SIZE.concurrency)
    pool = await open_traced_pool(conninfo, most + POOL_SPARE)
    try:
        world = await build_world(pool, most)
        app = create_app(world.services, world.services.settings)
        http = AsgiClient(app)

        async def measure_all() -> list[Row]:
            return [
                await measure(world, http, op, c, SCALE_SIZE, data_dir)
                for op in SCALE_OPERATIONS
                for c in SCALE_SIZE.concurrency
            ]

        # A discarded first round: the first measurement of a process runs cold.
        await measure_all()
        small = await measure_all()
        owner = world.robin.principal
        archive = await world.services.admin.create_channel(
            owner,
            world.space_id,
            name="Archive",
            type=ChannelType.FORUM,
            operator_mode=OperatorMode.NONE,
        )
        authors = [w.person.principal.id for w in world.workers["http"]]
        agents = []
        for i in range(BULK_AUTHORS):
            made = await world.services.admin.create_principal(
                owner, kind=PrincipalKind.AGENT, handle=f"texter-bulk{i:02d}"
            )
            agents.append(made.principal.id)
        loaded = await bulk_load(conninfo, owner.id, archive.id, world.space_id, authors, agents)
        print(
            f"loaded {THREADS} threads, {THREADS * MESSAGES_PER_THREAD} messages,"
            f" {THREADS * MESSAGES_PER_THREAD + PERSONAL_EVENTS} events, {THREADS} runs,"
            f" {THREADS * FOLLOWUPS_PER_RUN} follow-ups with COPY in {loaded.seconds:.0f} s",
            file=out,
        )
        large = await measure_all()
        plans = await explain(conninfo, loaded)
    finally:
        await pool.close()
    print(
        f"{'operation':<24} {'conc':>4} {'small/s':>8} {'large/s':>8} {'large/small':>11} "
        f"{'p50 small':>9} {'p50 large':>9} {'raw small':>9} {'raw large':>9}",
        file=out,
    )
    for s, g in zip(small, large, strict=True):
        ratio = g.service.per_second / s.service.per_second if s.service.per_second else 0.0
        print(
            f"{s.operation:<24} {s.concurrency:>4} {s.service.per_second:>8.0f} "
            f"{g.service.per_second:>8.0f} {ratio:>11.2f} {s.service.percentile(0.5):>9.2f} "
            f"{g.service.percentile(0.5):>9.2f} {s.raw.per_second:>9.0f} {g.raw.per_second:>9.0f}",
            file=out,
        )
    print("plans on the large tables (index used per statement):", file=out)
    for name, indexes in plans.items():
        print(f"  {name}: {', '.join(indexes) or '-'}", file=out)


__all__ = ["SCALE_OPERATIONS", "SCALE_SIZE", "Loaded", "bulk_load", "explain", "run_scale"]
