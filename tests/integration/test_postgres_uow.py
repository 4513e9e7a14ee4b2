"""The PostgreSQL unit of work: rollback by default, commit, error translation, mapping."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import attrs
import pytest
from psycopg import errors as pg_errors
from psycopg_pool import AsyncConnectionPool

from tests.support.locks import backend_pid, wait_until_blocked
from turnkeeper.adapters.postgres.uow import (
    Conn,
    PostgresUnitOfWork,
    PostgresUnitOfWorkFactory,
    UnitClosed,
)
from turnkeeper.application.errors import DuplicateKey, RetriableConflict
from turnkeeper.application.ports import (
    BucketTake,
    DenialRecord,
    PostFacts,
    ReaderScope,
    ResolvedToken,
    TokenPostFacts,
    UnitOfWorkFactory,
)
from turnkeeper.domain.authorization import Action
from turnkeeper.domain.credentials import ApiToken, TokenOrigin
from turnkeeper.domain.events import EventType, NewEvent
from turnkeeper.domain.messaging import Message, MessageKind, Origin, TriggerState
from turnkeeper.domain.world import (
    BillingMode,
    Channel,
    ChannelBehavior,
    ChannelType,
    Grant,
    Level,
    OperatorMode,
    Principal,
    PrincipalKind,
    ResourceKind,
    Space,
    Thread,
    ThreadState,
)

AT = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
#: Repetitions of the lock-order race (a lock test is repeated, not run once).
LOCK_ORDER_ROUNDS = 5
#: A take that finds the bucket locked fails after this (instead of hanging the test).
LOCK_TIMEOUT = "10s"
#: A token of the seeded person (its principal id is set once the person exists).
TOKEN = ApiToken(
    id=uuid.UUID("01950000-0000-7000-8000-00000000a001"),
    principal_id=uuid.UUID(int=0),
    origin=TokenOrigin.ISSUED,
    created_at=AT,
    label="ci",
)


@attrs.frozen(kw_only=True)
class Seed:
    """A minimal world stored through the repositories."""

    person: Principal
    agent: Principal
    space: Space
    channel: Channel
    thread: Thread
    other_thread: Thread


def _person(handle: str) -> Principal:
    return Principal(id=uuid.uuid4(), kind=PrincipalKind.PERSON, handle=handle, created_at=AT)


async def seed(factory: UnitOfWorkFactory) -> Seed:
    person = attrs.evolve(_person("robin"), is_owner=True, display_name="Robin")
    agent = Principal(
        id=uuid.uuid4(),
        kind=PrincipalKind.AGENT,
        handle="assistent",
        billing_mode=BillingMode.PERSONAL,
        holder_id=person.id,
        supports_followups=False,
        reported_followups="steer",
        created_at=AT,
    )
    space = Space(
        id=uuid.uuid4(),
        name="Research",
        default_operator_id=agent.id,
        created_by=person.id,
        created_at=AT,
    )
    main_id = uuid.uuid4()
    channel = Channel(
        id=uuid.uuid4(),
        space_id=space.id,
        name="Notizen",
        type=ChannelType.TEXT,
        behavior=ChannelBehavior(free_response=True),
        main_thread_id=main_id,
        created_at=AT,
    )
    thread = Thread(
        id=main_id, channel_id=channel.id, is_main=True, created_by=person.id, created_at=AT
    )
    other = Thread(
        id=uuid.uuid4(),
        channel_id=channel.id,
        title="Report",
        operator_agent_id=agent.id,
        created_by=agent.id,
        created_at=AT,
    )
    async with factory() as uow:
        await uow.principals.add(person)
        await uow.principals.add(agent)
        await uow.spaces.add(space)
        # The channel names its main thread before the thread exists: the key is deferred.
        await uow.channels.add(channel)
        await uow.threads.add(thread)
        await uow.threads.add(other)
        await uow.commit()
    return Seed(
        person=person, agent=agent, space=space, channel=channel, thread=thread, other_thread=other
    )


def _agent_grant(s: Seed, kind: ResourceKind, resource_id: uuid.UUID, level: Level) -> Grant:
    return Grant(
        id=uuid.uuid4(),
        principal_id=s.agent.id,
        resource_kind=kind,
        resource_id=resource_id,
        level=level,
        created_at=AT,
    )


def _message(s: Seed, seq: int, **changes: object) -> Message:
    message = Message(
        id=uuid.uuid4(),
        thread_id=s.thread.id,
        thread_seq=seq,
        author_id=s.person.id,
        origin=Origin.HUMAN,
        kind=MessageKind.TEXT,
        content=f"message {seq}",
        client_msg_id=f"client-{seq}",
        digest="v1:abc",
        created_at=AT,
    )
    return attrs.evolve(message, **changes)  # type: ignore[arg-type]


def _event(s: Seed, **changes: object) -> NewEvent:
    event = NewEvent(
        type=EventType.MESSAGE_CREATED,
        actor_id=s.person.id,
        actor_kind="person",
        space_id=s.space.id,
        channel_id=s.channel.id,
        thread_id=s.thread.id,
        resource_kind="message",
        resource_id=uuid.uuid4(),
        resource_version=1,
        payload={"message": {"content": "hi", "mentions": []}},
        created_at=AT,
    )
    return attrs.evolve(event, **changes)  # type: ignore[arg-type]


async def test_uncommitted_work_is_rolled_back_by_default(
    pg_uow_factory: UnitOfWorkFactory,
) -> None:
    alex = _person("alex")
    async with pg_uow_factory() as uow:
        await uow.principals.add(alex)
        assert await uow.principals.get(alex.id) == alex

    async with pg_uow_factory() as uow:
        assert await uow.principals.get(alex.id) is None


async def test_work_is_rolled_back_on_error(pg_uow_factory: UnitOfWorkFactory) -> None:
    alex = _person("alex")

    class Boom(Exception):
        pass

    async def failing_work() -> None:
        async with pg_uow_factory() as uow:
            await uow.principals.add(alex)
            await uow.events.append(_event_for_nothing(alex))
            raise Boom

    with pytest.raises(Boom):
        await failing_work()

    async with pg_uow_factory() as uow:
        assert await uow.principals.get(alex.id) is None
        assert await uow.events.read(ReaderScope(reader_id=alex.id, everything=True), 0, 10) == []


def _event_for_nothing(actor: Principal) -> NewEvent:
    return NewEvent(
        type=EventType.THREAD_REOPENED,
        actor_id=actor.id,
        actor_kind="person",
        space_id=uuid.uuid4(),
        channel_id=uuid.uuid4(),
        thread_id=uuid.uuid4(),
        resource_kind="thread",
        resource_id=uuid.uuid4(),
        payload={"thread_id": "x"},
        created_at=AT,
    )


async def test_committed_work_persists_and_round_trips(pg_uow_factory: UnitOfWorkFactory) -> None:
    s = await seed(pg_uow_factory)

    async with pg_uow_factory() as uow:
        assert await uow.principals.get(s.person.id) == s.person
        assert await uow.principals.get(s.agent.id) == s.agent
        assert await uow.principals.get_many([s.agent.id, uuid.uuid4(), s.agent.id]) == {
            s.agent.id: s.agent
        }
        assert await uow.principals.owner() == s.person
        assert await uow.spaces.get(s.space.id) == s.space
        assert await uow.spaces.list_all() == [s.space]
        assert await uow.channels.get(s.channel.id) == s.channel
        assert await uow.channels.list_all() == [s.channel]
        assert await uow.threads.get(s.thread.id) == s.thread
        assert await uow.threads.operated_by(s.agent.id) == [s.other_thread.id]


async def test_commit_twice_is_refused(pg_uow_factory: UnitOfWorkFactory) -> None:
    async with pg_uow_factory() as uow:
        await uow.commit()
        with pytest.raises(UnitClosed):
            await uow.commit()


async def test_updates_and_tokens(pg_uow_factory: UnitOfWorkFactory) -> None:
    s = await seed(pg_uow_factory)
    disabled = attrs.evolve(s.agent, enabled=False, supports_followups=None)
    archived = attrs.evolve(
        s.channel,
        operator_mode=OperatorMode.NONE,
        archived=True,
        behavior=ChannelBehavior(allow_mentioned_agents=True, thread_require_mention=True),
    )
    async with pg_uow_factory() as uow:
        await uow.principals.update(disabled)
        await uow.tokens.add(attrs.evolve(TOKEN, principal_id=s.person.id), b"\x01hash")
        await uow.channels.update(archived)
        await uow.threads.set_state(s.thread.id, ThreadState.DONE)
        await uow.threads.mark_restricted(s.thread.id)
        await uow.commit()

    async with pg_uow_factory() as uow:
        assert await uow.principals.get(s.agent.id) == disabled
        assert await uow.tokens.resolve(b"\x01hash") == ResolvedToken(
            token=attrs.evolve(TOKEN, principal_id=s.person.id), principal=s.person
        )
        assert await uow.tokens.resolve(b"other") is None
        assert await uow.channels.get(s.channel.id) == archived
        thread = await uow.threads.get(s.thread.id)
        assert thread is not None
        assert (thread.state, thread.has_restricted) == (ThreadState.DONE, True)
        assert await uow.threads.reopen(s.thread.id) is True
        assert await uow.threads.reopen(s.thread.id) is False


async def test_a_unit_reads_a_principal_once_and_sees_its_own_changes(
    pg_uow_factory: UnitOfWorkFactory,
) -> None:
    s = await seed(pg_uow_factory)
    async with pg_uow_factory() as uow:
        assert isinstance(uow, PostgresUnitOfWork)
        assert await uow.principals.get(s.agent.id) == s.agent
        # A change the repositories do not know of: the unit keeps what it read first.
        await uow.connection.execute(
            "UPDATE principals SET display_name = 'Sam' WHERE id = %s", (s.agent.id,)
        )
        assert await uow.principals.get(s.agent.id) == s.agent
        assert await uow.principals.get_many([s.agent.id]) == {s.agent.id: s.agent}
        # get_many reads only what the unit has not read yet.
        both = await uow.principals.get_many([s.agent.id, s.person.id, s.agent.id])
        assert both == {s.agent.id: s.agent, s.person.id: s.person}
        # The unit's own writes replace what it remembers.
        disabled = attrs.evolve(s.agent, enabled=False)
        await uow.principals.update(disabled)
        assert await uow.principals.get(s.agent.id) == disabled
        # A heartbeat writes the row through the agent feed: the principal is read again
        # (the update above wrote every column, so the raw change is gone).
        await uow.agent_feed.set_capabilities(s.agent.id, "queue")
        fresh = await uow.principals.get(s.agent.id)
        assert fresh == attrs.evolve(disabled, reported_followups="queue")
    async with pg_uow_factory() as uow:
        assert await uow.principals.get(s.agent.id) == s.agent, "rolled back"


async def test_statements_are_prepared_on_first_use(pg_uow_factory: UnitOfWorkFactory) -> None:
    s = await seed(pg_uow_factory)
    async with pg_uow_factory() as uow:
        assert isinstance(uow, PostgresUnitOfWork)
        cur = await uow.connection.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
            ("%FROM threads%",),
        )
        before = await cur.fetchone()
        await uow.threads.get(s.other_thread.id)
        cur = await uow.connection.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
            ("%FROM threads%",),
        )
        after = await cur.fetchone()
        assert before is not None
        assert after is not None
        assert after[0] == before[0] + 1, "GetThread was prepared at its first execution"


async def test_a_taken_handle_is_a_duplicate_key(pg_uow_factory: UnitOfWorkFactory) -> None:
    await seed(pg_uow_factory)
    with pytest.raises(DuplicateKey) as caught:
        async with pg_uow_factory() as uow:
            await uow.principals.add(_person("robin"))
    assert caught.value.constraint == "principals_handle_key"


async def test_grants_round_trip_and_are_unique_per_resource(
    pg_uow_factory: UnitOfWorkFactory,
) -> None:
    s = await seed(pg_uow_factory)
    grant = _agent_grant(s, ResourceKind.CHANNEL, s.channel.id, Level.WRITE)
    async with pg_uow_factory() as uow:
        await uow.grants.add(grant)
        await uow.commit()
    async with pg_uow_factory() as uow:
        assert await uow.grants.get(grant.id) == grant
        listed = await uow.grants.for_principal(s.agent.id)
        assert listed == [grant]
    async with pg_uow_factory() as uow:
        # The post's facts carry the grants as JSON: the same values, times in the same zone.
        facts = await uow.threads.post_facts(s.thread.id, s.agent.id, "c-1")
        assert facts is not None
        assert facts.grants == listed
        assert [g.created_at.isoformat() for g in facts.grants] == [
            g.created_at.isoformat() for g in listed
        ]
    # A second grant of the pair is a concurrent unit's: rerun, then change the first.
    with pytest.raises(RetriableConflict, match="grants_principal_resource_key"):
        async with pg_uow_factory() as uow:
            await uow.grants.add(attrs.evolve(grant, id=uuid.uuid4(), level=Level.READ))
    async with pg_uow_factory() as uow:
        assert await uow.grants.lock_pair(s.agent.id, ResourceKind.CHANNEL, s.channel.id) == grant
        assert await uow.grants.lock_pair(s.agent.id, ResourceKind.SPACE, s.channel.id) is None
        await uow.grants.set_level(grant.id, Level.READ)
        await uow.commit()
    read = attrs.evolve(grant, level=Level.READ)
    async with pg_uow_factory() as uow:
        assert await uow.grants.list() == [read]
        assert await uow.grants.list(principal_id=s.agent.id, resource_id=s.channel.id) == [read]
        assert await uow.grants.list(principal_id=s.person.id) == []
        assert await uow.grants.list(resource_id=s.space.id) == []
        await uow.grants.delete(grant.id)
        await uow.commit()
    async with pg_uow_factory() as uow:
        assert await uow.grants.get(grant.id) is None


async def test_messages_round_trip_with_visibility(pg_uow_factory: UnitOfWorkFactory) -> None:
    s = await seed(pg_uow_factory)
    async with pg_uow_factory() as uow:
        first = _message(s, await uow.threads.allocate_seq(s.thread.id), mentions=(s.agent.id,))
        secret = _message(
            s,
            await uow.threads.allocate_seq(s.thread.id),
            restricted_to=(s.agent.id,),
            trigger_state=TriggerState.RECEIVED,
        )
        await uow.messages.add(first)
        await uow.messages.add(secret)
        await uow.commit()

    stranger = uuid.uuid4()
    async with pg_uow_factory() as uow:
        assert await uow.messages.get(first.id) == first
        assert await uow.messages.by_client_id(s.person.id, "client-2") == secret
        assert await uow.messages.by_client_id(s.agent.id, "client-2") is None
        assert await uow.messages.list_visible(s.thread.id, stranger, 0, 10) == [first]
        assert await uow.messages.list_visible(s.thread.id, s.agent.id, 0, 10) == [first, secret]
        assert await uow.messages.list_visible(s.thread.id, s.person.id, 1, 10) == [secret]
        assert await uow.messages.list_visible(s.thread.id, s.person.id, 0, 1) == [first]
        changed = await uow.messages.set_trigger_state(secret.id, TriggerState.FAILED, "why")
        assert changed == attrs.evolve(
            secret, trigger_state=TriggerState.FAILED, trigger_state_reason="why", version=2
        )
        thread = await uow.threads.get(s.thread.id)
        assert thread is not None
        assert thread.latest_seq == 2


async def test_seqs_allocated_under_the_post_lock_are_written_whatever_follows(
    pg_uow_factory: UnitOfWorkFactory,
) -> None:
    # ADR 0024: the allocation only notes the seq; the message taking it writes it in its
    # own insert, and a read of the thread or the commit writes whatever is left.
    s = await seed(pg_uow_factory)
    async with pg_uow_factory() as uow:
        assert await uow.threads.post_facts(s.thread.id, s.person.id, "client-1") is not None
        first = await uow.threads.allocate_seq(s.thread.id)
        await uow.messages.add(_message(s, first))
        thread = await uow.threads.get(s.thread.id)
        assert thread is not None
        assert thread.latest_seq == first == 1
        second = await uow.threads.allocate_seq(s.thread.id)
        third = await uow.threads.allocate_seq(s.thread.id)
        # The message takes the older seq: the newer one is still to be written.
        await uow.messages.add(_message(s, second))
        thread = await uow.threads.get(s.thread.id)
        assert thread is not None
        assert thread.latest_seq == third == 3
        await uow.messages.add(_message(s, third))
        await uow.commit()
    async with pg_uow_factory() as uow:
        assert await uow.threads.post_facts(s.thread.id, s.person.id, "client-9") is not None
        fourth = await uow.threads.allocate_seq(s.thread.id)
        await uow.messages.add(_message(s, fourth))
        await uow.commit()
    async with pg_uow_factory() as uow:
        thread = await uow.threads.get(s.thread.id)
        assert thread is not None
        assert thread.latest_seq == 4
        seqs = [
            m.thread_seq for m in await uow.messages.list_visible(s.thread.id, s.person.id, 0, 9)
        ]
        assert seqs == [1, 2, 3, 4]
    async with pg_uow_factory() as uow:
        assert await uow.threads.post_facts(s.thread.id, s.person.id, "client-10") is not None
        assert await uow.threads.allocate_seq(s.thread.id) == 5
        # Nothing takes the seq: the commit writes it.
        await uow.commit()
    async with pg_uow_factory() as uow:
        thread = await uow.threads.get(s.thread.id)
        assert thread is not None
        assert thread.latest_seq == 5


@pytest.mark.parametrize("round_", range(LOCK_ORDER_ROUNDS))
async def test_a_posts_take_waits_for_the_thread_lock_before_it_locks_the_bucket(
    pg_uow_factory: UnitOfWorkFactory, pg_conninfo: str, round_: int
) -> None:
    # ADR 0024: the take of GetPostFacts runs on the locked row. A post queued behind the
    # thread lock holds no bucket lock yet, so another take of the same bucket passes.
    s = await seed(pg_uow_factory)
    take = BucketTake(limit_class="rl.message", now=AT, burst=10, per_minute=6)
    async with pg_uow_factory() as holder:
        assert await holder.threads.post_facts(s.thread.id, s.agent.id, "hold") is not None

        async def post() -> PostFacts | None:
            async with pg_uow_factory() as uow:
                facts = await uow.threads.post_facts(s.thread.id, s.person.id, "c-1", take)
                await uow.commit()
                return facts

        queued = asyncio.create_task(post())
        await wait_until_blocked(pg_conninfo, backend_pid(holder))
        async with pg_uow_factory() as other:
            assert isinstance(other, PostgresUnitOfWork)
            # Were the bucket locked by the queued post, this take would fail here.
            await other.connection.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            assert (
                await other.buckets.take_token(
                    s.person.id, "rl.message", AT, burst=10, per_minute=6
                )
                is None
            )
            await other.commit()
        assert not queued.done(), f"the post must still wait for the thread lock: {queued}"
        await holder.commit()
    facts = await queued
    assert facts is not None
    assert facts.retry_after is None


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kathmandu", "America/St_Johns"])
async def test_the_caller_read_with_a_post_is_the_token_resolved_alone(
    pg_uow_factory: UnitOfWorkFactory, zone: str
) -> None:
    # ADR 0026: the caller comes as a JSON column; decoded, it must be what the plain
    # columns of the token's own read give, times in the session's zone included.
    s = await seed(pg_uow_factory)
    used = AT + timedelta(minutes=3, microseconds=250)
    tokens = {
        b"\x03person": attrs.evolve(TOKEN, principal_id=s.person.id),
        b"\x03agent": attrs.evolve(
            TOKEN,
            id=uuid.uuid4(),
            principal_id=s.agent.id,
            label=None,
            origin=TokenOrigin.OWNER_ENV,
        ),
    }
    async with pg_uow_factory() as uow:
        for token_hash, token in tokens.items():
            await uow.tokens.add(token, token_hash)
        await uow.tokens.touch(tokens[b"\x03agent"].id, used, used)
        await uow.commit()
    last: ResolvedToken | None = None
    for token_hash in tokens:
        async with pg_uow_factory() as uow:
            assert isinstance(uow, PostgresUnitOfWork)
            await uow.connection.execute(f"SET LOCAL TimeZone = '{zone}'")
            alone = await uow.tokens.resolve(token_hash)
            found = await uow.threads.token_post_facts(s.thread.id, token_hash, "c-1")
            await uow.commit()
        assert alone is not None
        assert found is not None
        assert found.caller == alone
        assert _stamps(found.caller) == _stamps(alone)
        last = found.caller
    assert last is not None
    assert last.token.last_used_at == used


def _stamps(caller: ResolvedToken) -> list[tuple[str, str] | None]:
    """A caller's times with their zones: equal times in different zones differ here."""
    times = (caller.principal.created_at, caller.token.created_at, caller.token.last_used_at)
    return [None if t is None else (t.isoformat(), str(t.tzinfo)) for t in times]


@pytest.mark.parametrize("round_", range(LOCK_ORDER_ROUNDS))
async def test_a_post_by_an_unknown_token_takes_no_thread_lock(
    pg_uow_factory: UnitOfWorkFactory, pg_conninfo: str, round_: int
) -> None:
    # ADR 0026: the caller is resolved in the statement of the facts; an unknown token
    # locks nothing, so it is refused at once even while another unit holds the thread.
    s = await seed(pg_uow_factory)
    async with pg_uow_factory() as uow:
        await uow.tokens.add(attrs.evolve(TOKEN, principal_id=s.person.id), b"\x02live")
        await uow.commit()
    async with pg_uow_factory() as holder:
        assert await holder.threads.post_facts(s.thread.id, s.agent.id, "hold") is not None

        async def post(token_hash: bytes) -> TokenPostFacts | None:
            async with pg_uow_factory() as uow:
                assert isinstance(uow, PostgresUnitOfWork)
                await uow.connection.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                found = await uow.threads.token_post_facts(s.thread.id, token_hash, "c-1")
                await uow.commit()
                return found

        # Had it asked for the thread lock, it would wait here until the holder ends.
        assert await post(b"\x02unknown") is None
        # A live token does queue behind the holder: the lock is taken as for any post.
        queued = asyncio.create_task(post(b"\x02live"))
        await wait_until_blocked(pg_conninfo, backend_pid(holder))
        assert not queued.done()
        await holder.commit()
    found = await queued
    assert found is not None
    assert found.caller.principal == s.person
    assert found.caller.token == attrs.evolve(TOKEN, principal_id=s.person.id)
    assert found.facts is not None
    assert found.facts.target.thread == attrs.evolve(s.thread, latest_seq=0)


async def test_events_get_seqs_at_commit_and_are_read_by_scope(
    pg_uow_factory: UnitOfWorkFactory,
) -> None:
    s = await seed(pg_uow_factory)
    other_channel = uuid.uuid4()
    shared = _event(s)
    restricted = _event(s, restricted_to=(s.agent.id,))
    elsewhere = _event(s, channel_id=other_channel, thread_id=s.other_thread.id)
    personal = _event(
        s,
        type=EventType.AGENT_INVOCATION,
        audience_id=s.agent.id,
        payload={"run_id": str(uuid.uuid4())},
    )
    async with pg_uow_factory() as uow:
        for event in (shared, restricted, elsewhere, personal):
            await uow.events.append(event)
        await uow.commit()

    def fields(event: NewEvent) -> dict[str, object]:
        return {f.name: getattr(event, f.name) for f in attrs.fields(NewEvent)}

    async with pg_uow_factory() as uow:
        everything = await uow.events.read(
            ReaderScope(reader_id=s.agent.id, everything=True), 0, 10
        )
        seqs = [e.seq for e in everything]
        # One transaction: consecutive numbers after its base (ADR 0020).
        assert seqs == [seqs[0], seqs[0] + 1, seqs[0] + 2]
        assert [fields(e) for e in everything] == [
            fields(shared),
            fields(restricted),
            fields(elsewhere),
        ]
        by_channel = ReaderScope(reader_id=s.person.id, channel_ids=frozenset({s.channel.id}))
        assert [e.seq for e in await uow.events.read(by_channel, 0, 10)] == [seqs[0]]
        by_thread = ReaderScope(reader_id=s.agent.id, thread_ids=frozenset({s.other_thread.id}))
        assert [e.seq for e in await uow.events.read(by_thread, 0, 10)] == [seqs[2]]
        nothing = ReaderScope(reader_id=s.person.id)
        assert await uow.events.read(nothing, 0, 10) == []
        everything_scope = ReaderScope(reader_id=s.agent.id, everything=True)
        assert [e.seq for e in await uow.events.read(everything_scope, seqs[0], 1)] == [seqs[1]]


async def test_a_message_with_its_event_keeps_the_units_event_order(
    pg_uow_factory: UnitOfWorkFactory,
) -> None:
    # ADR 0024: the message's event is written with the message only while no other
    # event waits to be numbered; either way the unit's events keep their append order.
    s = await seed(pg_uow_factory)

    def fields(event: NewEvent) -> dict[str, object]:
        return {f.name: getattr(event, f.name) for f in attrs.fields(NewEvent)}

    first, second, third, fourth = (_event(s, payload={"n": n}) for n in range(4))
    async with pg_uow_factory() as uow:
        assert await uow.threads.post_facts(s.thread.id, s.person.id, "c-1") is not None
        # Nothing waits: written with the message, numbered first.
        await uow.messages.add(_message(s, await uow.threads.allocate_seq(s.thread.id)), first)
        await uow.events.append(second)
        # `second` waits to be numbered: `third` is buffered behind it.
        await uow.messages.add(_message(s, await uow.threads.allocate_seq(s.thread.id)), third)
        await uow.events.append(fourth)
        await uow.commit()
    async with pg_uow_factory() as uow:
        everything = await uow.events.read(
            ReaderScope(reader_id=s.agent.id, everything=True), 0, 10
        )
        assert [fields(e) for e in everything] == [
            fields(e) for e in (first, second, third, fourth)
        ]
        seqs = [e.seq for e in everything]
        assert seqs == list(range(seqs[0], seqs[0] + 4))
        thread = await uow.threads.get(s.thread.id)
        assert thread is not None
        assert thread.latest_seq == 2


async def test_denials_are_aggregated_per_window(pg_uow_factory: UnitOfWorkFactory) -> None:
    s = await seed(pg_uow_factory)
    later = AT + timedelta(minutes=5)
    for window in (AT, AT, later):
        async with pg_uow_factory() as uow:
            await uow.audit.record_denial(s.person.id, Action.MESSAGE_CREATE, "no_grant", window)
            await uow.commit()
    async with pg_uow_factory() as uow:
        assert await uow.audit.denials(s.person.id) == [
            DenialRecord(
                principal_id=s.person.id,
                action="message.create",
                reason="no_grant",
                window_start=AT,
                count=2,
            ),
            DenialRecord(
                principal_id=s.person.id,
                action="message.create",
                reason="no_grant",
                window_start=later,
                count=1,
            ),
        ]


async def test_a_real_deadlock_becomes_a_retriable_conflict(
    pg_uow_factory: UnitOfWorkFactory,
) -> None:
    s = await seed(pg_uow_factory)
    first_locked = asyncio.Event()
    second_locked = asyncio.Event()

    async def lock_both(
        first: uuid.UUID, second: uuid.UUID, mine: asyncio.Event, theirs: asyncio.Event
    ) -> None:
        async with pg_uow_factory() as uow:
            await uow.threads.allocate_seq(first)
            mine.set()
            await theirs.wait()
            await uow.threads.allocate_seq(second)
            await uow.commit()

    results = await asyncio.gather(
        lock_both(s.thread.id, s.other_thread.id, first_locked, second_locked),
        lock_both(s.other_thread.id, s.thread.id, second_locked, first_locked),
        return_exceptions=True,
    )

    conflicts = [r for r in results if isinstance(r, RetriableConflict)]
    assert len(conflicts) == 1, results
    assert results.count(None) == 1
    assert isinstance(conflicts[0].__cause__, pg_errors.DeadlockDetected)


async def test_the_idempotency_race_becomes_a_retriable_conflict(
    pg_uow_factory: UnitOfWorkFactory, pg_conninfo: str
) -> None:
    s = await seed(pg_uow_factory)
    winner = _message(s, 1, client_msg_id="same")
    loser = _message(s, 1, client_msg_id="same", thread_id=s.other_thread.id)

    async def insert_loser() -> None:
        async with pg_uow_factory() as uow:
            await uow.messages.add(loser)
            await uow.commit()

    async with pg_uow_factory() as uow:
        await uow.messages.add(winner)
        racing = asyncio.create_task(insert_loser())
        # The second insert waits on the first unit's uncommitted key, seen by the server.
        await wait_until_blocked(pg_conninfo, backend_pid(uow))
        assert not racing.done(), "the second insert must wait for the first unit"
        await uow.commit()

    with pytest.raises(RetriableConflict) as caught:
        await racing
    assert isinstance(caught.value.__cause__, pg_errors.UniqueViolation)
    # The rerun of the losing unit finds the winner and replays it.
    async with pg_uow_factory() as uow:
        assert await uow.messages.by_client_id(s.person.id, "same") == winner


async def test_units_run_read_committed_on_a_pooled_connection(
    pg_pool: AsyncConnectionPool[Conn],
) -> None:
    factory = PostgresUnitOfWorkFactory(pg_pool)
    async with factory() as uow:
        assert isinstance(uow, PostgresUnitOfWork)
        cur = await uow.connection.execute("SHOW transaction_isolation")
        assert await cur.fetchone() == ("read committed",)


async def test_history_facts_are_the_thread_the_readers_grants_and_its_page(
    uow_factory: UnitOfWorkFactory,
) -> None:
    # The same answers as target, for_principal and list_visible, on both stores.
    s = await seed(uow_factory)
    grant = _agent_grant(s, ResourceKind.CHANNEL, s.channel.id, Level.WRITE)
    async with uow_factory() as uow:
        await uow.grants.add(grant)
        first = _message(s, await uow.threads.allocate_seq(s.thread.id))
        secret = _message(
            s, await uow.threads.allocate_seq(s.thread.id), restricted_to=(s.agent.id,)
        )
        third = _message(s, await uow.threads.allocate_seq(s.thread.id))
        for message in (first, secret, third):
            await uow.messages.add(message)
        await uow.commit()

    stranger = uuid.uuid4()
    async with uow_factory.read_only() as uow:
        agent = await uow.threads.history_facts(s.thread.id, s.agent.id, 0, 10)
        person = await uow.threads.history_facts(s.thread.id, s.person.id, 1, 1)
        outsider = await uow.threads.history_facts(s.thread.id, stranger, 0, 10)
        unknown = await uow.threads.history_facts(uuid.uuid4(), s.agent.id, 0, 10)
        target = await uow.threads.target(s.thread.id)

    assert agent is not None
    assert person is not None
    assert outsider is not None
    assert agent.target == person.target == outsider.target == target
    assert agent.target.thread is not None
    assert agent.target.thread.latest_seq == 3
    assert agent.grants == [grant]
    assert person.grants == outsider.grants == []
    assert agent.messages == [first, secret, third]
    # The author sees its restricted message; a page ends at its limit.
    assert person.messages == [secret]
    assert outsider.messages == [first, third]
    assert unknown is None


async def test_prefetched_grants_are_the_principals_and_a_grant_write_drops_them(
    uow_factory: UnitOfWorkFactory,
) -> None:
    s = await seed(uow_factory)
    reading = _agent_grant(s, ResourceKind.SPACE, s.space.id, Level.READ)
    writing = _agent_grant(s, ResourceKind.CHANNEL, s.channel.id, Level.READ)
    async with uow_factory() as uow:
        await uow.grants.add(reading)
        await uow.commit()

    async with uow_factory() as uow:
        await uow.grants.prefetch([s.agent.id])
        await uow.grants.prefetch([s.person.id])
        assert await uow.threads.target(s.thread.id) is not None
        assert await uow.grants.for_principal(s.agent.id) == [reading]
        assert await uow.grants.for_principal(s.person.id) == []

    async with uow_factory() as uow:
        # One read for several principals (repeated and unknown ones among them).
        await uow.grants.prefetch([s.person.id, s.agent.id, uuid.uuid4(), s.agent.id])
        assert await uow.grants.for_principal(s.person.id) == []
        assert await uow.grants.for_principal(s.agent.id) == [reading]

    async with uow_factory() as uow:
        # A batch that arrived before the unit's own write is older than its state too.
        await uow.grants.prefetch([s.person.id, s.agent.id])
        assert await uow.grants.for_principal(s.person.id) == []
        await uow.grants.add(
            attrs.evolve(
                _agent_grant(s, ResourceKind.SPACE, s.space.id, Level.WRITE),
                principal_id=s.person.id,
            )
        )
        assert [g.level for g in await uow.grants.for_principal(s.person.id)] == [Level.WRITE]

    async with uow_factory() as uow:
        # Queued before the unit's own write: that read is older than the unit's state.
        await uow.grants.prefetch([s.agent.id])
        await uow.grants.add(writing)
        assert await uow.grants.for_principal(s.agent.id) == sorted(
            [reading, writing], key=lambda g: g.id
        )


async def test_a_prefetched_owner_is_the_owner_and_a_principal_write_drops_it(
    uow_factory: UnitOfWorkFactory,
) -> None:
    s = await seed(uow_factory)
    async with uow_factory() as uow:
        await uow.principals.prefetch_owner()
        assert await uow.threads.target(s.thread.id) is not None
        assert await uow.principals.owner() == s.person
        # Read once: a second owner() reads again, and finds the same.
        assert await uow.principals.owner() == s.person

    async with uow_factory() as uow:
        # Queued before the unit's own write: that read is older than the unit's state.
        await uow.principals.prefetch_owner()
        renamed = attrs.evolve(s.person, display_name="Robin R.")
        await uow.principals.update(renamed)
        assert await uow.principals.owner() == renamed


async def test_a_prefetched_message_is_the_message_and_a_message_write_drops_it(
    uow_factory: UnitOfWorkFactory,
) -> None:
    s = await seed(uow_factory)
    async with uow_factory() as uow:
        first = _message(s, await uow.threads.allocate_seq(s.thread.id))
        await uow.messages.add(first)
        await uow.commit()

    async with uow_factory() as uow:
        await uow.messages.prefetch(first.id)
        await uow.messages.prefetch(uuid.uuid4())
        assert await uow.threads.target(s.thread.id) is not None
        assert await uow.messages.get(first.id) == first

    async with uow_factory() as uow:
        # Queued before the unit's own write: that read is older than the unit's state.
        await uow.messages.prefetch(first.id)
        changed = await uow.messages.set_trigger_state(first.id, TriggerState.FAILED, "why")
        assert await uow.messages.get(first.id) == changed
        assert changed.trigger_state is TriggerState.FAILED
