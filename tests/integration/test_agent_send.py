"""Agent sends through the freshness gate (seed message-freshness-gate, DESIGN section 9).

Service-level scenarios on the memory adapter and on PostgreSQL: the compare-and-set
decides sent / held, an idempotent retry answers already_sent without publishing again,
a thread with restricted messages holds only on a proved author-visible message and never
shows an invisible seq, run_id is checked like createMessage's, agent sends never trigger,
and every validation rule answers with its pointer and code. The HTTP shape is tested in
tests/integration/http/test_http_agent_send.py, real parallel races on PostgreSQL in
tests/concurrency/test_send_races.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pytest
from structlog.testing import capture_logs

from tests.support.fakes import FakeClock
from tests.support.scenario import (
    latest_seq,
    main_thread,
    personal_events,
    post,
    shared_events,
    started_run,
)
from tests.support.services import services_over
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.ports import UnitOfWorkFactory
from turnkeeper.application.services.agent_send import (
    LOGGER_NAME,
    AgentSend,
    SendFreshness,
    SendOutcome,
    SendPath,
)
from turnkeeper.application.settings import Settings
from turnkeeper.application.transactions import AccessDenied
from turnkeeper.domain.errors import (
    Conflict,
    IdempotencyConflict,
    NotFound,
    RateLimited,
    ValidationFailed,
)
from turnkeeper.domain.events import EventType
from turnkeeper.domain.freshness import SendState
from turnkeeper.domain.messaging import MessageDraft, MessageKind, Origin
from turnkeeper.domain.runs import RunState
from turnkeeper.domain.world import Level, ResourceKind, thread_target_key

# -- helpers -------------------------------------------------------------------------------


def request(
    thread_id: uuid.UUID,
    cid: str,
    seen: int | None,
    content: str = "Done, Alex.",
    *,
    run_id: uuid.UUID | None = None,
    target_key: str | None = None,
    sources: Sequence[str] = (),
) -> AgentSend:
    return AgentSend(
        target=thread_id,
        content=content,
        client_message_id=cid,
        run_id=run_id,
        freshness=None
        if seen is None
        else SendFreshness(
            target_key=thread_target_key(thread_id) if target_key is None else target_key,
            seen_up_to_seq=seen,
            source_message_ids=tuple(sources),
        ),
    )


async def send(
    services: Services,
    world: DemoWorld,
    who: str,
    thread_id: uuid.UUID,
    cid: str,
    seen: int | None,
    content: str = "Done, Alex.",
    *,
    run_id: uuid.UUID | None = None,
) -> SendOutcome:
    return await services.agent_send.send(
        world.principal(who), request(thread_id, cid, seen, content, run_id=run_id)
    )


async def seqs_of(services: Services, thread_id: uuid.UUID) -> list[int]:
    """Every stored thread_seq of a thread, as the owner sees it."""
    async with services.uow() as uow:
        owner = await uow.principals.owner()
        assert owner is not None
        messages = await uow.messages.list_visible(thread_id, owner.id, 0, 100_000)
    return [m.thread_seq for m in messages]


def field_errors(error: ValidationFailed) -> set[tuple[str, str]]:
    return {(e.pointer, e.code) for e in error.errors}


def services_with(uow_factory: UnitOfWorkFactory, clock: FakeClock, **values: object) -> Services:
    settings = Settings(**values)  # type: ignore[arg-type]
    return services_over(uow_factory, settings, clock)


# -- sent, held, already_sent --------------------------------------------------------------


class TestFreshSend:
    async def test_fresh_send_is_sent_at_seen_plus_one(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = main_thread(world, "eskalation")
        seen = (await post(services, world, "alex", thread_id, "a1")).thread_seq
        before = len(await shared_events(services))
        outcome = await send(services, world, "lotse", thread_id, "s1", seen)
        assert outcome.state is SendState.SENT
        assert outcome.path == SendPath.CAS
        assert outcome.accepted_seq == seen + 1
        assert outcome.latest_seq == seen + 1
        assert outcome.seen_up_to_seq == seen
        assert outcome.needs_refresh_until_seq is None
        assert outcome.target_key == thread_target_key(thread_id)
        assert outcome.client_message_id == "s1"
        assert await latest_seq(services, world, thread_id) == seen + 1
        async with services.uow() as uow:
            assert outcome.message_id is not None
            stored = await uow.messages.get(outcome.message_id)
        assert stored is not None
        assert (stored.origin, stored.kind, stored.thread_seq) == (
            Origin.AGENT,
            MessageKind.TEXT,
            seen + 1,
        )
        assert stored.trigger_state is None
        events = (await shared_events(services))[before:]
        assert [e.type for e in events] == [EventType.MESSAGE_CREATED]
        assert events[0].resource_id == outcome.message_id

    async def test_first_send_into_an_empty_thread(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = main_thread(world, "eskalation")
        outcome = await send(services, world, "lotse", thread_id, "s1", 0)
        assert (outcome.state, outcome.accepted_seq) == (SendState.SENT, 1)

    async def test_chained_sends_each_carry_the_previous_accepted_seq(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = main_thread(world, "eskalation")
        seen = 0
        for i in range(3):
            outcome = await send(services, world, "lotse", thread_id, f"c{i}", seen)
            assert outcome.state is SendState.SENT
            assert outcome.accepted_seq == seen + 1
            seen = outcome.accepted_seq
        assert await seqs_of(services, thread_id) == [1, 2, 3]


class TestPublicMiss:
    async def test_stale_send_is_held_with_the_raw_latest(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = main_thread(world, "eskalation")
        seen = (await post(services, world, "alex", thread_id, "a1")).thread_seq
        await post(services, world, "alex", thread_id, "a2")
        raw = (await post(services, world, "robin", thread_id, "r1")).thread_seq
        before = await shared_events(services)
        outcome = await send(services, world, "lotse", thread_id, "s1", seen)
        assert outcome.state is SendState.HELD
        assert outcome.path == SendPath.HELD_RAW
        assert (outcome.latest_seq, outcome.needs_refresh_until_seq) == (raw, raw)
        assert outcome.seen_up_to_seq == seen
        assert outcome.message_id is None
        assert outcome.accepted_seq is None
        # Nothing stored, nothing published but the owner's message.held, the frontier
        # untouched (shared_events reads as nobody in particular: it sees no held event).
        assert await shared_events(services) == before
        assert await latest_seq(services, world, thread_id) == raw
        async with services.uow() as uow:
            assert await uow.messages.by_client_id(world.principal("lotse").id, "s1") is None

    async def test_a_held_send_writes_one_message_held_event_that_only_the_owner_reads(
        self, services: Services, world: DemoWorld
    ) -> None:
        run, _ = await started_run(services, world)
        run_id, thread_id = run.id, run.thread_id
        lotse = world.principal("lotse")
        seen = await latest_seq(services, world, thread_id)
        raw = (await post(services, world, "robin", thread_id, "r1")).thread_seq
        start = (await services.conversation.list_events(world.principal("robin"))).next_after
        outcome = await services.agent_send.send(
            lotse, request(thread_id, "s1", seen, "The secret answer.", run_id=run_id)
        )
        assert outcome.state is SendState.HELD
        page = await services.conversation.list_events(world.principal("robin"), after=start)
        (held,) = page.events
        assert held.type is EventType.MESSAGE_HELD
        assert (held.actor_id, held.actor_kind) == (lotse.id, "agent")
        assert (held.thread_id, held.channel_id) == (thread_id, world.channels["allgemein"].id)
        assert (held.resource_kind, held.resource_id) == ("thread", thread_id)
        assert held.payload == {
            "thread_id": str(thread_id),
            "author": {"id": str(lotse.id), "kind": "agent", "handle": "lotse"},
            "seen_up_to_seq": seen,
            "latest_seq": raw,
            "client_message_id": "s1",
            "run_id": str(run_id),
        }
        assert "The secret answer." not in repr(held.payload)
        # Readers of the thread who are not the owner, the sender included, never see it.
        for reader in ("alex", "lotse"):
            seen_by = await services.conversation.list_events(world.principal(reader))
            assert EventType.MESSAGE_HELD not in {e.type for e in seen_by.events}, reader
        assert all(
            e.type is not EventType.MESSAGE_HELD
            for events in (await personal_events(services, world)).values()
            for e in events
        )

    async def test_a_held_send_in_a_private_gap_names_only_the_visible_seq(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = main_thread(world, "eskalation")
        seen = (await post(services, world, "alex", thread_id, "a1")).thread_seq
        visible = (await post(services, world, "alex", thread_id, "a2")).thread_seq
        await post(services, world, "alex", thread_id, "h1", restricted_to=["sam"])
        outcome = await send(services, world, "lotse", thread_id, "s1", seen)
        assert (outcome.state, outcome.path) == (SendState.HELD, SendPath.HELD_VISIBLE)
        page = await services.conversation.list_events(world.principal("robin"))
        (held,) = [e for e in page.events if e.type is EventType.MESSAGE_HELD]
        assert (held.payload["seen_up_to_seq"], held.payload["latest_seq"]) == (seen, visible)
        assert "run_id" not in held.payload

    async def test_held_then_retry_with_a_new_id_and_the_same_frontier_is_held_again(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = main_thread(world, "eskalation")
        seen = (await post(services, world, "alex", thread_id, "a1")).thread_seq
        raw = (await post(services, world, "alex", thread_id, "a2")).thread_seq
        first = await send(services, world, "lotse", thread_id, "s1", seen)
        again = await send(services, world, "lotse", thread_id, "s2", seen)
        assert (first.state, again.state) == (SendState.HELD, SendState.HELD)
        assert again.latest_seq == raw
        # The held client id is free: after a refresh the same id sends.
        refreshed = await send(services, world, "lotse", thread_id, "s1", raw)
        assert (refreshed.state, refreshed.accepted_seq) == (SendState.SENT, raw + 1)

    async def test_held_send_costs_a_token_and_stores_nothing_else(
        self, uow_factory: UnitOfWorkFactory, clock: FakeClock
    ) -> None:
        services = services_with(uow_factory, clock, rl_message_burst=2, rl_message_per_minute=0)
        world = await build_demo_world(services)
        thread_id = main_thread(world, "eskalation")
        seen = (await post(services, world, "alex", thread_id, "a1")).thread_seq
        await post(services, world, "alex", thread_id, "a2")
        assert (await send(services, world, "lotse", thread_id, "s1", seen)).state is (
            SendState.HELD
        )
        assert (await send(services, world, "lotse", thread_id, "s2", seen + 1)).state is (
            SendState.SENT
        )
        with pytest.raises(RateLimited):
            await send(services, world, "lotse", thread_id, "s3", seen + 2)


class TestIdempotency:
    async def test_retry_answers_already_sent_with_the_original_seq_and_no_second_event(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = main_thread(world, "eskalation")
        first = await send(services, world, "lotse", thread_id, "s1", 0)
        await post(services, world, "alex", thread_id, "a1")
        events = await shared_events(services)
        # The retry carries a stale frontier: the lookup comes before the CAS.
        retry = await send(services, world, "lotse", thread_id, "s1", 0)
        assert retry.state is SendState.ALREADY_SENT
        assert retry.path == SendPath.REPLAY
        assert (retry.message_id, retry.accepted_seq) == (first.message_id, first.accepted_seq)
        assert retry.latest_seq == first.accepted_seq
        assert retry.needs_refresh_until_seq is None
        assert await shared_events(services) == events
        assert await seqs_of(services, thread_id) == [1, 2]

    async def test_same_key_other_content_is_an_idempotency_conflict(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = main_thread(world, "eskalation")
        await send(services, world, "lotse", thread_id, "s1", 0, "first")
        with pytest.raises(IdempotencyConflict):
            await send(services, world, "lotse", thread_id, "s1", 1, "second")
        with pytest.raises(IdempotencyConflict):
            # Another thread is another digest as well.
            await send(services, world, "lotse", main_thread(world, "allgemein"), "s1", 0, "first")

    async def test_send_and_create_message_replay_each_other(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = main_thread(world, "eskalation")
        lotse = world.principal("lotse")
        posted = await services.conversation.create_message(
            lotse, thread_id, MessageDraft(client_msg_id="x1", content="Same text")
        )
        outcome = await send(services, world, "lotse", thread_id, "x1", 0, "Same text")
        assert outcome.state is SendState.ALREADY_SENT
        assert (outcome.message_id, outcome.accepted_seq) == (posted.message.id, 1)
        sent = await send(services, world, "lotse", thread_id, "x2", 1, "Other text")
        replayed = await services.conversation.create_message(
            lotse, thread_id, MessageDraft(client_msg_id="x2", content="Other text")
        )
        assert replayed.replayed
        assert replayed.message.id == sent.message_id
        with pytest.raises(IdempotencyConflict):
            await services.conversation.create_message(
                lotse, thread_id, MessageDraft(client_msg_id="x2", content="changed")
            )


# -- threads with restricted messages ------------------------------------------------------


class TestPrivateGap:
    async def test_invisible_gap_is_not_proved_and_sends_through_the_second_cas(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = main_thread(world, "eskalation")
        seen = (await post(services, world, "alex", thread_id, "a1")).thread_seq
        hidden = (
            await post(services, world, "alex", thread_id, "a2", restricted_to=["robin"])
        ).thread_seq
        outcome = await send(services, world, "lotse", thread_id, "s1", seen)
        assert outcome.state is SendState.SENT
        assert outcome.path == SendPath.VISIBLE_MISS_CAS
        assert outcome.accepted_seq == hidden + 1
        assert outcome.latest_seq == hidden + 1
        assert await seqs_of(services, thread_id) == [seen, hidden, hidden + 1]

    async def test_visible_message_after_seen_is_proved_and_held_without_the_invisible_seq(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = main_thread(world, "eskalation")
        seen = (await post(services, world, "alex", thread_id, "a1")).thread_seq
        visible = (await post(services, world, "alex", thread_id, "a2")).thread_seq
        await post(services, world, "alex", thread_id, "a3", restricted_to=["robin"])
        hidden = (
            await post(services, world, "robin", thread_id, "r1", restricted_to=["alex"])
        ).thread_seq
        outcome = await send(services, world, "lotse", thread_id, "s1", seen)
        assert outcome.state is SendState.HELD
        assert outcome.path == SendPath.HELD_VISIBLE
        assert (outcome.latest_seq, outcome.needs_refresh_until_seq) == (visible, visible)
        assert hidden > visible
        assert await latest_seq(services, world, thread_id) == hidden

    async def test_restricted_message_the_author_belongs_to_is_visible(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = main_thread(world, "eskalation")
        seen = (await post(services, world, "alex", thread_id, "a1")).thread_seq
        await post(services, world, "alex", thread_id, "a2", restricted_to=["robin"])
        shown = (
            await post(services, world, "alex", thread_id, "a3", restricted_to=["lotse"])
        ).thread_seq
        outcome = await send(services, world, "lotse", thread_id, "s1", seen)
        assert (outcome.state, outcome.latest_seq) == (SendState.HELD, shown)

    async def test_newest_visible_seq_beneath_invisible_ones_is_the_answer(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = main_thread(world, "eskalation")
        seen = (await post(services, world, "alex", thread_id, "a1")).thread_seq
        await post(services, world, "alex", thread_id, "a2")
        newest_visible = (await post(services, world, "alex", thread_id, "a3")).thread_seq
        for i in range(3):
            await post(services, world, "alex", thread_id, f"h{i}", restricted_to=["robin"])
        outcome = await send(services, world, "lotse", thread_id, "s1", seen)
        assert outcome.state is SendState.HELD
        assert outcome.latest_seq == newest_visible

    async def test_visible_message_beyond_the_batch_budget_is_not_proved(
        self, uow_factory: UnitOfWorkFactory, clock: FakeClock
    ) -> None:
        services = services_with(uow_factory, clock, visible_miss_batch=2, visible_miss_batches=2)
        world = await build_demo_world(services)
        thread_id = main_thread(world, "eskalation")
        seen = (await post(services, world, "alex", thread_id, "a1")).thread_seq
        await post(services, world, "alex", thread_id, "a2")
        # Four invisible messages fill the two batches of two rows.
        for i in range(4):
            hidden = (
                await post(services, world, "alex", thread_id, f"h{i}", restricted_to=["sam"])
            ).thread_seq
        outcome = await send(services, world, "lotse", thread_id, "s1", seen)
        assert (outcome.state, outcome.path) == (SendState.SENT, SendPath.VISIBLE_MISS_CAS)
        assert outcome.accepted_seq == hidden + 1

    async def test_visible_message_in_the_second_batch_is_proved(
        self, uow_factory: UnitOfWorkFactory, clock: FakeClock
    ) -> None:
        services = services_with(uow_factory, clock, visible_miss_batch=2, visible_miss_batches=2)
        world = await build_demo_world(services)
        thread_id = main_thread(world, "eskalation")
        seen = (await post(services, world, "alex", thread_id, "a1")).thread_seq
        visible = (await post(services, world, "alex", thread_id, "a2")).thread_seq
        for i in range(3):
            await post(services, world, "alex", thread_id, f"h{i}", restricted_to=["sam"])
        outcome = await send(services, world, "lotse", thread_id, "s1", seen)
        assert (outcome.state, outcome.latest_seq) == (SendState.HELD, visible)

    async def test_held_answers_never_name_an_invisible_seq(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = main_thread(world, "eskalation")
        lotse = world.principal("lotse")
        invisible: set[int] = set()
        seen = 0
        for i in range(6):
            if i % 2:
                hidden = await post(
                    services, world, "alex", thread_id, f"h{i}", restricted_to=["sam"]
                )
                invisible.add(hidden.thread_seq)
            else:
                await post(services, world, "alex", thread_id, f"v{i}")
            outcome = await services.agent_send.send(
                lotse, request(thread_id, f"s{i}", seen, f"answer {i}")
            )
            if outcome.state is SendState.HELD:
                assert outcome.latest_seq not in invisible
                assert outcome.needs_refresh_until_seq not in invisible
                assert outcome.latest_seq > seen
                page = await services.conversation.list_messages(lotse, thread_id, after_seq=seen)
                assert outcome.latest_seq in {m.thread_seq for m in page.messages}
                seen = page.covers_through_seq
            else:
                assert outcome.accepted_seq is not None
                seen = outcome.accepted_seq


# -- done threads, runs and triggers -------------------------------------------------------


class TestThreadState:
    async def test_send_into_a_done_thread_reopens_it_after_the_cas(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = main_thread(world, "eskalation")
        seen = (await post(services, world, "alex", thread_id, "a1")).thread_seq
        await services.conversation.close_thread(world.principal("alex"), thread_id)
        held_first = await send(services, world, "lotse", thread_id, "s0", seen - 1)
        assert held_first.state is SendState.HELD
        thread = await services.conversation.get_thread(world.principal("robin"), thread_id)
        assert thread.state.value == "done"  # a held send changes nothing
        outcome = await send(services, world, "lotse", thread_id, "s1", seen)
        assert outcome.state is SendState.SENT
        # The reopen line takes the seq the CAS allocated, the message the next one.
        assert outcome.accepted_seq == seen + 2
        thread = await services.conversation.get_thread(world.principal("robin"), thread_id)
        assert (thread.state.value, thread.latest_seq) == ("open", seen + 2)
        types = [e.type for e in await shared_events(services)][-3:]
        assert types == [
            EventType.THREAD_REOPENED,
            EventType.MESSAGE_CREATED,
            EventType.MESSAGE_CREATED,
        ]


class TestRuns:
    async def test_answer_with_an_active_own_run(
        self, services: Services, world: DemoWorld
    ) -> None:
        run, _ = await started_run(services, world)
        run_id, thread_id = run.id, run.thread_id
        seen = await latest_seq(services, world, thread_id)
        outcome = await send(services, world, "lotse", thread_id, "ans", seen, run_id=run_id)
        assert outcome.state is SendState.SENT
        view = await services.runs.get(world.principal("robin"), run_id)
        assert view.run.state is RunState.RUNNING

    async def test_foreign_run_is_a_run_mismatch_and_stores_nothing(
        self, services: Services, world: DemoWorld
    ) -> None:
        run, _ = await started_run(services, world)
        run_id, thread_id = run.id, run.thread_id
        seen = await latest_seq(services, world, thread_id)
        events = await shared_events(services)
        with pytest.raises(ValidationFailed) as caught:
            await send(services, world, "texter", thread_id, "t1", seen, run_id=run_id)
        assert field_errors(caught.value) == {("/run_id", "run_mismatch")}
        with pytest.raises(ValidationFailed) as unknown:
            await send(services, world, "lotse", thread_id, "t2", seen, run_id=uuid.uuid4())
        assert field_errors(unknown.value) == {("/run_id", "run_mismatch")}
        assert await shared_events(services) == events
        assert await latest_seq(services, world, thread_id) == seen

    async def test_ended_own_run_is_run_not_active(
        self, services: Services, world: DemoWorld
    ) -> None:
        run, _ = await started_run(services, world)
        run_id, thread_id = run.id, run.thread_id
        lotse = world.principal("lotse")
        await services.runs.finish(lotse, run_id, RunState.COMPLETED, None)
        seen = await latest_seq(services, world, thread_id)
        with pytest.raises(Conflict) as caught:
            await send(services, world, "lotse", thread_id, "late", seen, run_id=run_id)
        assert caught.value.reason == "run_not_active"
        assert await latest_seq(services, world, thread_id) == seen

    async def test_agent_sends_never_trigger(self, services: Services, world: DemoWorld) -> None:
        # Allgemein answers freely and Lotse operates it: a human message would trigger.
        thread_id = main_thread(world, "allgemein")
        personal = await personal_events(services, world)
        seen = 0
        for i, who in enumerate(("lotse", "texter", "lotse")):
            outcome = await send(services, world, who, thread_id, f"q{i}", seen, "@lotse hi")
            assert outcome.state is SendState.SENT
            assert outcome.accepted_seq is not None
            seen = outcome.accepted_seq
        assert await personal_events(services, world) == personal
        async with services.uow() as uow:
            assert await uow.runs.lock_active_in_thread(thread_id) is None
            for cid in ("q0", "q2"):
                stored = await uow.messages.by_client_id(world.principal("lotse").id, cid)
                assert stored is not None
                assert stored.trigger_state is None


# -- who may send, and validation ----------------------------------------------------------


class TestRights:
    async def test_a_person_is_forbidden(self, services: Services, world: DemoWorld) -> None:
        thread_id = main_thread(world, "eskalation")
        with pytest.raises(AccessDenied) as caught:
            await send(services, world, "alex", thread_id, "p1", 0)
        assert (caught.value.code, caught.value.reason) == ("forbidden", "agents_only")
        async with services.uow() as uow:
            denials = await uow.audit.denials(world.principal("alex").id)
        assert [(d.action, d.reason) for d in denials] == [("agent.send", "agents_only")]

    async def test_without_read_like_an_unknown_thread(
        self, services: Services, world: DemoWorld
    ) -> None:
        hidden = main_thread(world, "notizen")  # Research: Lotse has nothing there
        with pytest.raises(AccessDenied) as caught:
            await send(services, world, "lotse", hidden, "n1", 0)
        with pytest.raises(NotFound) as unknown:
            await send(services, world, "lotse", uuid.uuid4(), "n2", 0)
        assert (caught.value.code, caught.value.reason) == ("not_found", None)
        assert unknown.value.code == "not_found"

    async def test_read_only_is_forbidden(self, services: Services, world: DemoWorld) -> None:
        channel = world.channels["kampagnen"]
        assistent = world.principal("assistent")
        await services.admin.create_grant(
            world.principal("robin"),
            principal_id=assistent.id,
            resource_kind=ResourceKind.CHANNEL,
            resource_id=channel.id,
            level=Level.READ,
        )
        assert channel.main_thread_id is not None
        with pytest.raises(AccessDenied) as caught:
            await send(services, world, "assistent", channel.main_thread_id, "k1", 0)
        assert (caught.value.code, caught.value.reason) == ("forbidden", "level_insufficient")


class TestValidation:
    async def _refused(
        self, services: Services, world: DemoWorld, req: AgentSend, who: str = "lotse"
    ) -> set[tuple[str, str]]:
        with pytest.raises(ValidationFailed) as caught:
            await services.agent_send.send(world.principal(who), req)
        return field_errors(caught.value)

    async def test_every_rule_names_its_member(self, services: Services, world: DemoWorld) -> None:
        thread_id = main_thread(world, "eskalation")
        other = main_thread(world, "allgemein")
        too_many = [str(uuid.uuid4()) for _ in range(services.settings.max_source_message_ids + 1)]
        cases: list[tuple[AgentSend, set[tuple[str, str]]]] = [
            (request(thread_id, "v1", None), {("/freshness", "freshness_required")}),
            (request(thread_id, "", 0), {("/client_message_id", "client_message_id_required")}),
            (
                request(thread_id, "v2", 0, target_key=thread_target_key(other)),
                {("/freshness/target_key", "target_key_mismatch")},
            ),
            (
                request(thread_id, "v3", 0, target_key=""),
                {("/freshness/target_key", "target_key_required")},
            ),
            (request(thread_id, "v4", -1), {("/freshness/seen_up_to_seq", "negative")}),
            (
                request(thread_id, "v5", 0, sources=too_many),
                {("/freshness/source_message_ids", "too_many")},
            ),
            (request(thread_id, "v6", 0, "   "), {("/content", "required")}),
            (
                request(thread_id, "v7", 0, "x" * (services.settings.max_content_bytes + 1)),
                {("/content", "too_long")},
            ),
            (
                request(thread_id, "", -1, ""),
                {
                    ("/client_message_id", "client_message_id_required"),
                    ("/freshness/seen_up_to_seq", "negative"),
                    ("/content", "required"),
                },
            ),
        ]
        for req, expected in cases:
            assert await self._refused(services, world, req) == expected, req
        assert await seqs_of(services, thread_id) == []

    async def test_as_many_sources_as_allowed_pass(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = main_thread(world, "eskalation")
        sources = [str(uuid.uuid4()) for _ in range(services.settings.max_source_message_ids)]
        outcome = await services.agent_send.send(
            world.principal("lotse"), request(thread_id, "s1", 0, sources=sources)
        )
        assert outcome.state is SendState.SENT

    async def test_a_frontier_ahead_of_the_thread_is_refused(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = main_thread(world, "eskalation")
        await post(services, world, "alex", thread_id, "a1")
        errors = await self._refused(services, world, request(thread_id, "s1", 5))
        assert errors == {("/freshness/seen_up_to_seq", "ahead_of_latest")}

    async def test_without_the_requirement_a_send_without_freshness_is_ungated(
        self, uow_factory: UnitOfWorkFactory, clock: FakeClock
    ) -> None:
        services = services_with(uow_factory, clock, freshness_required_for_agents=False)
        world = await build_demo_world(services)
        thread_id = main_thread(world, "eskalation")
        await post(services, world, "alex", thread_id, "a1")
        outcome = await send(services, world, "lotse", thread_id, "s1", None)
        assert (outcome.state, outcome.path) == (SendState.SENT, SendPath.COMPAT)
        assert (outcome.accepted_seq, outcome.latest_seq, outcome.seen_up_to_seq) == (2, 2, None)
        # A send that carries freshness is still gated.
        held = await send(services, world, "lotse", thread_id, "s2", 1)
        assert held.state is SendState.HELD


# -- logs ----------------------------------------------------------------------------------


class TestLogs:
    async def test_every_outcome_is_one_record_without_content(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = main_thread(world, "eskalation")
        secret = "the secret text of the answer"
        with capture_logs() as records:
            await send(services, world, "lotse", thread_id, "s1", 0, secret)
            await send(services, world, "lotse", thread_id, "s1", 0, secret)
            await send(services, world, "lotse", thread_id, "s2", 0, secret)
            with pytest.raises(IdempotencyConflict):
                await send(services, world, "lotse", thread_id, "s1", 1, "other")
        mine = [r for r in records if r["event"] in ("agent_send", "agent_send_refused")]
        assert [r["state"] for r in mine] == ["sent", "already_sent", "held", "refused"]
        sent, replay, held, refused = mine
        key = thread_target_key(thread_id)
        assert (sent["target_key"], sent["seen_up_to_seq"], sent["accepted_seq"]) == (key, 0, 1)
        assert (sent["latest_seq"], sent["path"]) == (1, SendPath.CAS)
        assert (replay["accepted_seq"], replay["path"]) == (1, SendPath.REPLAY)
        assert (held["latest_seq"], held["needs_refresh_until_seq"], held["seq_delta"]) == (1, 1, 1)
        assert refused["code"] == "idempotency_conflict"
        for record in mine:
            assert all(secret not in str(value) for value in record.values())
            assert "content" not in record
        assert LOGGER_NAME == "turnkeeper.freshness"

    async def test_an_agents_create_message_is_one_ungated_record(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = main_thread(world, "eskalation")
        secret = "the secret text of the answer"
        with capture_logs() as records:
            first = await post(services, world, "lotse", thread_id, "c1", content=secret)
            await post(services, world, "lotse", thread_id, "c1", content=secret)
            await post(services, world, "alex", thread_id, "p1", content=secret)
        mine = [r for r in records if r["event"] == "agent_send"]
        assert [(r["state"], r["path"], r["gated"]) for r in mine] == [
            ("sent", SendPath.COMPAT, False),
            ("already_sent", SendPath.REPLAY, False),
        ]
        for record in mine:
            assert (record["target_key"], record["accepted_seq"], record["client_message_id"]) == (
                thread_target_key(thread_id),
                first.thread_seq,
                "c1",
            )
            assert record["agent_id"] == str(world.principal("lotse").id)
            assert all(secret not in str(value) for value in record.values())
