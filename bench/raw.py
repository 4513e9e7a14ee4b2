"""The raw psycopg loops: each operation's statements, in its transaction, nothing else.

Each function runs, on one pooled connection, the statements the service runs for the
same operation (as traced, see ``docs/performance.md``) through the generated functions of
`turnkeeper.adapters.postgres.queries`, then commits. Between statements there is only what the
statements need: ids, a digest, the JSON of event payloads, a token signature. No
authorization rules, no domain objects, no bus, no unit of work, no retries.

When the service changes its statements, these loops do not follow by themselves: the
suite compares the traced statement lists of both sides and warns when they differ.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import jwt

from bench.world import BENCH_BURST, BenchWorld, Worker
from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.postgres.uow import Conn
from turnkeeper.application.settings import Settings
from turnkeeper.domain.ratelimit import SECONDS_PER_MINUTE, TOLERANCE
from turnkeeper.domain.world import Principal, PrincipalKind

#: The rate-limit class of messages (as `turnkeeper.domain.ratelimit.RL_MESSAGE`).
RL_MESSAGE = "rl.message"
#: The refill rate of the bench world (the default of ``ratelimit.rl.message.per_minute``).
REFILL_PER_MINUTE = Settings().rl_message_per_minute
#: Lifetime of a signed invocation token (as the default ``agent.invocation_token_ttl``).
TOKEN_TTL = timedelta(seconds=900)


@attrs.frozen
class _Event:
    type: str
    actor_id: uuid.UUID
    actor_kind: str
    space_id: uuid.UUID
    channel_id: uuid.UUID
    thread_id: uuid.UUID | None
    resource_kind: str
    resource_id: uuid.UUID
    resource_version: int | None
    audience_id: uuid.UUID | None
    payload: dict[str, Any]


def _json(payload: dict[str, Any]) -> str:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


async def _append(conn: Conn, events: Sequence[_Event], now: datetime) -> None:
    """The unit's flush: every event in one ``AppendEvents``."""
    await q.append_events(
        conn,
        types=[e.type for e in events],
        offsets=list(range(1, len(events) + 1)),
        actor_ids=[e.actor_id for e in events],
        actor_kinds=[e.actor_kind for e in events],
        space_ids=[e.space_id for e in events],
        channel_ids=[e.channel_id for e in events],
        thread_ids=[e.thread_id for e in events],
        resource_kinds=[e.resource_kind for e in events],
        resource_ids=[e.resource_id for e in events],
        resource_versions=[e.resource_version for e in events],
        audience_ids=[e.audience_id for e in events],
        restricted_tos=[None for _ in events],
        payloads=[_json(e.payload) for e in events],
        created_ats=[now for _ in events],
    )


def _message_doc(
    row_id: uuid.UUID,
    thread_id: uuid.UUID,
    seq: int,
    author: q.PrincipalRow,
    origin: str,
    kind: str,
    content: str,
    now: datetime,
    **extra: object,
) -> dict[str, Any]:
    return {
        "id": str(row_id),
        "thread_id": str(thread_id),
        "thread_seq": seq,
        "author": {"id": str(author.id), "kind": author.kind, "handle": author.handle},
        "origin": origin,
        "kind": kind,
        "content": content,
        "mentions": [],
        "created_at": now.isoformat(),
        "version": 1,
        **extra,
    }


def _row_doc(row: q.MessageRow, author: q.PrincipalRow) -> dict[str, Any]:
    doc = _message_doc(
        row.id,
        row.thread_id,
        row.thread_seq,
        author,
        row.origin,
        row.kind,
        row.content,
        row.created_at,
        version=row.version,
    )
    if row.client_msg_id is not None:
        doc["client_msg_id"] = row.client_msg_id
    if row.trigger_state is not None:
        doc["trigger_state"] = row.trigger_state
    return doc


async def _insert(
    conn: Conn,
    *,
    message_id: uuid.UUID,
    thread_id: uuid.UUID,
    seq: int,
    author_id: uuid.UUID,
    origin: str,
    kind: str,
    content: str,
    cid: str | None,
    run_id: uuid.UUID | None,
    now: datetime,
) -> None:
    await q.insert_message(
        conn,
        id=message_id,
        thread_id=thread_id,
        thread_seq=seq,
        author_id=author_id,
        origin=origin,
        kind=kind,
        content=content,
        mentions=[],
        reply_to_id=None,
        restricted_to=None,
        client_msg_id=cid,
        digest=None
        if cid is None
        else hashlib.sha256(f"v1\n{thread_id}\n{content}".encode()).hexdigest(),
        trigger_state=None,
        trigger_state_reason=None,
        run_id=run_id,
        created_at=now,
        deleted_at=None,
        version=1,
    )


@attrs.frozen
class _Target:
    thread_id: uuid.UUID
    channel_id: uuid.UUID
    space_id: uuid.UUID
    operator_agent_id: uuid.UUID | None


async def _target(conn: Conn, thread_id: uuid.UUID) -> _Target:
    """``GetThreadTarget``: the thread with its channel and space in one statement."""
    row = await q.get_thread_target(conn, id=thread_id)
    assert row is not None
    return _Target(
        thread_id=row.t_id,
        channel_id=row.c_id,
        space_id=row.s_id,
        operator_agent_id=row.t_operator_agent_id,
    )


def _event(
    target: _Target,
    type_: str,
    actor_id: uuid.UUID,
    actor_kind: str,
    resource_kind: str,
    resource_id: uuid.UUID,
    payload: dict[str, Any],
    *,
    version: int | None = None,
    audience_id: uuid.UUID | None = None,
) -> _Event:
    return _Event(
        type=type_,
        actor_id=actor_id,
        actor_kind=actor_kind,
        space_id=target.space_id,
        channel_id=target.channel_id,
        thread_id=target.thread_id,
        resource_kind=resource_kind,
        resource_id=resource_id,
        resource_version=version,
        audience_id=audience_id,
        payload=payload,
    )


class _Known:
    """The principals one transaction has read (the service's unit remembers them)."""

    def __init__(self) -> None:
        self.rows: dict[uuid.UUID, q.PrincipalRow] = {}

    async def one(self, conn: Conn, principal_id: uuid.UUID) -> q.PrincipalRow:
        """GetPrincipal, unless this transaction read it already."""
        if principal_id not in self.rows:
            row = await q.get_principal(conn, id=principal_id)
            assert row is not None
            self.rows[principal_id] = row
        return self.rows[principal_id]

    async def many(self, conn: Conn, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, q.PrincipalRow]:
        """GetPrincipals of those this transaction has not read yet."""
        missing = [i for i in dict.fromkeys(ids) if i not in self.rows]
        if missing:
            for row in await q.get_principals(conn, ids=missing):
                self.rows[row.id] = row
        return {i: self.rows[i] for i in ids}


async def _take_token(conn: Conn, principal_id: uuid.UUID, now: datetime) -> None:
    left = await q.take_bucket_token(
        conn,
        principal_id=principal_id,
        limit_class=RL_MESSAGE,
        burst=float(BENCH_BURST),
        now=now,
        per_minute=float(REFILL_PER_MINUTE),
        seconds_per_minute=SECONDS_PER_MINUTE,
        tolerance=TOLERANCE,
    )
    if left is None or left < 0:
        raise RuntimeError("raw: rate limited")


async def _write_checks(
    conn: Conn, thread_id: uuid.UUID, author_id: uuid.UUID, cid: str
) -> tuple[_Target, datetime]:
    """The first statements of every write: where, grants, idempotency, a rate token."""
    target = await _target(conn, thread_id)
    await q.list_grants_for_principal(conn, principal_id=author_id)
    await q.get_message_by_client_id(conn, author_id=author_id, client_msg_id=cid)
    now = datetime.now(UTC)
    await _take_token(conn, author_id, now)
    return target, now


async def _insert_text(
    conn: Conn,
    thread_id: uuid.UUID,
    seq: int,
    author: Principal,
    content: str,
    cid: str,
    now: datetime,
) -> tuple[uuid.UUID, dict[str, Any]]:
    """InsertMessage of a text message, and its document for message.created."""
    origin = "human" if author.kind is PrincipalKind.PERSON else "agent"
    message_id = uuid.uuid4()
    await _insert(
        conn,
        message_id=message_id,
        thread_id=thread_id,
        seq=seq,
        author_id=author.id,
        origin=origin,
        kind="text",
        content=content,
        cid=cid,
        run_id=None,
        now=now,
    )
    doc = {
        "id": str(message_id),
        "thread_id": str(thread_id),
        "thread_seq": seq,
        "author": {"id": str(author.id), "kind": author.kind.value, "handle": author.handle},
        "origin": origin,
        "kind": "text",
        "content": content,
        "mentions": [],
        "client_msg_id": cid,
        "created_at": now.isoformat(),
        "version": 1,
    }
    return message_id, doc


async def _set_trigger_state(
    conn: Conn,
    known: _Known,
    target: _Target,
    message_id: uuid.UUID,
    state: str,
    events: list[_Event],
) -> None:
    """The service's trigger-state change of one message."""
    await _set_trigger_states(conn, known, target, [message_id], state, events)


async def _set_trigger_states(
    conn: Conn,
    known: _Known,
    target: _Target,
    message_ids: Sequence[uuid.UUID],
    state: str,
    events: list[_Event],
) -> None:
    """The service's set-based trigger-state change: one update, one author read."""
    if not message_ids:
        return
    rows = await q.set_trigger_states(
        conn, trigger_state=state, trigger_state_reason=None, ids=list(message_ids)
    )
    if not rows:
        return
    authors = await known.many(conn, [r.author_id for r in rows])
    for row in sorted(rows, key=lambda r: (r.thread_seq, r.id)):
        author = authors[row.author_id]
        events.append(
            _event(
                target,
                "message.updated",
                author.id,
                author.kind,
                "message",
                row.id,
                {"message": _row_doc(row, author)},
                version=row.version,
            )
        )


async def _open_run(
    conn: Conn,
    known: _Known,
    target: _Target,
    message_id: uuid.UUID,
    author_id: uuid.UUID,
    agent_id: uuid.UUID,
    now: datetime,
    events: list[_Event],
) -> uuid.UUID:
    """The service's open_run: run, anchor, trigger state received, agent.invocation."""
    run_id = uuid.uuid4()
    await q.insert_run(
        conn,
        id=run_id,
        thread_id=target.thread_id,
        agent_id=agent_id,
        state="queued",
        state_reason=None,
        trigger_kind="message",
        triggering_message_id=message_id,
        triggered_by=author_id,
        version=1,
        cancel_requested=False,
        cancel_requested_at=None,
        invocation_jti=None,
        created_at=now,
        updated_at=now,
    )
    agent = await known.one(conn, agent_id)
    seq = await q.allocate_thread_seq(conn, id=target.thread_id)
    assert seq is not None
    anchor = uuid.uuid4()
    await _insert(
        conn,
        message_id=anchor,
        thread_id=target.thread_id,
        seq=seq,
        author_id=agent_id,
        origin="system",
        kind="run",
        content="",
        cid=None,
        run_id=run_id,
        now=now,
    )
    events.append(
        _event(
            target,
            "message.created",
            agent.id,
            agent.kind,
            "message",
            anchor,
            {
                "message": _message_doc(
                    anchor,
                    target.thread_id,
                    seq,
                    agent,
                    "system",
                    "run",
                    "",
                    now,
                    run_id=str(run_id),
                )
            },
            version=1,
        )
    )
    await _set_trigger_state(conn, known, target, message_id, "received", events)
    events.append(
        _event(
            target,
            "agent.invocation",
            author_id,
            "person",
            "run",
            run_id,
            {
                "run_id": str(run_id),
                "thread_id": str(target.thread_id),
                "message_id": str(message_id),
            },
            audience_id=agent_id,
        )
    )
    return run_id


async def human_message(
    world: BenchWorld, worker: Worker, thread_id: uuid.UUID, cid: str, content: str
) -> uuid.UUID:
    """CreateMessage by a person: plain, opening a run, or accepted as a follow-up.

    Args:
        world: the world.
        worker: whose person writes.
        thread_id: the thread.
        cid: the client message id.
        content: the text.

    Returns:
        The message id.
    """
    person = worker.person.principal
    author_id = person.id
    async with world.pool.connection() as conn:
        known = _Known()
        target, now = await _write_checks(conn, thread_id, author_id, cid)
        seq = await q.allocate_thread_seq(conn, id=thread_id)
        assert seq is not None
        message_id, doc = await _insert_text(conn, thread_id, seq, person, content, cid, now)
        events = [
            _event(
                target,
                "message.created",
                author_id,
                "person",
                "message",
                message_id,
                {"message": doc},
                version=1,
            )
        ]
        # Without an operator or a mention nothing can trigger: no run lookup at all.
        operator = target.operator_agent_id
        if operator is not None:
            active = await q.lock_active_run_in_thread(conn, thread_id=thread_id)
            await known.one(conn, operator)
            # The author comes with the message (MessagePosted): only its grants are read.
            await q.list_grants_for_principal(conn, principal_id=author_id)
            if active is None:
                await _open_run(conn, known, target, message_id, author_id, operator, now, events)
            else:
                # The floor models no capability report: the stored mode costs nothing.
                await q.insert_followup(
                    conn, run_id=active.id, message_id=message_id, mode="none", at=now
                )
                await q.update_run(
                    conn,
                    state=active.state,
                    state_reason=None,
                    version=active.version + 1,
                    cancel_requested=False,
                    cancel_requested_at=None,
                    invocation_jti=active.invocation_jti,
                    updated_at=now,
                    id=active.id,
                )
                events.append(
                    _event(
                        target,
                        "run.state_changed",
                        author_id,
                        "person",
                        "run",
                        active.id,
                        {
                            "run_id": str(active.id),
                            "state": active.state,
                            "version": active.version + 1,
                        },
                        version=active.version + 1,
                    )
                )
                await _set_trigger_state(conn, known, target, message_id, "received", events)
                await known.one(conn, active.agent_id)
        await _append(conn, events, now)
        await conn.commit()
    return message_id


async def agent_answer(
    world: BenchWorld,
    worker: Worker,
    thread_id: uuid.UUID,
    run_id: uuid.UUID,
    cid: str,
    content: str,
) -> uuid.UUID:
    """CreateMessage by an agent naming its active run.

    Args:
        world: the world.
        worker: whose agent writes.
        thread_id: the run's thread.
        run_id: the run.
        cid: the client message id.
        content: the text.

    Returns:
        The message id.
    """
    agent = worker.agent.principal
    async with world.pool.connection() as conn:
        target, now = await _write_checks(conn, thread_id, agent.id, cid)
        seq = await q.allocate_thread_seq(conn, id=thread_id)
        assert seq is not None
        message_id, doc = await _insert_text(conn, thread_id, seq, agent, content, cid, now)
        run = await q.lock_run_for_answer(conn, id=run_id)
        if (
            run is None
            or run.agent_id != agent.id
            or run.state not in ("queued", "running", "waiting_input")
        ):
            raise RuntimeError("raw answer: the run is not the agent's active run")
        await _append(
            conn,
            [
                _event(
                    target,
                    "message.created",
                    agent.id,
                    "agent",
                    "message",
                    message_id,
                    {"message": doc},
                    version=1,
                )
            ],
            now,
        )
        await conn.commit()
    return message_id


async def finish_run(
    world: BenchWorld, worker: Worker, run_id: uuid.UUID, *, steer: bool = False
) -> uuid.UUID | None:
    """The agent finishes its running run completed: end, trigger done, settlement.

    Settlement as the service does it: lock the open follow-ups, read their authors and
    the authors' grants (the follow-on choice), defer the first, open the follow-on run
    for it, move the rest, and in steer mode append their agent.followup events.

    Args:
        world: the world.
        worker: whose agent finishes.
        run_id: the run (running).
        steer: the agent reported steer (the moved follow-ups get events).

    Returns:
        The follow-on run, if any.
    """
    agent = worker.agent.principal
    async with world.pool.connection() as conn:
        known = _Known()
        run = await q.lock_run(conn, id=run_id)
        if run is None or run.agent_id != agent.id or run.state != "running":
            raise RuntimeError("raw finish: not the agent's running run")
        now = datetime.now(UTC)
        target = await _target(conn, run.thread_id)
        await q.update_run(
            conn,
            state="completed",
            state_reason=None,
            version=run.version + 1,
            cancel_requested=False,
            cancel_requested_at=None,
            invocation_jti=run.invocation_jti,
            updated_at=now,
            id=run.id,
        )
        events = [
            _event(
                target,
                "run.state_changed",
                agent.id,
                "agent",
                "run",
                run.id,
                {"run_id": str(run.id), "state": "completed", "version": run.version + 1},
                version=run.version + 1,
            )
        ]
        trigger = await q.get_message(conn, id=run.triggering_message_id)
        if trigger is not None and trigger.deleted_at is None:
            await _set_trigger_state(conn, known, target, trigger.id, "done", events)
        follow_on: uuid.UUID | None = None
        open_rows = await q.lock_open_followups(conn, run_id=run.id)
        if open_rows:
            candidates = sorted(
                (r for r in open_rows if r.deleted_at is None), key=lambda r: r.thread_seq
            )
            await known.one(conn, run.agent_id)
            first, rest = candidates[0], candidates[1:]
            authors = list(dict.fromkeys(r.author_id for r in candidates))
            await known.many(conn, authors)
            for author_id in authors:
                await q.list_grants_for_principal(conn, principal_id=author_id)
            await q.set_followup_states(
                conn, state="deferred", at=now, run_id=run.id, message_ids=[first.message_id]
            )
            follow_on = await _open_run(
                conn, known, target, first.message_id, first.author_id, run.agent_id, now, events
            )
            if rest:
                await q.move_followups(
                    conn,
                    new_run_id=follow_on,
                    at=now,
                    run_id=run.id,
                    message_ids=[r.message_id for r in rest],
                )
            await _set_trigger_states(
                conn, known, target, [r.message_id for r in rest], "received", events
            )
            if steer:
                events.extend(
                    _event(
                        target,
                        "agent.followup",
                        r.author_id,
                        "person",
                        "run",
                        follow_on,
                        {
                            "run_id": str(follow_on),
                            "thread_id": str(target.thread_id),
                            "message_id": str(r.message_id),
                        },
                        audience_id=run.agent_id,
                    )
                    for r in rest
                )
        await q.list_followups(conn, run_id=run.id)
        await _append(conn, events, now)
        await conn.commit()
    return follow_on


async def gated_send(
    world: BenchWorld, worker: Worker, thread_id: uuid.UUID, seen: int, cid: str, content: str
) -> tuple[str, int]:
    """An agent send through the freshness gate (a thread without restricted messages).

    Args:
        world: the world.
        worker: whose agent sends.
        thread_id: the thread.
        seen: the frontier the agent saw.
        cid: the client message id.
        content: the text.

    Returns:
        ``("sent", accepted seq)`` or ``("held", latest seq)``.
    """
    agent = worker.agent.principal
    async with world.pool.connection() as conn:
        target, now = await _write_checks(conn, thread_id, agent.id, cid)
        seq = await q.cas_thread_seq(conn, id=thread_id, seen_seq=seen)
        if seq is None:
            await q.get_message_by_client_id(conn, author_id=agent.id, client_msg_id=cid)
            frontier = await q.read_thread_frontier(conn, id=thread_id)
            assert frontier is not None
            await conn.commit()
            return "held", frontier.latest_seq
        message_id, doc = await _insert_text(conn, thread_id, seq, agent, content, cid, now)
        await _append(
            conn,
            [
                _event(
                    target,
                    "message.created",
                    agent.id,
                    "agent",
                    "message",
                    message_id,
                    {"message": doc},
                    version=1,
                )
            ],
            now,
        )
        await conn.commit()
    return "sent", seq


async def poll(world: BenchWorld, worker: Worker, after: int) -> tuple[int, int]:
    """One poll of the agent feed (limit 1) delivering agent.invocation with a token.

    Args:
        world: the world.
        worker: whose agent polls.
        after: the cursor.

    Returns:
        The next cursor and the number of deliveries.
    """
    agent = worker.agent.principal
    delivered = 0
    async with world.pool.connection() as conn:
        known = _Known()
        cursor = await q.lock_agent_cursor(conn, agent_id=agent.id)
        assert cursor is not None
        rows = await q.read_audience_events(
            conn, audience_id=agent.id, after_seq=after, max_events=1
        )
        events: list[_Event] = []
        now = datetime.now(UTC)
        for row in rows:
            if row.type != "agent.invocation":
                continue
            run = await q.lock_run(conn, id=row.resource_id)
            if run is None or run.state != "queued":
                continue
            author = await known.one(conn, run.triggered_by)
            message = await q.get_message(conn, id=run.triggering_message_id)
            await known.one(conn, run.agent_id)
            assert message is not None
            target = await _target(conn, run.thread_id)
            await q.list_grants_for_principal(conn, principal_id=author.id)
            jwt.encode(
                {
                    "run_id": str(run.id),
                    "message_id": str(message.id),
                    "trigger_kind": "message",
                    "sub": str(author.id),
                    "jti": str(uuid.uuid4()),
                    "exp": int(time.time() + TOKEN_TTL.total_seconds()),
                },
                world.key,
                algorithm="HS256",
            )
            delivered += 1
            if message.trigger_state == "received":
                await _set_trigger_state(conn, known, target, message.id, "queued", events)
        following = rows[-1].seq if rows else after
        if rows:
            await q.save_agent_cursor(
                conn,
                acked_seq=cursor.acked_seq,
                delivered_seq=max(cursor.delivered_seq, following),
                agent_id=agent.id,
            )
        if events:
            await _append(conn, events, now)
        await conn.commit()
    return following, delivered


async def history(world: BenchWorld, worker: Worker, thread_id: uuid.UUID, limit: int) -> int:
    """listMessages: a thread's first page as the person sees it (autocommit reads).

    Args:
        world: the world.
        worker: whose person reads.
        thread_id: the thread.
        limit: the page size.

    Returns:
        The messages read.
    """
    reader = worker.person.principal.id
    async with world.pool.connection() as conn:
        await conn.set_autocommit(True)
        try:
            await _target(conn, thread_id)
            await q.list_grants_for_principal(conn, principal_id=reader)
            rows = await q.list_visible_messages(
                conn, thread_id=thread_id, after_seq=0, reader_id=reader, max_rows=limit
            )
            await q.get_principals(conn, ids=list({r.author_id for r in rows}))
        finally:
            await conn.set_autocommit(False)
    return len(rows)


__all__ = ["agent_answer", "finish_run", "gated_send", "history", "human_message", "poll"]
