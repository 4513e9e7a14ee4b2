"""The raw psycopg loops: each operation's statements, in its transaction, nothing else.

Each function runs, on one pooled connection, the statements the service runs for the
same operation (as traced, see ``docs/performance.md``) through the generated functions of
`turnkeeper.adapters.postgres.queries`, in the same round trips. A write runs as the
service's write unit does (ADR 0022, ADR 0030): on an autocommit connection in libpq's
pipeline mode through a `PipelineLink`, its own BEGIN queued before the first
statement; what the unit queues without waiting is queued here too (the ``start_``
functions, and the ``:exec`` statements that ``PIPELINED`` in scripts/gen_queries.py
lets wait); COMMIT is queued after the events, so that leaving the pipeline is the last
wait. Between statements there is only what the statements need: ids, a digest, the
JSON of event payloads, a token signature. No authorization rules, no domain objects,
no bus, no unit of work, no retries.

When the service changes its statements, these loops do not follow by themselves: the
suite compares the traced statement lists of both sides and warns when they differ, and
tests/integration/test_bench_smoke.py fails on such a warning and compares the round
trips and statements of both sides on the wire.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import attrs
import jwt
from psycopg.pq import TransactionStatus

from bench.world import BENCH_BURST, BenchWorld, Worker
from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.postgres.base import uuid_array_text
from turnkeeper.adapters.postgres.executor import PipelineLink
from turnkeeper.adapters.postgres.uow import BEGIN, COMMIT, Conn
from turnkeeper.adapters.system import UuidV7Generator
from turnkeeper.application.settings import Settings
from turnkeeper.domain.ratelimit import SECONDS_PER_MINUTE, TOLERANCE
from turnkeeper.domain.world import Principal, PrincipalKind

#: The ids of the rows the raw loops insert: UUIDv7, as the services' `IdGenerator`
#: (time-ordered keys index as the services' do).
_ids = UuidV7Generator()

#: The rate-limit class of messages (as `turnkeeper.domain.ratelimit.RL_MESSAGE`).
RL_MESSAGE = "rl.message"
#: The refill rate of the bench world (the default of ``ratelimit.rl.message.per_minute``).
REFILL_PER_MINUTE = Settings().rl_message_per_minute
#: Lifetime of a signed invocation token (as the default ``agent.invocation_token_ttl``).
TOKEN_TTL = timedelta(seconds=900)
#: The number of a transaction's first event (events are numbered 1, 2, ... per transaction).
FIRST_EVENT = 1
#: The text of an empty ``uuid[]`` (a message without mentions).
NO_IDS = "{}"


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
    restricted_to: str | None = None


def _json(payload: dict[str, Any]) -> str:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@contextlib.asynccontextmanager
async def _on_link(world: BenchWorld, *, begin: bool) -> AsyncIterator[Conn]:
    """A pooled connection on its own `PipelineLink`, in autocommit.

    With `begin`, a write unit's mode: BEGIN is queued so that it leaves with the first
    statement; the body queues COMMIT last (`_commit`) and leaving the pipeline sends the
    one Sync for whatever is still queued. Without it, a read-only unit's mode: each
    wait's Sync ends an implicit transaction (ADR 0030). The connection goes back in the
    pool's mode (explicit transactions), rolled back first when the body failed.
    """
    async with world.pool.connection() as conn:
        await conn.set_autocommit(True)
        link = PipelineLink(conn)
        link.enter()
        try:
            if begin:
                await link.execute(BEGIN, prepare=False)
            try:
                yield cast(Conn, link)
            except BaseException:
                await link.abandon()
                raise
            await link.leave()
        finally:
            if conn.info.transaction_status != TransactionStatus.IDLE:
                await link.rollback()
            if not conn.closed:
                await conn.set_autocommit(False)


def _transaction(world: BenchWorld) -> contextlib.AbstractAsyncContextManager[Conn]:
    """A pooled connection in a write unit's mode, its BEGIN queued (`_on_link`)."""
    return _on_link(world, begin=True)


async def _commit(conn: Conn, events: Sequence[_Event], first: int, now: datetime) -> None:
    """Queue the transaction's buffered events and COMMIT (sent when the pipeline is left).

    One event goes as ``AppendEvent``, two or more as ``AppendEvents`` (as the unit's
    event log writes them). Their seqs are not read: nothing here needs them.

    Args:
        conn: the transaction's connection.
        events: the events not written yet, in append order.
        first: the number of the first of them in the transaction.
        now: their time.
    """
    if len(events) == 1:
        event = events[0]
        await q.start_append_event(
            conn,
            ord=first,
            type=event.type,
            actor_id=event.actor_id,
            actor_kind=event.actor_kind,
            space_id=event.space_id,
            channel_id=event.channel_id,
            thread_id=event.thread_id,
            resource_kind=event.resource_kind,
            resource_id=event.resource_id,
            resource_version=event.resource_version,
            audience_id=event.audience_id,
            restricted_to=event.restricted_to,
            payload=_json(event.payload),
            created_at=now,
        )
    elif events:
        await q.start_append_events(
            conn,
            offsets=list(range(first, first + len(events))),
            types=[e.type for e in events],
            actor_ids=[e.actor_id for e in events],
            actor_kinds=[e.actor_kind for e in events],
            space_ids=[e.space_id for e in events],
            channel_ids=[e.channel_id for e in events],
            thread_ids=[e.thread_id for e in events],
            resource_kinds=[e.resource_kind for e in events],
            resource_ids=[e.resource_id for e in events],
            resource_versions=[e.resource_version for e in events],
            audience_ids=[e.audience_id for e in events],
            restricted_tos=[e.restricted_to for e in events],
            payloads=[_json(e.payload) for e in events],
            created_ats=[now for _ in events],
        )
    await conn.execute(COMMIT, prepare=False)


@attrs.frozen
class _Author:
    """Who a message document names: ``{id, kind, handle}``."""

    id: uuid.UUID
    kind: str
    handle: str


def _author_of(principal: Principal) -> _Author:
    return _Author(id=principal.id, kind=principal.kind.value, handle=principal.handle)


def _message_doc(
    row_id: uuid.UUID,
    thread_id: uuid.UUID,
    seq: int,
    author: _Author,
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


def _row_doc(row: q.MessageRow, author: _Author) -> dict[str, Any]:
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


def _digest(thread_id: uuid.UUID, content: str) -> str:
    return hashlib.sha256(f"v1\n{thread_id}\n{content}".encode()).hexdigest()


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


@attrs.frozen
class _Post:
    """What a post's ``GetPostFacts`` gave: where it goes, the thread's locked frontier."""

    target: _Target
    latest_seq: int
    has_restricted: bool


async def _post_facts(
    conn: Conn, thread_id: uuid.UUID, author_id: uuid.UUID, cid: str, now: datetime
) -> _Post:
    """``GetPostFacts`` (queued with BEGIN, one wait): thread lock, grants, earlier id, a token.

    The grants are not decoded (no authorization rules here); a stored client id, an
    empty bucket or an unknown thread end the loop.
    """
    pending = await q.start_get_post_facts(
        conn,
        client_msg_id=cid,
        token_hash=None,
        author_id=author_id,
        id=thread_id,
        limit_class=RL_MESSAGE,
        burst=float(BENCH_BURST),
        now=now,
        per_minute=float(REFILL_PER_MINUTE),
        seconds_per_minute=SECONDS_PER_MINUTE,
        tolerance=TOLERANCE,
    )
    row = await pending.result()
    if row is None or row.t_id is None or row.c_id is None or row.s_id is None:
        raise RuntimeError("raw: unknown thread")
    if row.t_latest_seq is None or row.earlier_id is not None:
        raise RuntimeError("raw: the client id is stored already")
    if row.bucket_tokens is None or row.bucket_tokens < 0:
        raise RuntimeError("raw: rate limited")
    return _Post(
        target=_Target(
            thread_id=row.t_id,
            channel_id=row.c_id,
            space_id=row.s_id,
            operator_agent_id=row.t_operator_agent_id,
        ),
        latest_seq=row.t_latest_seq,
        has_restricted=bool(row.t_has_restricted),
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
    restricted_to: str | None = None,
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
        restricted_to=restricted_to,
    )


class _Known:
    """The principals one transaction has read (the service's unit remembers them)."""

    def __init__(self, *authors: _Author) -> None:
        self.rows: dict[uuid.UUID, _Author] = {a.id: a for a in authors}

    def remember(self, rows: Sequence[q.PrincipalRow]) -> None:
        """Note principals read by a statement of the transaction."""
        for row in rows:
            self.rows[row.id] = _Author(id=row.id, kind=row.kind, handle=row.handle)

    async def one(self, conn: Conn, principal_id: uuid.UUID) -> _Author:
        """GetPrincipal, unless this transaction read it already."""
        if principal_id not in self.rows:
            row = await q.get_principal(conn, id=principal_id)
            assert row is not None
            self.remember([row])
        return self.rows[principal_id]

    async def many(self, conn: Conn, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, _Author]:
        """GetPrincipals of those this transaction has not read yet."""
        missing = [i for i in dict.fromkeys(ids) if i not in self.rows]
        if missing:
            self.remember(await q.get_principals(conn, ids=missing))
        return {i: self.rows[i] for i in ids}


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
    """``InsertMessage`` (queued): a message whose event waits behind earlier ones."""
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
        digest=None if cid is None else _digest(thread_id, content),
        trigger_state=None,
        trigger_state_reason=None,
        run_id=run_id,
        created_at=now,
        deleted_at=None,
        version=1,
    )


async def _insert_with_event(
    conn: Conn,
    *,
    message_id: uuid.UUID,
    target: _Target,
    seq: int,
    author: _Author,
    origin: str,
    kind: str,
    content: str,
    cid: str | None,
    run_id: uuid.UUID | None,
    ord: int,
    doc: dict[str, Any],
    now: datetime,
) -> None:
    """``InsertMessageWithEvent`` (queued): the message, its thread's latest_seq, its event."""
    await q.insert_message_with_event(
        conn,
        id=message_id,
        thread_id=target.thread_id,
        thread_seq=seq,
        author_id=author.id,
        origin=origin,
        kind=kind,
        content=content,
        mentions=NO_IDS,
        reply_to_id=None,
        restricted_to=None,
        client_msg_id=cid,
        digest=None if cid is None else _digest(target.thread_id, content),
        trigger_state=None,
        trigger_state_reason=None,
        run_id=run_id,
        created_at=now,
        deleted_at=None,
        version=1,
        ord=ord,
        event_type="message.created",
        actor_id=author.id,
        actor_kind=author.kind,
        space_id=target.space_id,
        channel_id=target.channel_id,
        event_thread_id=target.thread_id,
        resource_kind="message",
        resource_id=message_id,
        resource_version=1,
        audience_id=None,
        event_restricted_to=None,
        payload=_json({"message": doc}),
        event_created_at=now,
    )


async def _insert_text(
    conn: Conn, post: _Post, seq: int, author: _Author, content: str, cid: str, now: datetime
) -> uuid.UUID:
    """A text message at the seq after the locked latest_seq, with its message.created."""
    origin = "human" if author.kind == PrincipalKind.PERSON.value else "agent"
    message_id = _ids.new_id()
    doc = _message_doc(
        message_id,
        post.target.thread_id,
        seq,
        author,
        origin,
        "text",
        content,
        now,
        client_msg_id=cid,
    )
    await _insert_with_event(
        conn,
        message_id=message_id,
        target=post.target,
        seq=seq,
        author=author,
        origin=origin,
        kind="text",
        content=content,
        cid=cid,
        run_id=None,
        ord=FIRST_EVENT,
        doc=doc,
        now=now,
    )
    return message_id


async def _set_trigger_states(
    conn: Conn,
    known: _Known,
    target: _Target,
    message_ids: Sequence[uuid.UUID],
    state: str,
    events: list[_Event],
) -> None:
    """The service's set-based trigger-state change: one update, the unknown authors read."""
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


@attrs.frozen
class _Anchor:
    """Where a run's anchor goes: after a thread's locked latest_seq, or allocated.

    Attributes:
        locked_seq: the seq before the anchor's on a thread a post's facts locked (the
            anchor then writes it and its event in one ``InsertMessageWithEvent``);
            None to lock the thread here (``LockThreadState``, which the service's reopen
            check runs, gives the latest_seq: ``InsertMessage`` with the event buffered
            behind the transaction's earlier ones, and the seq written before COMMIT).
        ord: the number of the anchor's event in the transaction (with `locked_seq`).
        unwritten: where an anchor that locked the thread here notes (thread, seq) for
            ``SetThreadLatestSeq`` before COMMIT.
    """

    locked_seq: int | None = None
    ord: int = FIRST_EVENT
    unwritten: list[tuple[uuid.UUID, int]] = attrs.field(factory=list)


async def _open_run(
    conn: Conn,
    known: _Known,
    target: _Target,
    message_id: uuid.UUID,
    author_id: uuid.UUID,
    agent_id: uuid.UUID,
    now: datetime,
    events: list[_Event],
    anchor_at: _Anchor,
) -> uuid.UUID:
    """The service's open_run: run, anchor, trigger state received, agent.invocation."""
    run_id = _ids.new_id()
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
    anchor = _ids.new_id()
    if anchor_at.locked_seq is None:
        locked = await q.lock_thread_state(conn, id=target.thread_id)
        assert locked is not None
        seq = locked.latest_seq + 1
        anchor_at.unwritten.append((target.thread_id, seq))
    else:
        seq = anchor_at.locked_seq + 1
    doc = _message_doc(
        anchor, target.thread_id, seq, agent, "system", "run", "", now, run_id=str(run_id)
    )
    if anchor_at.locked_seq is None:
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
                {"message": doc},
                version=1,
            )
        )
    else:
        await _insert_with_event(
            conn,
            message_id=anchor,
            target=target,
            seq=seq,
            author=agent,
            origin="system",
            kind="run",
            content="",
            cid=None,
            run_id=run_id,
            ord=anchor_at.ord,
            doc=doc,
            now=now,
        )
    await _set_trigger_states(conn, known, target, [message_id], "received", events)
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
    person = _author_of(worker.person.principal)
    async with _transaction(world) as conn:
        now = datetime.now(UTC)
        post = await _post_facts(conn, thread_id, person.id, cid, now)
        target = post.target
        seq = post.latest_seq + 1
        message_id = await _insert_text(conn, post, seq, person, content, cid, now)
        events: list[_Event] = []
        # The message's event went with its insert (and a run's anchor's with the anchor).
        numbered = FIRST_EVENT
        # Without an operator or a mention nothing can trigger: no run lookup at all.
        operator = target.operator_agent_id
        if operator is not None:
            # The operator is read in the round trip of the active run's lock.
            agents = await q.start_get_principals(conn, ids=[operator])
            active = await q.lock_active_run_in_thread(conn, thread_id=thread_id)
            # The poster is the author of the changed message: it is not read again.
            known = _Known(person)
            known.remember(await agents.result())
            if active is None:
                numbered += 1
                anchor_at = _Anchor(locked_seq=seq, ord=numbered)
                await _open_run(
                    conn, known, target, message_id, person.id, operator, now, events, anchor_at
                )
            else:
                # The agent reported no capability: the follow-up's mode is none.
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
                        person.id,
                        person.kind,
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
                await _set_trigger_states(conn, known, target, [message_id], "received", events)
        await _commit(conn, events, numbered + 1, now)
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
    agent = _author_of(worker.agent.principal)
    async with _transaction(world) as conn:
        now = datetime.now(UTC)
        post = await _post_facts(conn, thread_id, agent.id, cid, now)
        message_id = await _insert_text(conn, post, post.latest_seq + 1, agent, content, cid, now)
        run = await q.lock_run_for_answer(conn, id=run_id)
        if (
            run is None
            or run.agent_id != agent.id
            or run.state not in ("queued", "running", "waiting_input")
        ):
            raise RuntimeError("raw answer: the run is not the agent's active run")
        await _commit(conn, [], FIRST_EVENT + 1, now)
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
    async with _transaction(world) as conn:
        known = _Known()
        run = await q.lock_run(conn, id=run_id)
        if run is None or run.agent_id != agent.id or run.state != "running":
            raise RuntimeError("raw finish: not the agent's running run")
        now = datetime.now(UTC)
        # The triggering message, its author and the agent arrive with the thread.
        people = await q.start_get_principals(conn, ids=[run.triggered_by, run.agent_id])
        triggering = await q.start_get_message(conn, id=run.triggering_message_id)
        target = await _target(conn, run.thread_id)
        known.remember(await people.result())
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
        trigger = await triggering.result()
        if trigger is not None and trigger.deleted_at is None:
            await _set_trigger_states(conn, known, target, [trigger.id], "done", events)
        follow_on: uuid.UUID | None = None
        anchor_at = _Anchor()
        open_rows = await q.lock_open_followups(conn, run_id=run.id)
        if open_rows:
            candidates = sorted(
                (r for r in open_rows if r.deleted_at is None), key=lambda r: r.thread_seq
            )
            await known.one(conn, run.agent_id)
            first, rest = candidates[0], candidates[1:]
            authors = list(dict.fromkeys(r.author_id for r in candidates))
            await known.many(conn, authors)
            # The authors' grants and the agent's (whether it still answers in the thread).
            await q.list_grants_for_principals(conn, principal_ids=[*authors, run.agent_id])
            await q.set_followup_states(
                conn, state="deferred", at=now, run_id=run.id, message_ids=[first.message_id]
            )
            # Events wait to be numbered: the anchor takes LockThreadState and InsertMessage.
            follow_on = await _open_run(
                conn,
                known,
                target,
                first.message_id,
                first.author_id,
                run.agent_id,
                now,
                events,
                anchor_at,
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
        # The run's view, read with the COMMIT (as `Transactor.run_then` reads it).
        view = await q.start_list_followups(conn, run_id=run.id)
        for thread_id, seq in anchor_at.unwritten:
            await q.set_thread_latest_seq(conn, id=thread_id, latest_seq=seq)
        await _commit(conn, events, FIRST_EVENT, now)
        await view.result()
    return follow_on


async def gated_send(
    world: BenchWorld, worker: Worker, thread_id: uuid.UUID, seen: int, cid: str, content: str
) -> tuple[str, int]:
    """An agent send through the freshness gate (a thread without restricted messages).

    The compare-and-set is decided on the latest_seq the post's facts read under the
    thread row lock, as the service decides it: no statement of its own. A held send
    looks the client id up again with the owner's read queued beside it, takes the
    frontier the facts read under the lock, and writes the owner's message.held.

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
    agent = _author_of(worker.agent.principal)
    async with _transaction(world) as conn:
        now = datetime.now(UTC)
        post = await _post_facts(conn, thread_id, agent.id, cid, now)
        if post.latest_seq != seen:
            # The owner is queued with the replay lookup; the frontier is the one the
            # facts read under the thread row lock.
            pending_owner = await q.start_get_owner(conn)
            await q.get_message_by_client_id(conn, author_id=agent.id, client_msg_id=cid)
            if post.latest_seq <= seen or post.has_restricted:
                raise RuntimeError("raw send: not a plain held send")
            owner = await pending_owner.result()
            assert owner is not None
            held = _event(
                post.target,
                "message.held",
                agent.id,
                agent.kind,
                "thread",
                thread_id,
                {
                    "thread_id": str(thread_id),
                    "author": {"id": str(agent.id), "kind": agent.kind, "handle": agent.handle},
                    "seen_up_to_seq": seen,
                    "latest_seq": post.latest_seq,
                    "client_message_id": cid,
                },
                restricted_to=uuid_array_text([owner.id]),
            )
            await _commit(conn, [held], FIRST_EVENT, now)
            return "held", post.latest_seq
        seq = seen + 1
        await _insert_text(conn, post, seq, agent, content, cid, now)
        await _commit(conn, [], FIRST_EVENT + 1, now)
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
    async with _transaction(world) as conn:
        known = _Known()
        # The cursor's lock and the first page in one round trip, as the service's.
        locked = await q.start_lock_agent_cursor(conn, agent_id=agent.id)
        page = await q.start_read_audience_events(
            conn, audience_id=agent.id, token_hash=None, after_seq=after, max_events=1
        )
        cursor = await locked.result()
        assert cursor is not None
        rows = await page.result()
        events: list[_Event] = []
        now = datetime.now(UTC)
        for row in rows:
            if row.type != "agent.invocation":
                continue
            run = await q.lock_active_run(conn, id=row.resource_id)
            if run is None or run.state != "queued":
                continue
            # The message, the author, the agent and the author's grants arrive with the
            # thread.
            missing = [i for i in (run.triggered_by, run.agent_id) if i not in known.rows]
            people = await q.start_get_principals(conn, ids=missing) if missing else None
            grants = await q.start_list_grants_for_principal(conn, principal_id=run.triggered_by)
            triggering = await q.start_get_message(conn, id=run.triggering_message_id)
            target = await _target(conn, run.thread_id)
            message = await triggering.result()
            if people is not None:
                known.remember(await people.result())
            await grants.result()
            author = known.rows[run.triggered_by]
            assert message is not None
            jwt.encode(
                {
                    "run_id": str(run.id),
                    "message_id": str(message.id),
                    "trigger_kind": "message",
                    "sub": str(author.id),
                    "jti": str(_ids.new_id()),
                    "exp": int(time.time() + TOKEN_TTL.total_seconds()),
                },
                world.key,
                algorithm="HS256",
            )
            delivered += 1
            if message.trigger_state == "received":
                await _set_trigger_states(conn, known, target, [message.id], "queued", events)
        following = rows[-1].seq if rows else after
        if rows:
            await q.save_agent_cursor(
                conn,
                acked_seq=cursor.acked_seq,
                delivered_seq=max(cursor.delivered_seq, following),
                agent_id=agent.id,
            )
        await _commit(conn, events, FIRST_EVENT, now)
    return following, delivered


async def history(world: BenchWorld, worker: Worker, thread_id: uuid.UUID, limit: int) -> int:
    """listMessages: a thread's first page as the person sees it (a read-only unit's mode).

    Args:
        world: the world.
        worker: whose person reads.
        thread_id: the thread.
        limit: the page size.

    Returns:
        The messages read.
    """
    reader = worker.person.principal.id
    async with _on_link(world, begin=False) as conn:
        # The thread, the grants and the page in one round trip, as `history_facts`.
        target = await q.start_get_thread_target(conn, id=thread_id)
        grants = await q.start_list_grants_for_principal(conn, principal_id=reader)
        page = await q.start_list_visible_messages(
            conn, thread_id=thread_id, after_seq=0, reader_id=reader, max_rows=limit
        )
        assert await target.result() is not None
        await grants.result()
        rows = await page.result()
        await q.get_principals(conn, ids=list({r.author_id for r in rows}))
    return len(rows)


__all__ = ["agent_answer", "finish_run", "gated_send", "history", "human_message", "poll"]
