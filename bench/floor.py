"""The floor side of the benchmark: each hot operation the fewest-round-trip way.

Every function here does one operation's effect with the statements of
`bench.floor_sql` and `bench.floor_agent_sql` on a pooled connection in autocommit:
one statement, one round trip (the finish: one pipeline of BEGIN, the run row lock, the
settlement and COMMIT, also one round trip). In Python there is only what a server
must do anyway: ids, the idempotency digest, the body's size rule, the invocation
tokens' signatures. A unique violation (a concurrent duplicate, as the service's
transactor meets it) reruns the operation, at most `FLOOR_ATTEMPTS` times.

The four floor rows of the table are here too: `append_one_statement` (the append of a
message without any check), `append_in_transaction` (its three statements between
BEGIN and COMMIT), the same append with ``counter=True`` (numbered as the event log
numbers it, from the writer's xid, ADR 0020) and
`create_message` with ``runs=False`` (everything a plain message checks and writes).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from psycopg import errors
from psycopg.pq import TransactionStatus

from bench import floor_agent_sql as agent_sql
from bench import floor_sql
from bench.harness import name_statement
from bench.raw import REFILL_PER_MINUTE, RL_MESSAGE
from bench.world import BENCH_BURST, BenchWorld, Worker
from turnkeeper.adapters.postgres.uow import Conn
from turnkeeper.adapters.system import UuidV7Generator
from turnkeeper.adapters.tokens import JwtSigner
from turnkeeper.application.documents import rfc3339
from turnkeeper.application.ports import InvocationClaims
from turnkeeper.domain.messaging import payload_digest
from turnkeeper.domain.ratelimit import SECONDS_PER_MINUTE, TOLERANCE
from turnkeeper.domain.runs import TRIGGER_STATE_OF, RunState, TriggerKind

_T = TypeVar("_T")

#: Runs of one operation at most (the first and the reruns after a unique violation).
FLOOR_ATTEMPTS = 3

#: The names the statement trace gives the floor's statements.
for _text, _name in (
    (floor_sql.APPEND_ONE_STATEMENT, "FloorAppend"),
    (floor_sql.APPEND_WITH_COUNTER, "FloorAppendWithCounter"),
    (floor_sql.APPEND_STATEMENTS[0], "FloorAllocateSeq"),
    (floor_sql.APPEND_STATEMENTS[1], "FloorInsertMessage"),
    (floor_sql.APPEND_STATEMENTS[2], "FloorInsertEvent"),
    (floor_sql.CREATE_MESSAGE, "FloorCreateMessage"),
    (floor_sql.PLAIN_MESSAGE, "FloorPlainMessage"),
    (agent_sql.GATED_SEND, "FloorGatedSend"),
    (agent_sql.LOCK_RUN, "FloorLockRun"),
    (agent_sql.SETTLE_RUN, "FloorSettleRun"),
    (agent_sql.POLL, "FloorPoll"),
):
    name_statement(_text, _name)

_IDS = UuidV7Generator()


class FloorDeclined(RuntimeError):
    """A floor statement did not do the operation (a path it does not implement, a refusal).

    Args:
        operation: which floor.
        path: what the statement answered.
    """

    def __init__(self, operation: str, path: str) -> None:
        super().__init__(f"floor {operation}: {path}")
        self.path = path


async def ensure_floor_sequence(world: BenchWorld) -> None:
    """Create the sequence of the events of the floors without the counter row.

    Args:
        world: the world (its database).
    """
    async with world.pool.connection() as conn:
        await conn.execute(floor_sql.CREATE_FLOOR_EVENT_SEQUENCE)
        await conn.commit()


@contextlib.asynccontextmanager
async def _autocommit(world: BenchWorld) -> AsyncIterator[Conn]:
    async with world.pool.connection() as conn:
        await conn.set_autocommit(True)
        try:
            yield conn
        finally:
            if conn.info.transaction_status != TransactionStatus.IDLE:
                # A failed pipeline leaves its explicit transaction open and aborted.
                await conn.execute("ROLLBACK")
            await conn.set_autocommit(False)


async def _attempts(work: Callable[[], Awaitable[_T]]) -> _T:
    for attempt in range(FLOOR_ATTEMPTS):
        try:
            return await work()
        except (errors.UniqueViolation, errors.DeadlockDetected):
            if attempt == FLOOR_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _rate(author_id: uuid.UUID) -> dict[str, Any]:
    return {
        "author_id": author_id,
        "limit_class": RL_MESSAGE,
        "burst": float(BENCH_BURST),
        "per_minute": float(REFILL_PER_MINUTE),
        "seconds_per_minute": SECONDS_PER_MINUTE,
        "tolerance": TOLERANCE,
    }


def _check_size(world: BenchWorld, content: str) -> None:
    # The body rule the service applies before its unit (message.max_content_bytes).
    if len(content.encode("utf-8")) > world.services.settings.max_content_bytes:
        raise FloorDeclined("message", "too_long")


async def _one_row(conn: Conn, query: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
    cur = await conn.execute(query, params)
    row: tuple[Any, ...] | None = await cur.fetchone()
    return row


# -- the floor rows -----------------------------------------------------------------------


def _append_params(
    worker: Worker, space_id: uuid.UUID, channel_id: uuid.UUID, thread_id: uuid.UUID
) -> dict[str, Any]:
    person = worker.person.principal
    cid = worker.cid("f")
    content = "Sam, the report is ready."
    now = datetime.now(UTC)
    message_id = _IDS.new_id()
    doc = {
        "id": str(message_id),
        "thread_id": str(thread_id),
        "author": {"id": str(person.id), "kind": person.kind.value, "handle": person.handle},
        "origin": "human",
        "kind": "text",
        "content": content,
        "mentions": [],
        "client_msg_id": cid,
        "created_at": rfc3339(now),
        "version": 1,
    }
    return {
        "thread_id": thread_id,
        "space_id": space_id,
        "channel_id": channel_id,
        "message_id": message_id,
        "author_id": person.id,
        "content": content,
        "client_msg_id": cid,
        "digest": payload_digest(thread_id, content, None, None),
        "now": now,
        "doc": json.dumps(doc, separators=(",", ":")),
    }


async def append_one_statement(
    world: BenchWorld, worker: Worker, thread_id: uuid.UUID, *, counter: bool = False
) -> int:
    """The floor: thread row update, message insert and event insert in one statement.

    Args:
        world: the world.
        worker: whose person writes.
        thread_id: a thread of the quiet forum.
        counter: number the event as the event log does, from the writer's xid (else a
            plain sequence, no ordering rule).

    Returns:
        The message's thread_seq.
    """
    params = _append_params(worker, world.space_id, world.quiet, thread_id)
    query = floor_sql.APPEND_WITH_COUNTER if counter else floor_sql.APPEND_ONE_STATEMENT

    async def work() -> int:
        async with _autocommit(world) as conn:
            row = await _one_row(conn, query, params)
        assert row is not None
        return int(row[0])

    return await _attempts(work)


async def append_in_transaction(world: BenchWorld, worker: Worker, thread_id: uuid.UUID) -> int:
    """The floor's three statements one by one between BEGIN and COMMIT (5 round trips).

    Args:
        world: the world.
        worker: whose person writes.
        thread_id: a thread of the quiet forum.

    Returns:
        The message's thread_seq.
    """
    params = _append_params(worker, world.space_id, world.quiet, thread_id)
    allocate, message, event = floor_sql.APPEND_STATEMENTS
    async with world.pool.connection() as conn:
        row = await _one_row(conn, allocate, params)
        assert row is not None
        params["thread_seq"] = int(row[0])
        await conn.execute(message, params)
        await conn.execute(event, params)
        await conn.commit()
    return int(params["thread_seq"])


# -- the operations -----------------------------------------------------------------------


async def create_message(
    world: BenchWorld,
    worker: Worker,
    thread_id: uuid.UUID,
    cid: str,
    content: str,
    *,
    runs: bool = True,
) -> tuple[str, int]:
    """The createMessage of the worker's person, in one statement.

    Args:
        world: the world.
        worker: whose person writes.
        thread_id: the thread.
        cid: the client message id.
        content: the text.
        runs: open a run when the message triggers one (False: everything a plain
            message checks and writes; a message that would trigger is declined).

    Returns:
        The path (plain or run) and the message's thread_seq.

    Raises:
        FloorDeclined: any other answer (a refusal, or a path the floor does not cover).
    """
    _check_size(world, content)
    person = worker.person.principal
    params = {
        **_rate(person.id),
        "author_handle": person.handle,
        "is_owner": person.is_owner,
        "thread_id": thread_id,
        "client_msg_id": cid,
        "digest": payload_digest(thread_id, content, None, None),
        "content": content,
        "message_id": _IDS.new_id(),
        "run_id": _IDS.new_id(),
        "anchor_id": _IDS.new_id(),
        "now": datetime.now(UTC),
    }
    query = floor_sql.CREATE_MESSAGE if runs else floor_sql.PLAIN_MESSAGE

    async def work() -> tuple[str, int]:
        async with _autocommit(world) as conn:
            row = await _one_row(conn, query, params)
        path = "not_found" if row is None else str(row[0])
        if row is None or path not in ("plain", "run"):
            raise FloorDeclined("createMessage", path)
        return path, int(row[1])

    return await _attempts(work)


async def gated_send(
    world: BenchWorld, worker: Worker, thread_id: uuid.UUID, seen: int, cid: str, content: str
) -> tuple[str, int]:
    """An agent send through the freshness gate in one statement.

    Args:
        world: the world.
        worker: whose agent sends.
        thread_id: the thread.
        seen: the frontier the agent saw.
        cid: the client message id.
        content: the text.

    Returns:
        ``("sent", accepted seq)``, ``("held", latest seq)`` or ``("already_sent", seq)``.

    Raises:
        FloorDeclined: any other answer.
    """
    _check_size(world, content)
    agent = worker.agent.principal
    params = {
        **_rate(agent.id),
        "author_handle": agent.handle,
        "is_owner": agent.is_owner,
        "thread_id": thread_id,
        "seen": seen,
        "client_msg_id": cid,
        "digest": payload_digest(thread_id, content, None, None),
        "content": content,
        "message_id": _IDS.new_id(),
        "now": datetime.now(UTC),
    }

    async def work() -> tuple[str, int]:
        async with _autocommit(world) as conn:
            row = await _one_row(conn, agent_sql.GATED_SEND, params)
        state = "not_found" if row is None else str(row[0])
        if row is None or state not in ("sent", "held", "already_sent"):
            raise FloorDeclined("agent send", state)
        return state, int(row[1])

    return await _attempts(work)


async def finish_run(world: BenchWorld, worker: Worker, run_id: uuid.UUID) -> uuid.UUID | None:
    """The agent finishes its running run completed: one pipeline, one round trip.

    Args:
        world: the world.
        worker: whose agent finishes.
        run_id: the run.

    Returns:
        The follow-on run, if one was opened.

    Raises:
        FloorDeclined: any answer but an end (with or without a follow-on run).
    """
    state = RunState.COMPLETED
    params = {
        "run_id": run_id,
        "agent_id": worker.agent.principal.id,
        "state": state.value,
        "reason": None,
        "trigger_state": TRIGGER_STATE_OF[state].value,
        "now": datetime.now(UTC),
        "follow_on_id": _IDS.new_id(),
        "anchor_id": _IDS.new_id(),
    }

    async def work() -> uuid.UUID | None:
        async with _autocommit(world) as conn:
            async with conn.pipeline():
                await conn.execute("BEGIN")
                await conn.execute(agent_sql.LOCK_RUN, params)
                settled = await conn.execute(agent_sql.SETTLE_RUN, params)
                await conn.execute("COMMIT")
            row = await settled.fetchone()
        path = "not_found" if row is None else str(row[0])
        if row is None or path not in ("ended", "follow_on"):
            raise FloorDeclined("finish", path)
        return None if row[2] is None else uuid.UUID(str(row[2]))

    return await _attempts(work)


async def poll(world: BenchWorld, worker: Worker, after: int, limit: int = 1) -> tuple[int, int]:
    """One poll of the agent feed in one statement, tokens signed afterwards.

    Args:
        world: the world.
        worker: whose agent polls.
        after: the cursor.
        limit: the page size.

    Returns:
        The next cursor and the number of invocations delivered with a token.

    Raises:
        FloorDeclined: when the page holds what the floor does not cover.
    """
    agent = worker.agent.principal
    now = datetime.now(UTC)
    params = {"agent_id": agent.id, "after": after, "limit": limit, "now": now}
    signer = JwtSigner(world.key)
    async with _autocommit(world) as conn:
        cur = await conn.execute(agent_sql.POLL, params)
        rows = await cur.fetchall()
    delivered = 0
    for row in rows:
        if str(row[8]) != "deliver":
            raise FloorDeclined("poll", str(row[8]))
        if row[1] == "agent.invocation" and row[4]:
            signer.sign(
                InvocationClaims(
                    run_id=row[2],
                    message_id=row[5],
                    trigger_kind=TriggerKind.MESSAGE,
                    sub=row[6],
                    jti=str(_IDS.new_id()),
                    exp=now + world.services.settings.invocation_token_ttl,
                )
            )
            delivered += 1
    return (int(rows[-1][0]) if rows else after), delivered


__all__ = [
    "FLOOR_ATTEMPTS",
    "FloorDeclined",
    "append_in_transaction",
    "append_one_statement",
    "create_message",
    "ensure_floor_sequence",
    "finish_run",
    "gated_send",
    "poll",
]
