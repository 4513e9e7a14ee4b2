"""Run scenarios (trigger acceptance, agent feed, lifecycle, jobs) on memory and PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from tests.support.fakes import FakeClock
from tests.support.scenario import (
    denials,
    draft,
    invocations,
    main_thread,
    message,
    post,
    runs_of,
    started_run,
)
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.errors import InvalidToken
from turnkeeper.application.services.runs import FollowupOp
from turnkeeper.application.transactions import AccessDenied
from turnkeeper.domain.errors import InvalidStateTransition, ValidationFailed
from turnkeeper.domain.events import EventType
from turnkeeper.domain.followups import FollowupState
from turnkeeper.domain.messaging import MessageKind, Origin, TriggerState
from turnkeeper.domain.runs import RunState
from turnkeeper.domain.world import Level, Principal, ResourceKind


class TestTriggerAcceptance:
    async def test_free_response_triggers_operator(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = main_thread(world, "allgemein")
        trigger = await post(services, world, "alex", thread_id, "m1")
        (run,) = await runs_of(services, thread_id)
        assert (run.agent_id, run.state, run.version) == (
            world.principal("lotse").id,
            RunState.QUEUED,
            1,
        )
        assert (run.triggering_message_id, run.triggered_by) == (
            trigger.id,
            world.principal("alex").id,
        )
        stored = await message(services, trigger.id)
        assert stored.trigger_state is TriggerState.RECEIVED
        page = await services.conversation.list_messages(world.principal("alex"), thread_id)
        anchor = page.messages[-1]
        assert (anchor.kind, anchor.origin, anchor.run_id, anchor.author_id) == (
            MessageKind.RUN,
            Origin.SYSTEM,
            run.id,
            run.agent_id,
        )
        (delivery,) = await invocations(services, world.principal("lotse"))
        assert delivery.event.payload == {
            "run_id": str(run.id),
            "thread_id": str(thread_id),
            "message_id": str(trigger.id),
        }
        assert (await message(services, trigger.id)).trigger_state is TriggerState.QUEUED
        # The shared feed never shows personal events, and the order is run, anchor,
        # trigger state, invocation.
        shared = await services.conversation.list_events(world.principal("robin"))
        assert EventType.AGENT_INVOCATION not in {e.type for e in shared.events}

    @pytest.mark.parametrize(
        ("where", "mentions", "triggers"),
        [
            ("main", (), False),
            ("main", ("lotse",), True),
            ("thread", (), False),
            ("thread", ("lotse",), True),
            ("thread", ("alex",), False),
        ],
        ids=["main-no-mention", "main-mention", "thread-no-mention", "thread-mention", "person"],
    )
    async def test_mention_rules_in_eskalation(
        self,
        services: Services,
        world: DemoWorld,
        where: str,
        mentions: tuple[str, ...],
        triggers: bool,
    ) -> None:
        if where == "main":
            thread_id = main_thread(world, "eskalation")
        else:
            created = await services.conversation.create_thread(
                world.principal("robin"),
                world.channels["eskalation"].id,
                title="case",
                first_message=draft("open", "opening the case"),
            )
            thread_id = created.thread.id
        msg = await post(services, world, "alex", thread_id, "m", *mentions)
        assert bool(await runs_of(services, thread_id)) is triggers
        expected = TriggerState.RECEIVED if triggers else None
        assert (await message(services, msg.id)).trigger_state is expected

    async def test_guest_mention_needs_allow_and_write(
        self, services: Services, world: DemoWorld
    ) -> None:
        allgemein = main_thread(world, "allgemein")
        msg = await post(services, world, "alex", allgemein, "g1", "texter")
        (run,) = await runs_of(services, allgemein)
        assert run.agent_id == world.principal("texter").id
        assert (await message(services, msg.id)).trigger_state is TriggerState.RECEIVED
        bulletin = await services.conversation.create_thread(
            world.principal("robin"),
            world.channels["bulletin"].id,
            title="news",
            first_message=draft("b0"),
        )
        await services.runs.cancel(
            world.principal("robin"), (await runs_of(services, bulletin.thread.id))[0].id
        )
        failed = await post(services, world, "alex", bulletin.thread.id, "g2", "texter")
        stored = await message(services, failed.id)
        assert (stored.trigger_state, stored.trigger_state_reason) == (
            TriggerState.FAILED,
            "agent_not_allowed_here",
        )

    async def test_no_trigger_right_with_and_without_mention(
        self, services: Services, world: DemoWorld
    ) -> None:
        robin, sam = world.principal("robin"), world.principal("sam")
        async with services.uow() as uow:
            grants = await uow.grants.for_principal(sam.id)
        read = next(g for g in grants if g.resource_id == world.channels["allgemein"].id)
        await services.admin.delete_grant(robin, read.id)
        await services.admin.create_grant(
            robin,
            principal_id=sam.id,
            resource_kind=ResourceKind.CHANNEL,
            resource_id=world.channels["allgemein"].id,
            level=Level.WRITE,
        )
        thread_id = main_thread(world, "allgemein")
        quiet = await post(services, world, "sam", thread_id, "s1")
        assert (await message(services, quiet.id)).trigger_state is None
        loud = await post(services, world, "sam", thread_id, "s2", "lotse")
        stored = await message(services, loud.id)
        assert (stored.trigger_state, stored.trigger_state_reason) == (
            TriggerState.FAILED,
            "no_trigger_right",
        )
        assert await runs_of(services, thread_id) == []
        async with services.uow() as uow:
            denials = await uow.audit.denials(sam.id)
        assert [(d.action, d.reason, d.count) for d in denials] == [
            ("agent.invoke", "no_trigger_right", 2)
        ]

    async def test_personal_agent_only_for_its_holder(
        self, services: Services, world: DemoWorld
    ) -> None:
        robin = world.principal("robin")
        await services.admin.create_grant(
            robin,
            principal_id=world.principal("alex").id,
            resource_kind=ResourceKind.SPACE,
            resource_id=world.spaces["research"].id,
            level=Level.TRIGGER,
        )
        notizen = main_thread(world, "notizen")
        denied = await post(services, world, "alex", notizen, "n1", "assistent")
        stored = await message(services, denied.id)
        assert stored.trigger_state_reason == "billing_mode_personal_not_holder"
        assert await runs_of(services, notizen) == []
        await post(services, world, "robin", notizen, "n2", "assistent")
        (run,) = await runs_of(services, notizen)
        assert run.agent_id == world.principal("assistent").id

    async def test_disabled_agent_is_not_reachable(
        self, services: Services, world: DemoWorld
    ) -> None:
        lotse = world.principal("lotse")
        await services.admin.set_agent_config(world.principal("robin"), lotse.id, enabled=False)
        msg = await post(services, world, "alex", main_thread(world, "allgemein"), "d1", "lotse")
        stored = await message(services, msg.id)
        assert stored.trigger_state_reason == "agent_not_reachable"

    @pytest.mark.parametrize("mentions", [(), ("lotse",), ("texter",), ("lotse", "texter")])
    async def test_agent_messages_never_trigger(
        self, services: Services, world: DemoWorld, mentions: tuple[str, ...]
    ) -> None:
        thread_id = main_thread(world, "allgemein")
        for author in ("lotse", "texter"):
            msg = await post(services, world, author, thread_id, f"a-{author}", *mentions)
            assert (await message(services, msg.id)).trigger_state is None
        assert await runs_of(services, thread_id) == []
        for agent in ("lotse", "texter"):
            assert await invocations(services, world.principal(agent)) == []

    async def test_two_first_messages_give_one_run(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = main_thread(world, "allgemein")
        await post(services, world, "alex", thread_id, "f1")
        second = await post(services, world, "robin", thread_id, "f2")
        (run,) = await runs_of(services, thread_id)
        # The second message is a follow-up of the run the first one opened.
        assert (await message(services, second.id)).trigger_state is TriggerState.RECEIVED
        assert run.triggered_by == world.principal("alex").id
        async with services.uow() as uow:
            assert await uow.followups.states(run.id) == {second.id: "queued"}


async def refused_as_archived(moved: Callable[[], Awaitable[object]], label: str) -> None:
    """Assert that a move is refused as an archived channel refuses it."""
    with pytest.raises(AccessDenied) as refused:
        await moved()
    assert (refused.value.code, refused.value.reason) == (
        "channel_read_only",
        "channel_archived",
    ), label


class TestLifecycle:
    async def test_full_lifecycle(self, services: Services, world: DemoWorld) -> None:
        lotse = world.principal("lotse")
        run, token = await started_run(services, world)
        assert (run.state, run.version) == (RunState.RUNNING, 2)
        assert (
            await message(services, run.triggering_message_id)
        ).trigger_state is TriggerState.WORKING
        waiting = await services.runs.await_input(lotse, run.id)
        assert waiting.run.state is RunState.WAITING_INPUT
        # The start token was consumed by the start: only an answer's token resumes.
        with pytest.raises(InvalidToken):
            await services.runs.resume(lotse, run.id, token)
        answer = await post(services, world, "alex", run.thread_id, "answer", content="yes")
        (delivery,) = [
            d
            for d in (await services.runs.poll(lotse)).deliveries
            if d.event.type is EventType.AGENT_FOLLOWUP
        ]
        assert delivery.invocation_token is not None
        resumed = await services.runs.resume(lotse, run.id, delivery.invocation_token)
        assert resumed.run.state is RunState.RUNNING
        absorbed = await services.runs.patch(
            lotse,
            run.id,
            resumed.run.version,
            [FollowupOp(message_id=answer.id, value=FollowupState.ABSORBED)],
        )
        done = await services.runs.finish(lotse, run.id, RunState.COMPLETED, None)
        assert (done.run.state, done.run.version) == (RunState.COMPLETED, 7)
        assert absorbed.run.version == 6
        trigger = await message(services, run.triggering_message_id)
        assert trigger.trigger_state is TriggerState.DONE
        again = await services.runs.finish(lotse, run.id, RunState.COMPLETED, None)
        assert again.run.version == 7
        with pytest.raises(InvalidStateTransition):
            await services.runs.finish(lotse, run.id, RunState.FAILED, "late")
        events = await services.conversation.list_events(world.principal("robin"), limit=500)
        changes = [
            (e.payload["state"], e.payload["version"])
            for e in events.events
            if e.type is EventType.RUN_STATE_CHANGED
        ]
        assert changes == [
            ("running", 2),
            ("waiting_input", 3),
            ("waiting_input", 4),
            ("running", 5),
            ("running", 6),
            ("completed", 7),
        ]

    @pytest.mark.parametrize(
        ("state", "trigger_state", "kept"),
        [
            (RunState.COMPLETED, TriggerState.DONE, None),
            (RunState.FAILED, TriggerState.FAILED, "tool crashed"),
            (RunState.CANCELLED, TriggerState.CANCELLED, "tool crashed"),
        ],
    )
    async def test_the_trigger_keeps_a_reason_only_when_failed_or_cancelled(
        self,
        services: Services,
        world: DemoWorld,
        state: RunState,
        trigger_state: TriggerState,
        kept: str | None,
    ) -> None:
        run, _token = await started_run(services, world)
        ended = await services.runs.finish(world.principal("lotse"), run.id, state, "tool crashed")
        # The run keeps the agent's words; a done message has no reason (DESIGN 6).
        assert ended.run.state_reason == "tool crashed"
        trigger = await message(services, run.triggering_message_id)
        assert (trigger.trigger_state, trigger.trigger_state_reason) == (trigger_state, kept)

    async def test_finish_from_queued_is_invalid(
        self, services: Services, world: DemoWorld
    ) -> None:
        await post(services, world, "alex", main_thread(world, "allgemein"), "q")
        (run,) = await runs_of(services, main_thread(world, "allgemein"))
        with pytest.raises(InvalidStateTransition):
            await services.runs.finish(world.principal("lotse"), run.id, RunState.COMPLETED, None)

    async def test_superseded_and_foreign_tokens(
        self, services: Services, world: DemoWorld
    ) -> None:
        lotse = world.principal("lotse")
        await post(services, world, "alex", main_thread(world, "allgemein"), "t1")
        (first,) = await invocations(services, lotse)
        (second,) = await invocations(services, lotse)
        assert second.redelivered
        assert not first.redelivered
        assert first.invocation_token != second.invocation_token
        assert first.invocation_token
        assert second.invocation_token
        run_id = uuid.UUID(first.event.payload["run_id"])
        await services.runs.start(lotse, run_id, second.invocation_token)
        await services.runs.await_input(lotse, run_id)
        with pytest.raises(InvalidToken) as superseded:
            await services.runs.resume(lotse, run_id, first.invocation_token)
        assert superseded.value.reason == "superseded"
        with pytest.raises(InvalidToken) as malformed:
            await services.runs.resume(lotse, run_id, "not-a-token")
        assert malformed.value.reason == "malformed"
        # A token of this run used on another run of Lotse.
        await post(services, world, "alex", main_thread(world, "eskalation"), "t2", "lotse")
        other = (await runs_of(services, main_thread(world, "eskalation")))[0]
        with pytest.raises(InvalidToken) as foreign:
            await services.runs.start(lotse, other.id, second.invocation_token)
        assert foreign.value.reason == "run_mismatch"

    async def test_expired_token(
        self, services: Services, world: DemoWorld, clock: FakeClock
    ) -> None:
        lotse = world.principal("lotse")
        await post(services, world, "alex", main_thread(world, "allgemein"), "x1")
        (delivery,) = await invocations(services, lotse)
        assert delivery.invocation_token is not None
        clock.advance(services.settings.invocation_token_ttl)
        with pytest.raises(InvalidToken) as expired:
            await services.runs.start(
                lotse, uuid.UUID(delivery.event.payload["run_id"]), delivery.invocation_token
            )
        assert expired.value.reason == "expired"

    async def test_other_agent_cannot_drive_the_run(
        self, services: Services, world: DemoWorld
    ) -> None:
        run, _ = await started_run(services, world)
        with pytest.raises(AccessDenied) as denied:
            await services.runs.finish(world.principal("texter"), run.id, RunState.COMPLETED, None)
        assert denied.value.code == "forbidden"
        with pytest.raises(AccessDenied) as hidden:
            await services.runs.finish(
                world.principal("assistent"), run.id, RunState.COMPLETED, None
            )
        assert hidden.value.code == "not_found"

    async def test_ack_moves_the_cursor(self, services: Services, world: DemoWorld) -> None:
        lotse = world.principal("lotse")
        await post(services, world, "alex", main_thread(world, "allgemein"), "a1")
        page = await services.runs.poll(lotse)
        await services.runs.ack(lotse, page.next_after)
        assert (await services.runs.poll(lotse)).deliveries == []

    async def test_an_ack_beyond_the_delivered_events_loses_no_later_event(
        self, services: Services, world: DemoWorld
    ) -> None:
        lotse = world.principal("lotse")
        thread_id = main_thread(world, "allgemein")
        await post(services, world, "alex", thread_id, "a1")
        first = await services.runs.poll(lotse)
        assert first.deliveries
        # Far beyond the feed (the largest seq the API takes): counts up to the delivery.
        await services.runs.ack(lotse, 2**63 - 1)
        assert (await services.runs.poll(lotse)).deliveries == []
        # A run in another thread: a new invocation for the same agent.
        await post(services, world, "alex", main_thread(world, "eskalation"), "e1", "lotse")
        later = await services.runs.poll(lotse)
        assert later.deliveries, "an event after the ack is still delivered"
        assert all(d.event.seq > first.next_after for d in later.deliveries)
        assert not any(d.redelivered for d in later.deliveries)

    async def test_denied_delivery_ends_the_queued_run(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = main_thread(world, "allgemein")
        trigger = await post(services, world, "alex", thread_id, "r1")
        (run,) = await runs_of(services, thread_id)
        await services.admin.archive_channel(
            world.principal("robin"), world.channels["allgemein"].id
        )
        assert await invocations(services, world.principal("lotse")) == []
        view = await services.runs.get(world.principal("robin"), run.id)
        # The delivery reason of agent.invoke's channel_archived (the audit keeps that one).
        assert (view.run.state, view.run.state_reason) == (RunState.FAILED, "channel_read_only")
        stored = await message(services, trigger.id)
        assert (stored.trigger_state, stored.trigger_state_reason) == (
            TriggerState.FAILED,
            "channel_read_only",
        )
        assert await denials(services, world.principal("alex")) == [
            ("agent.invoke", "channel_archived", 1)
        ]

    async def test_a_token_delivered_before_the_archive_starts_nothing(
        self, services: Services, world: DemoWorld
    ) -> None:
        lotse, robin = world.principal("lotse"), world.principal("robin")
        thread_id = main_thread(world, "allgemein")
        await post(services, world, "alex", thread_id, "r1")
        (delivery,) = (await services.runs.poll(lotse)).deliveries
        assert delivery.invocation_token is not None
        await services.admin.archive_channel(robin, world.channels["allgemein"].id)
        (run,) = await runs_of(services, thread_id)

        with pytest.raises(AccessDenied) as refused:
            await services.runs.start(lotse, run.id, delivery.invocation_token)

        assert (refused.value.code, refused.value.reason) == (
            "channel_read_only",
            "channel_archived",
        )
        after = await services.runs.get(robin, run.id)
        assert (after.run.state, after.run.version) == (run.state, run.version)

    async def test_in_an_archived_channel_a_started_run_can_only_end(
        self, services: Services, world: DemoWorld
    ) -> None:
        lotse, robin = world.principal("lotse"), world.principal("robin")
        run, _token = await started_run(services, world)
        answer = await post(services, world, "alex", run.thread_id, "more", content="also this")
        version = (await services.runs.get(robin, run.id)).run.version
        await services.admin.archive_channel(robin, world.channels["allgemein"].id)
        moves: dict[str, Callable[[], Awaitable[object]]] = {
            "await_input": lambda: services.runs.await_input(lotse, run.id),
            "patch": lambda: services.runs.patch(
                lotse,
                run.id,
                version,
                [FollowupOp(message_id=answer.id, value=FollowupState.ABSORBED)],
            ),
        }
        for name, moved in moves.items():
            await refused_as_archived(moved, name)
        after = await services.runs.get(robin, run.id)
        assert (after.run.state, after.run.version) == (RunState.RUNNING, version)
        ended = await services.runs.finish(lotse, run.id, RunState.COMPLETED, None)
        assert ended.run.state is RunState.COMPLETED

    async def test_in_an_archived_channel_the_archive_is_the_first_refusal_of_a_move(
        self, services: Services, world: DemoWorld
    ) -> None:
        # docs/rights.md: the archive is checked before the caller's role, the run's
        # state, its version and the moves' own input; a move that would change nothing
        # is refused too. Only the run's end stays open, to its agent alone.
        lotse, robin, alex = (world.principal(n) for n in ("lotse", "robin", "alex"))
        run, token = await started_run(services, world)
        version = (await services.runs.get(robin, run.id)).run.version
        await services.admin.archive_channel(robin, world.channels["allgemein"].id)
        unknown = FollowupOp(message_id=uuid.uuid4(), value=FollowupState.DELIVERED)

        def moves(caller: Principal) -> dict[str, Callable[[], Awaitable[object]]]:
            return {
                "start again": lambda: services.runs.start(caller, run.id, token),
                "start, bad token": lambda: services.runs.start(caller, run.id, "x.y"),
                "resume while running": lambda: services.runs.resume(caller, run.id, token),
                "patch, nothing": lambda: services.runs.patch(caller, run.id, version, []),
                "patch, stale": lambda: services.runs.patch(caller, run.id, version - 1, []),
                "patch, unknown": lambda: services.runs.patch(caller, run.id, version, [unknown]),
                "await_input": lambda: services.runs.await_input(caller, run.id),
            }

        for caller in (lotse, alex, robin):
            for name, moved in moves(caller).items():
                await refused_as_archived(moved, f"{caller.handle}: {name}")
        with pytest.raises(AccessDenied) as other:
            await services.runs.finish(alex, run.id, RunState.COMPLETED, None)
        assert (other.value.code, other.value.audit_reason) == ("forbidden", "not_run_agent")
        after = await services.runs.get(robin, run.id)
        assert (after.run.state, after.run.version) == (RunState.RUNNING, version)
        ended = await services.runs.finish(lotse, run.id, RunState.COMPLETED, None)
        assert ended.run.state is RunState.COMPLETED

    async def test_delivery_denied_after_a_revoked_grant_fails_access_revoked(
        self, services: Services, world: DemoWorld
    ) -> None:
        alex, robin = world.principal("alex"), world.principal("robin")
        thread_id = main_thread(world, "allgemein")
        trigger = await post(services, world, "alex", thread_id, "r1")
        (run,) = await runs_of(services, thread_id)
        async with services.uow() as uow:
            grants = await uow.grants.for_principal(alex.id)
        for grant in grants:
            await services.admin.delete_grant(robin, grant.id)

        assert await invocations(services, world.principal("lotse")) == []

        view = await services.runs.get(robin, run.id)
        assert (view.run.state, view.run.state_reason) == (RunState.FAILED, "access_revoked")
        stored = await message(services, trigger.id)
        assert (stored.trigger_state, stored.trigger_state_reason) == (
            TriggerState.FAILED,
            "access_revoked",
        )
        # The audit records the authorization decision, not the word the message shows.
        assert await denials(services, alex) == [("agent.invoke", "no_trigger_right", 1)]

    @pytest.mark.parametrize("first", ["poll", "job"])
    async def test_a_disabled_agents_queued_run_ends_alike_by_its_poll_or_the_job(
        self, services: Services, world: DemoWorld, first: str
    ) -> None:
        # Found by an audit: the poll of a disabled agent (it may still authenticate)
        # ended its queued run failed / agent_disabled, the job cancelled / agent_disabled
        # (DESIGN.md section 6); the end depended on which came first.
        lotse, robin = world.principal("lotse"), world.principal("robin")
        thread_id = main_thread(world, "allgemein")
        trigger = await post(services, world, "alex", thread_id, "d1")
        (run,) = await runs_of(services, thread_id)
        await services.admin.set_agent_config(robin, lotse.id, enabled=False)

        if first == "poll":
            assert await invocations(services, lotse) == []
        else:
            assert (await services.runs.run_jobs_once())["agent_disabled"] == 1

        view = await services.runs.get(robin, run.id)
        assert (view.run.state, view.run.state_reason) == (RunState.CANCELLED, "agent_disabled")
        stored = await message(services, trigger.id)
        assert (stored.trigger_state, stored.trigger_state_reason) == (
            TriggerState.CANCELLED,
            "agent_disabled",
        )
        # Ended once: the other path finds nothing left to end.
        assert (await services.runs.run_jobs_once())["agent_disabled"] == 0
        assert await invocations(services, lotse) == []


class TestCancel:
    async def test_cancel_queued_ends_at_once(self, services: Services, world: DemoWorld) -> None:
        await post(services, world, "alex", main_thread(world, "allgemein"), "c1")
        (run,) = await runs_of(services, main_thread(world, "allgemein"))
        view = await services.runs.cancel(world.principal("alex"), run.id)
        assert (view.run.state, view.run.state_reason) == (RunState.CANCELLED, "user_cancelled")
        trigger = await message(services, run.triggering_message_id)
        assert trigger.trigger_state is TriggerState.CANCELLED
        assert await invocations(services, world.principal("lotse")) == []

    async def test_cancel_running_asks_the_agent_then_times_out(
        self, services: Services, world: DemoWorld, clock: FakeClock
    ) -> None:
        lotse = world.principal("lotse")
        run, _ = await started_run(services, world)
        view = await services.runs.cancel(world.principal("alex"), run.id)
        assert (view.run.state, view.run.cancel_requested, view.run.version) == (
            RunState.RUNNING,
            True,
            3,
        )
        page = await services.runs.poll(lotse)
        assert [d.event.type for d in page.deliveries][-1] is EventType.RUN_CANCEL_REQUESTED
        clock.advance(services.settings.cancel_grace - timedelta(seconds=1))
        assert (await services.runs.run_jobs_once())["cancel_timeout"] == 0
        clock.advance(2)
        assert (await services.runs.run_jobs_once())["cancel_timeout"] == 1
        ended = await services.runs.get(world.principal("alex"), run.id)
        assert (ended.run.state, ended.run.state_reason) == (RunState.CANCELLED, "cancel_timeout")

    async def test_agent_confirms_cancel(self, services: Services, world: DemoWorld) -> None:
        run, _ = await started_run(services, world)
        await services.runs.cancel(world.principal("alex"), run.id)
        view = await services.runs.finish(
            world.principal("lotse"), run.id, RunState.CANCELLED, "user_cancelled"
        )
        assert view.run.state is RunState.CANCELLED

    async def test_cancel_needs_trigger(self, services: Services, world: DemoWorld) -> None:
        run, _ = await started_run(services, world)
        with pytest.raises(AccessDenied) as denied:
            await services.runs.cancel(world.principal("sam"), run.id)
        assert (denied.value.code, denied.value.reason) == ("forbidden", "level_insufficient")


class TestJobs:
    async def test_queued_expiry(
        self, services: Services, world: DemoWorld, clock: FakeClock
    ) -> None:
        await post(services, world, "alex", main_thread(world, "allgemein"), "e1")
        (run,) = await runs_of(services, main_thread(world, "allgemein"))
        clock.advance(services.settings.queued_max_age + timedelta(seconds=1))
        assert (await services.runs.run_jobs_once())["queued_expiry"] == 1
        view = await services.runs.get(world.principal("alex"), run.id)
        assert (view.run.state, view.run.state_reason) == (RunState.FAILED, "queued_expired")

    async def test_stall_check(
        self, services: Services, world: DemoWorld, clock: FakeClock
    ) -> None:
        run, _ = await started_run(services, world)
        clock.advance(services.settings.stall_after + timedelta(seconds=1))
        assert (await services.runs.run_jobs_once())["stall_check"] == 1
        view = await services.runs.get(world.principal("alex"), run.id)
        assert (view.run.state, view.run.state_reason) == (RunState.FAILED, "stale")
        assert (await services.runs.run_jobs_once())["stall_check"] == 0

    async def test_agent_disabled(self, services: Services, world: DemoWorld) -> None:
        run, _ = await started_run(services, world)
        await services.admin.set_agent_config(
            world.principal("robin"), world.principal("lotse").id, enabled=False
        )
        assert (await services.runs.run_jobs_once())["agent_disabled"] == 1
        view = await services.runs.get(world.principal("alex"), run.id)
        assert (view.run.state, view.run.state_reason) == (RunState.CANCELLED, "agent_disabled")


class TestHeartbeat:
    async def test_stores_capability(self, services: Services, world: DemoWorld) -> None:
        lotse = world.principal("lotse")
        await services.runs.heartbeat(lotse, "steer")
        async with services.uow() as uow:
            stored = await uow.principals.get(lotse.id)
        assert stored is not None
        assert stored.reported_followups == "steer"
        with pytest.raises(AccessDenied):
            await services.runs.heartbeat(world.principal("alex"), "queue")

    async def test_a_persons_heartbeat_is_refused_and_audited(
        self, services: Services, world: DemoWorld
    ) -> None:
        alex = world.principal("alex")
        with pytest.raises(AccessDenied) as caught:
            await services.runs.heartbeat(alex, "steer")
        assert caught.value.reason == "agents_only"
        assert await denials(services, alex) == [("agent.heartbeat", "agents_only", 1)]
        async with services.uow.read_only() as uow:
            assert (await uow.principals.get(alex.id)) == alex


class TestRestrictedMessages:
    async def test_an_agent_outside_the_audience_is_not_set_in_motion(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = main_thread(world, "allgemein")
        alex, sam = world.principal("alex"), world.principal("sam")
        private = await services.conversation.create_message(
            alex, thread_id, draft("p1", restricted_to=(sam.id,))
        )
        assert await runs_of(services, thread_id) == []
        assert (await message(services, private.message.id)).trigger_state is None
        assert await invocations(services, world.principal("lotse")) == []
        shared = await services.conversation.create_message(
            alex, thread_id, draft("p2", restricted_to=(world.principal("lotse").id,))
        )
        (run,) = await runs_of(services, thread_id)
        assert run.triggering_message_id == shared.message.id

    async def test_a_named_agent_outside_the_audience_is_not_replaced_by_the_operator(
        self, services: Services, world: DemoWorld
    ) -> None:
        # Alex asks Texter in a message only Lotse (the operator) may read: Texter is
        # passed over, and Lotse, whom Alex did not ask, is not set in motion either.
        thread_id = main_thread(world, "allgemein")
        alex, lotse = world.principal("alex"), world.principal("lotse")
        asked = await services.conversation.create_message(
            alex,
            thread_id,
            draft("p3", mentions=(world.principal("texter").id,), restricted_to=(lotse.id,)),
        )
        assert asked.trigger.outcome == "none"
        assert await runs_of(services, thread_id) == []
        assert (await message(services, asked.message.id)).trigger_state is None
        assert await invocations(services, lotse) == []


class TestCheckPoll:
    """The checks of a poll without the poll (a HEAD of the agent feed)."""

    async def test_it_delivers_nothing_and_answers_the_polls_refusals(
        self, services: Services, world: DemoWorld
    ) -> None:
        lotse, alex = world.principal("lotse"), world.principal("alex")
        posted = await post(services, world, "alex", main_thread(world, "allgemein"), "cp-1")
        await services.runs.check_poll(lotse)
        assert (await message(services, posted.id)).trigger_state is TriggerState.RECEIVED
        with pytest.raises(AccessDenied) as refused:
            await services.runs.check_poll(alex)
        assert refused.value.reason == "agents_only"
        with pytest.raises(ValidationFailed):
            await services.runs.check_poll(lotse, after=-1)
        with pytest.raises(ValidationFailed):
            await services.runs.check_poll(lotse, limit=0)
        (delivery,) = (await services.runs.poll(lotse)).deliveries
        assert (delivery.event.type, delivery.redelivered) == (EventType.AGENT_INVOCATION, False)
