"""Conversation core scenarios, run on the memory adapter and on PostgreSQL."""

from __future__ import annotations

import uuid

import pytest

from tests.support.fakes import FakeClock, TickingClock
from tests.support.scenario import draft, main_thread, shared_events
from tests.support.services import services_over
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.ports import UnitOfWorkFactory
from turnkeeper.application.transactions import AccessDenied
from turnkeeper.domain.errors import IdempotencyConflict, NotFound, RateLimited, ValidationFailed
from turnkeeper.domain.events import EventType
from turnkeeper.domain.messaging import MessageKind, Origin
from turnkeeper.domain.world import Level, OperatorMode, ResourceKind, ThreadState, TitleSource


async def all_events(services: Services, world: DemoWorld) -> list[tuple[str, uuid.UUID]]:
    page = await services.conversation.list_events(world.principal("robin"), limit=500)
    return [(e.type.value, e.resource_id) for e in page.events]


class TestAG26AgentWithoutWrite:
    async def test_no_read_is_not_found_like_an_unknown_id(
        self, services: Services, world: DemoWorld
    ) -> None:
        lotse = world.principal("lotse")
        before = len(await shared_events(services))
        with pytest.raises(AccessDenied) as denied:
            await services.conversation.create_message(
                lotse, main_thread(world, "kampagnen"), draft("c1")
            )
        with pytest.raises(NotFound) as unknown:
            await services.conversation.create_message(lotse, uuid.uuid4(), draft("c2"))
        assert denied.value.code == unknown.value.code == "not_found"
        assert denied.value.reason is None
        assert unknown.value.reason is None
        # An embedding program catching NotFound meets the denial as an unknown id (the
        # HTTP answer is the same 404); it was an AccessDenied alone.
        assert isinstance(denied.value, NotFound)
        with pytest.raises(AccessDenied) as thread_denied:
            await services.conversation.create_thread(
                lotse, world.channels["ideas"].id, title="r", first_message=draft("c3")
            )
        assert thread_denied.value.code == "not_found"
        assert isinstance(thread_denied.value, NotFound)
        assert len(await shared_events(services)) == before
        thread = await services.conversation.get_thread(
            world.principal("robin"), main_thread(world, "kampagnen")
        )
        assert thread.latest_seq == 0

    async def test_read_only_is_forbidden_level_insufficient(
        self, services: Services, world: DemoWorld
    ) -> None:
        robin, lotse = world.principal("robin"), world.principal("lotse")
        await services.admin.create_grant(
            robin,
            principal_id=lotse.id,
            resource_kind=ResourceKind.SPACE,
            resource_id=world.spaces["marketing"].id,
            level=Level.READ,
        )
        for _ in range(2):
            with pytest.raises(AccessDenied) as denied:
                await services.conversation.create_message(
                    lotse, main_thread(world, "kampagnen"), draft("c1")
                )
            assert (denied.value.code, denied.value.reason) == ("forbidden", "level_insufficient")
            assert not isinstance(denied.value, NotFound)  # the caller may read the thread
        with pytest.raises(AccessDenied) as thread_denied:
            await services.conversation.create_thread(
                lotse, world.channels["ideas"].id, title="r", first_message=draft("c2")
            )
        assert thread_denied.value.reason == "level_insufficient"
        async with services.uow() as uow:
            rows = await uow.audit.denials(lotse.id)
        counted = {(r.action, r.reason): r.count for r in rows}
        assert counted == {
            ("message.create", "level_insufficient"): 2,
            ("thread.create", "level_insufficient"): 1,
        }

    async def test_denials_aggregate_per_window(
        self, services: Services, world: DemoWorld, clock: FakeClock
    ) -> None:
        lotse = world.principal("lotse")
        for _ in range(3):
            with pytest.raises(AccessDenied):
                await services.conversation.create_message(
                    lotse, main_thread(world, "kampagnen"), draft("c1")
                )
        clock.advance(services.settings.deny_aggregate_window)
        with pytest.raises(AccessDenied):
            await services.conversation.create_message(
                lotse, main_thread(world, "kampagnen"), draft("c1")
            )
        async with services.uow() as uow:
            rows = await uow.audit.denials(lotse.id)
        assert [(r.reason, r.count) for r in rows] == [("no_grant", 3), ("no_grant", 1)]

    async def test_archived_channel_is_read_only_for_operator_and_owner(
        self, services: Services, world: DemoWorld
    ) -> None:
        robin = world.principal("robin")
        await services.admin.archive_channel(robin, world.channels["allgemein"].id)
        for who in ("lotse", "robin", "alex"):
            with pytest.raises(AccessDenied) as denied:
                await services.conversation.create_message(
                    world.principal(who), main_thread(world, "allgemein"), draft(f"a-{who}")
                )
            assert (denied.value.code, denied.value.reason) == (
                "channel_read_only",
                "channel_archived",
            )
        page = await services.conversation.list_messages(
            world.principal("alex"), main_thread(world, "allgemein")
        )
        assert page.messages == []


class TestAgentWritesWithGrantOrAsOperator:
    async def test_operator_rule_and_grant(self, services: Services, world: DemoWorld) -> None:
        lotse = world.principal("lotse")
        posted = await services.conversation.create_message(
            lotse, main_thread(world, "allgemein"), draft("op")
        )
        assert posted.message.origin is Origin.AGENT
        created = await services.conversation.create_thread(
            lotse, world.channels["reports"].id, title=None, first_message=draft("rep")
        )
        assert created.thread.operator_agent_id is None

    async def test_revoked_grant_loses_write(self, services: Services, world: DemoWorld) -> None:
        robin, texter = world.principal("robin"), world.principal("texter")
        grant = await services.admin.create_grant(
            robin,
            principal_id=texter.id,
            resource_kind=ResourceKind.CHANNEL,
            resource_id=world.channels["kampagnen"].id,
            level=Level.READ,
        )
        await services.admin.delete_grant(robin, grant.id)
        await services.conversation.create_message(
            texter, main_thread(world, "allgemein"), draft("t1")
        )
        async with services.uow() as uow:
            grants = await uow.grants.for_principal(texter.id)
        allgemein = next(g for g in grants if g.resource_id == world.channels["allgemein"].id)
        await services.admin.delete_grant(robin, allgemein.id)
        with pytest.raises(AccessDenied) as denied:
            await services.conversation.create_message(
                texter, main_thread(world, "allgemein"), draft("t2")
            )
        assert denied.value.code == "not_found"

    async def test_main_thread_follows_channel_operator(
        self, services: Services, world: DemoWorld
    ) -> None:
        robin, lotse = world.principal("robin"), world.principal("lotse")
        alex = world.principal("alex")
        thread = await services.conversation.create_thread(
            alex, world.channels["eskalation"].id, title="help", first_message=draft("x1")
        )
        assert thread.thread.operator_agent_id == lotse.id
        await services.conversation.create_message(
            lotse, main_thread(world, "eskalation"), draft("l1")
        )
        await services.admin.set_operator(
            robin,
            world.channels["eskalation"].id,
            mode=OperatorMode.AGENT,
            operator_id=world.principal("texter").id,
        )
        with pytest.raises(AccessDenied) as denied:
            await services.conversation.create_message(
                lotse, main_thread(world, "eskalation"), draft("l2")
            )
        assert denied.value.code == "not_found"
        # The thread created earlier keeps Lotse as its fixed operator.
        kept = await services.conversation.create_message(lotse, thread.thread.id, draft("l3"))
        assert kept.message.thread_seq == 2


class TestAgentMessageOrigin:
    async def test_origin_everywhere(self, services: Services, world: DemoWorld) -> None:
        lotse, alex = world.principal("lotse"), world.principal("alex")
        thread_id = main_thread(world, "allgemein")
        posted = await services.conversation.create_message(lotse, thread_id, draft("o1"))
        replay = await services.conversation.create_message(lotse, thread_id, draft("o1"))
        assert replay.replayed
        assert replay.message.id == posted.message.id
        assert posted.message.origin is replay.message.origin is Origin.AGENT
        assert posted.author.kind.value == "agent"
        events = await services.conversation.list_events(alex)
        created = [e for e in events.events if e.type is EventType.MESSAGE_CREATED]
        assert len(created) == 1
        payload = created[0].payload["message"]
        assert payload["origin"] == "agent"
        assert payload["author"] == {"id": str(lotse.id), "kind": "agent", "handle": "lotse"}
        assert created[0].actor_kind == "agent"
        page = await services.conversation.list_messages(alex, thread_id)
        assert [(m.origin, m.trigger_state) for m in page.messages] == [(Origin.AGENT, None)]

    @pytest.mark.parametrize("kind", ["system", "run", "voice"])
    async def test_cannot_forge_kind(self, services: Services, world: DemoWorld, kind: str) -> None:
        with pytest.raises(ValidationFailed) as failed:
            await services.conversation.create_message(
                world.principal("lotse"), main_thread(world, "allgemein"), draft("f1"), kind=kind
            )
        assert [(e.pointer, e.code) for e in failed.value.errors] == [("/kind", "invalid_enum")]
        assert len(await shared_events(services)) == 0

    async def test_run_id_from_a_person_is_run_mismatch(
        self, services: Services, world: DemoWorld
    ) -> None:
        with pytest.raises(ValidationFailed) as failed:
            await services.conversation.create_message(
                world.principal("alex"),
                main_thread(world, "allgemein"),
                draft("r1", run_id=uuid.uuid4()),
            )
        assert [(e.pointer, e.code) for e in failed.value.errors] == [("/run_id", "run_mismatch")]
        with pytest.raises(ValidationFailed) as first:
            await services.conversation.create_thread(
                world.principal("lotse"),
                world.channels["reports"].id,
                title="t",
                first_message=draft("r2", run_id=uuid.uuid4()),
            )
        assert [(e.pointer, e.code) for e in first.value.errors] == [
            ("/first_message/run_id", "run_mismatch")
        ]


class TestThreads:
    async def test_reopen_done_thread_with_system_line(
        self, services: Services, world: DemoWorld
    ) -> None:
        alex, lotse = world.principal("alex"), world.principal("lotse")
        # Eskalation's main thread answers only mentions, so nothing triggers here.
        thread_id = main_thread(world, "eskalation")
        await services.conversation.create_message(alex, thread_id, draft("a1"))
        closed = await services.conversation.close_thread(alex, thread_id)
        assert closed.state is ThreadState.DONE
        posted = await services.conversation.create_message(lotse, thread_id, draft("l1"))
        assert posted.message.thread_seq == 3
        page = await services.conversation.list_messages(alex, thread_id)
        assert [(m.thread_seq, m.origin, m.kind) for m in page.messages] == [
            (1, Origin.HUMAN, MessageKind.TEXT),
            (2, Origin.SYSTEM, MessageKind.SYSTEM),
            (3, Origin.AGENT, MessageKind.TEXT),
        ]
        types = [t for t, _ in await all_events(services, world)]
        assert types == [
            "message.created",
            "thread.reopened",
            "message.created",
            "message.created",
        ]
        thread = await services.conversation.get_thread(alex, thread_id)
        assert (thread.state, thread.latest_seq) == (ThreadState.OPEN, 3)

    async def test_the_reopen_line_is_not_later_than_the_message_after_it(
        self, uow_factory: UnitOfWorkFactory
    ) -> None:
        # A clock that moves at every reading, as a real one does between two readings.
        services = services_over(uow_factory, clock=TickingClock())
        world = await build_demo_world(services)
        alex = world.principal("alex")
        thread_id = main_thread(world, "eskalation")
        await services.conversation.create_message(alex, thread_id, draft("a1"))
        await services.conversation.close_thread(alex, thread_id)
        await services.conversation.create_message(alex, thread_id, draft("a2"))
        page = await services.conversation.list_messages(alex, thread_id)
        _first, line, message = page.messages
        assert (line.kind, message.kind) == (MessageKind.SYSTEM, MessageKind.TEXT)
        # The line comes first in seq, and its time does not say otherwise.
        assert line.created_at <= message.created_at

    async def test_agent_cannot_close(self, services: Services, world: DemoWorld) -> None:
        with pytest.raises(AccessDenied) as denied:
            await services.conversation.close_thread(
                world.principal("lotse"), main_thread(world, "allgemein")
            )
        assert denied.value.code == "forbidden"

    async def test_report_thread_per_report(self, services: Services, world: DemoWorld) -> None:
        lotse = world.principal("lotse")
        report = draft("rep-1", "Nightly report\nall green")
        created = await services.conversation.create_thread(
            lotse, world.channels["reports"].id, title=None, first_message=report
        )
        assert created.thread.title == "Nightly report"
        assert created.thread.title_source is TitleSource.AUTO
        assert created.thread.operator_agent_id is None
        assert created.thread.created_by == lotse.id
        assert created.message.thread_seq == 1
        assert created.message.origin is Origin.AGENT
        replay = await services.conversation.create_thread(
            lotse, world.channels["reports"].id, title=None, first_message=report
        )
        assert replay.replayed
        assert replay.thread.id == created.thread.id
        assert await all_events(services, world) == [
            ("thread.created", created.thread.id),
            ("message.created", created.message.id),
        ]
        bulletin = await services.conversation.create_thread(
            lotse, world.channels["bulletin"].id, title="Fixed", first_message=draft("b1")
        )
        assert bulletin.thread.operator_agent_id == lotse.id
        seqs = [
            (
                await services.conversation.create_message(
                    lotse, bulletin.thread.id, draft(f"b{i}")
                )
            ).message.thread_seq
            for i in range(2, 5)
        ]
        assert seqs == [2, 3, 4]

    async def test_human_thread_has_human_title(self, services: Services, world: DemoWorld) -> None:
        created = await services.conversation.create_thread(
            world.principal("alex"),
            world.channels["bulletin"].id,
            title="Question",
            first_message=draft("h1"),
        )
        assert (created.thread.title, created.thread.title_source) == (
            "Question",
            TitleSource.HUMAN,
        )


class TestIdempotency:
    async def test_replay_and_conflict(self, services: Services, world: DemoWorld) -> None:
        alex = world.principal("alex")
        thread_id = main_thread(world, "eskalation")
        first = await services.conversation.create_message(alex, thread_id, draft("k", "one"))
        events = len(await shared_events(services))
        again = await services.conversation.create_message(alex, thread_id, draft("k", "one"))
        assert again.replayed
        assert not first.replayed
        assert again.message == first.message
        assert len(await shared_events(services)) == events
        with pytest.raises(IdempotencyConflict):
            await services.conversation.create_message(alex, thread_id, draft("k", "two"))
        # Another author may use the same client id.
        other = await services.conversation.create_message(
            world.principal("lotse"), thread_id, draft("k", "one")
        )
        assert not other.replayed

    async def test_an_audience_replays_as_a_set(self, services: Services, world: DemoWorld) -> None:
        # docs/messages.md: the digest covers restricted_to "as a set".
        alex, sam, robin = (world.principal(h) for h in ("alex", "sam", "robin"))
        thread_id = main_thread(world, "eskalation")
        first = await services.conversation.create_message(
            alex, thread_id, draft("aud", "for two", restricted_to=(sam.id, robin.id, sam.id))
        )
        for audience in ((robin.id, sam.id), (sam.id, robin.id, robin.id)):
            again = await services.conversation.create_message(
                alex, thread_id, draft("aud", "for two", restricted_to=audience)
            )
            assert again.replayed
            assert again.message.id == first.message.id
        with pytest.raises(IdempotencyConflict):
            await services.conversation.create_message(
                alex, thread_id, draft("aud", "for two", restricted_to=(sam.id,))
            )


class TestHistoryCoverage:
    async def test_a_page_past_the_end_covers_only_the_seqs_that_exist(
        self, services: Services, world: DemoWorld
    ) -> None:
        # A cursor past the thread's end proves nothing about seqs not written yet: taken as
        # a send's frontier, a coverage through the cursor would pass the freshness gate
        # once the thread grew past it, unseen messages included.
        sam = world.principal("sam")
        thread_id = main_thread(world, "allgemein")
        await services.conversation.create_message(
            world.principal("texter"), thread_id, draft("c1")
        )
        page = await services.conversation.list_messages(sam, thread_id, after_seq=50)
        assert page.messages == []
        assert page.covers_through_seq == 1
        full = await services.conversation.list_messages(sam, thread_id, after_seq=0, limit=1)
        assert [m.thread_seq for m in full.messages] == [1]
        assert full.covers_through_seq == 1


class TestRestrictedMessages:
    async def test_only_members_see_restricted(self, services: Services, world: DemoWorld) -> None:
        alex, sam, lotse = (world.principal(h) for h in ("alex", "sam", "lotse"))
        thread_id = main_thread(world, "allgemein")
        await services.conversation.create_message(
            world.principal("texter"), thread_id, draft("p1")
        )
        await services.conversation.create_message(
            lotse, thread_id, draft("p2", restricted_to=(alex.id,))
        )
        sam_page = await services.conversation.list_messages(sam, thread_id)
        assert [m.thread_seq for m in sam_page.messages] == [1]
        assert sam_page.covers_through_seq == 2
        alex_page = await services.conversation.list_messages(alex, thread_id)
        assert [m.thread_seq for m in alex_page.messages] == [1, 2]
        sam_events = await services.conversation.list_events(sam)
        assert len(sam_events.events) == 1
        alex_events = await services.conversation.list_events(alex)
        assert len(alex_events.events) == 2
        thread = await services.conversation.get_thread(sam, thread_id)
        assert thread.latest_seq == 2

    async def test_unknown_mention_and_foreign_reply(
        self, services: Services, world: DemoWorld
    ) -> None:
        alex = world.principal("alex")
        other = await services.conversation.create_message(
            alex, main_thread(world, "eskalation"), draft("x")
        )
        with pytest.raises(ValidationFailed) as failed:
            await services.conversation.create_message(
                alex,
                main_thread(world, "allgemein"),
                draft("y", mentions=(uuid.uuid4(),), reply_to_id=other.message.id),
            )
        assert sorted((e.pointer, e.code) for e in failed.value.errors) == [
            ("/mentions/0", "unknown_principal"),
            ("/reply_to_id", "not_in_thread"),
        ]

    async def test_unknown_references_of_a_first_message_name_the_whole_path(
        self, services: Services, world: DemoWorld
    ) -> None:
        alex = world.principal("alex")
        with pytest.raises(ValidationFailed) as failed:
            await services.conversation.create_thread(
                alex,
                world.channels["bulletin"].id,
                title="t",
                first_message=draft(
                    "z", mentions=(uuid.uuid4(),), restricted_to=(alex.id, uuid.uuid4())
                ),
            )
        assert sorted((e.pointer, e.code) for e in failed.value.errors) == [
            ("/first_message/mentions/0", "unknown_principal"),
            ("/first_message/restricted_to/1", "unknown_principal"),
        ]


class TestEventFeed:
    async def test_scope_and_paging(self, services: Services, world: DemoWorld) -> None:
        alex, sam = world.principal("alex"), world.principal("sam")
        for i in range(3):
            await services.conversation.create_message(
                world.principal("texter"), main_thread(world, "allgemein"), draft(f"g{i}")
            )
        await services.conversation.create_message(
            alex, main_thread(world, "eskalation"), draft("e1")
        )
        first = await services.conversation.list_events(sam, limit=2)
        assert len(first.events) == 2
        rest = await services.conversation.list_events(sam, after=first.next_after, limit=2)
        assert len(rest.events) == 1
        done = await services.conversation.list_events(sam, after=rest.next_after, limit=2)
        assert done.events == []
        assert done.next_after == rest.next_after
        alex_all = await services.conversation.list_events(alex)
        assert len(alex_all.events) == 4
        seqs = [e.seq for e in alex_all.events]
        assert seqs == sorted(seqs)
        assert len(set(seqs)) == 4

    async def test_agent_sees_operated_channels(self, services: Services, world: DemoWorld) -> None:
        await services.conversation.create_message(
            world.principal("texter"), main_thread(world, "allgemein"), draft("g")
        )
        lotse_feed = await services.conversation.list_events(world.principal("lotse"))
        assert len(lotse_feed.events) == 1
        texter_feed = await services.conversation.list_events(world.principal("texter"))
        assert len(texter_feed.events) == 1
        assistent = await services.conversation.list_events(world.principal("assistent"))
        assert assistent.events == []


class TestRateLimit:
    @pytest.fixture
    def settings(self) -> object:
        from turnkeeper.application.settings import Settings

        return Settings(rl_message_burst=2, rl_message_per_minute=6)

    async def test_per_principal_buckets(
        self, services: Services, world: DemoWorld, clock: FakeClock
    ) -> None:
        lotse, alex = world.principal("lotse"), world.principal("alex")
        thread_id = main_thread(world, "allgemein")
        for i in range(2):
            await services.conversation.create_message(lotse, thread_id, draft(f"l{i}"))
        with pytest.raises(RateLimited) as limited:
            await services.conversation.create_message(lotse, thread_id, draft("l9"))
        assert limited.value.retry_after == 10
        # A replay is not a new message and costs nothing.
        replay = await services.conversation.create_message(lotse, thread_id, draft("l0"))
        assert replay.replayed
        await services.conversation.create_message(
            alex, main_thread(world, "eskalation"), draft("a0")
        )
        clock.advance(10)
        posted = await services.conversation.create_message(lotse, thread_id, draft("l9"))
        assert posted.message.thread_seq == 3

    async def test_a_post_refused_for_another_reason_costs_no_token(
        self, services: Services, world: DemoWorld
    ) -> None:
        # The take shares the round trip of the post's facts, before the post knows it
        # will be refused; the refused unit rolls the take back with it.
        lotse = world.principal("lotse")
        thread_id = main_thread(world, "allgemein")
        with pytest.raises(ValidationFailed):
            await services.conversation.create_message(
                lotse, thread_id, draft("bad", mentions=(uuid.uuid4(),))
            )
        with pytest.raises(NotFound):
            await services.conversation.create_message(lotse, uuid.uuid4(), draft("gone"))
        for i in range(2):
            await services.conversation.create_message(lotse, thread_id, draft(f"l{i}"))
        with pytest.raises(RateLimited):
            await services.conversation.create_message(lotse, thread_id, draft("l2"))

    async def test_an_empty_bucket_answers_after_the_other_checks(
        self, services: Services, world: DemoWorld
    ) -> None:
        lotse = world.principal("lotse")
        thread_id = main_thread(world, "allgemein")
        for i in range(2):
            await services.conversation.create_message(lotse, thread_id, draft(f"l{i}"))
        # Validation, an unknown thread and a reused client id are answered as such.
        with pytest.raises(ValidationFailed):
            await services.conversation.create_message(
                lotse, thread_id, draft("bad", mentions=(uuid.uuid4(),))
            )
        with pytest.raises(NotFound):
            await services.conversation.create_message(lotse, uuid.uuid4(), draft("gone"))
        with pytest.raises(IdempotencyConflict):
            await services.conversation.create_message(
                lotse, thread_id, draft("l0", content="Robin, something else.")
            )
        with pytest.raises(RateLimited):
            await services.conversation.create_message(lotse, thread_id, draft("l2"))
