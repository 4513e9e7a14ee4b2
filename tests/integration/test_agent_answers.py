"""Agent answers and announcements (seed agent-replies-and-announcements, DESIGN section 8).

Service-level scenarios on the memory adapter and on PostgreSQL: agents write only with
effective write (grant or operator rule), nothing an agent writes sets an agent in motion
(AG-01 for origin agent), run_id names only an active own run of the thread, and report
threads behave like any other thread for the humans answering in them. The HTTP-only
cases (unknown members ``origin`` and ``system_code``, headers, the response validator)
are tested in tests/integration/http.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import attrs
import pytest

from tests.support.fakes import FakeClock
from tests.support.openapi import assert_no_null
from tests.support.scenario import (
    AGENTS,
    denials,
    draft,
    get_run,
    invocations,
    latest_seq,
    main_thread,
    message,
    personal_events,
    post,
    runs_of,
    shared_events,
    start_delivered,
    started_run,
)
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.bus import MessagePosted
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.documents import message_document
from turnkeeper.application.ports import UnitOfWork
from turnkeeper.application.services.access import thread_target
from turnkeeper.application.settings import Settings
from turnkeeper.application.transactions import AccessDenied
from turnkeeper.domain.authorization import effective_level
from turnkeeper.domain.errors import (
    Conflict,
    DomainError,
    IdempotencyConflict,
    NotFound,
    RateLimited,
    ValidationFailed,
)
from turnkeeper.domain.events import Event, EventType
from turnkeeper.domain.messaging import (
    SYSTEM_REOPENED_CONTENT,
    Message,
    MessageDraft,
    MessageKind,
    Origin,
    TriggerState,
)
from turnkeeper.domain.runs import Run, RunState
from turnkeeper.domain.world import (
    Level,
    OperatorMode,
    Principal,
    ResourceKind,
    ThreadState,
    TitleSource,
)

# -- helpers (the shared ones are in tests/support/scenario.py) ---------------------------


async def stored_by_client_id(services: Services, author: Principal, cid: str) -> Message | None:
    async with services.uow() as uow:
        return await uow.messages.by_client_id(author.id, cid)


async def queued_run(
    services: Services, world: DemoWorld, channel: str, agent: str, cid: str
) -> Run:
    """Alex mentions an agent in a channel's main thread: a queued run of that agent."""
    thread_id = main_thread(world, channel)
    await post(services, world, "alex", thread_id, cid, agent)
    (run,) = await runs_of(services, thread_id)
    assert (run.agent_id, run.state) == (world.principal(agent).id, RunState.QUEUED)
    return run


async def report_thread(services: Services, world: DemoWorld, channel: str, cid: str) -> uuid.UUID:
    """Lotse opens a report thread (no trigger: Lotse is an agent)."""
    created = await services.conversation.create_thread(
        world.principal("lotse"),
        world.channels[channel].id,
        title=None,
        first_message=draft(cid, "Nightly report\nall green"),
    )
    return created.thread.id


def kinds(events: Sequence[Event]) -> list[str]:
    return [e.type.value for e in events]


def error_shape(error: DomainError) -> tuple[object, ...]:
    """Everything a client could see of an error (HTTP maps exactly these)."""
    errors = getattr(error, "errors", ())
    return (type(error), error.code, error.reason, str(error), tuple(errors))


@attrs.frozen
class WorldState:
    """What an agent message must leave untouched (or only extend by its own event)."""

    shared: list[Event]
    personal: dict[str, list[Event]]
    active: Run | None


async def world_state(services: Services, world: DemoWorld, thread_id: uuid.UUID) -> WorldState:
    active = await runs_of(services, thread_id)
    return WorldState(
        shared=await shared_events(services),
        personal=await personal_events(services, world),
        active=active[0] if active else None,
    )


# -- AG-01: agent messages never trigger ---------------------------------------------------


async def _prepare(services: Services, world: DemoWorld, where: str) -> uuid.UUID:
    """The thread of an AG-01 case, with its run where the case needs one."""
    if where == "allgemein":
        return main_thread(world, "allgemein")
    if where == "eskalation":
        return main_thread(world, "eskalation")
    if where == "running":
        run, _ = await started_run(services, world)
        return run.thread_id
    if where == "waiting":
        run, _ = await started_run(services, world)
        await services.runs.await_input(world.principal("lotse"), run.id)
        return run.thread_id
    if where == "queued":
        return (await queued_run(services, world, "allgemein", "lotse", "q-trigger")).thread_id
    if where == "texter-running":
        await post(services, world, "alex", main_thread(world, "allgemein"), "tt", "texter")
        run, _ = await start_delivered(services, world.principal("texter"))
        return run.thread_id
    if where in ("bulletin", "reports"):
        return await report_thread(services, world, where, f"rep-{where}")
    raise AssertionError(where)


#: (id, author, where, mentions, answers its own run with run_id)
AG01_CASES = [
    ("lotse-free-channel-no-mention", "lotse", "allgemein", (), False),
    ("lotse-mentions-lotse", "lotse", "allgemein", ("lotse",), False),
    ("lotse-mentions-texter", "lotse", "allgemein", ("texter",), False),
    ("lotse-mentions-both", "lotse", "allgemein", ("texter", "lotse"), False),
    ("texter-guest-mentions-lotse", "texter", "allgemein", ("lotse",), False),
    ("texter-guest-mentions-texter", "texter", "allgemein", ("texter",), False),
    ("lotse-own-running-run", "lotse", "running", (), False),
    ("lotse-own-running-run-mentions-lotse", "lotse", "running", ("lotse",), False),
    ("lotse-own-running-run-with-run-id", "lotse", "running", ("lotse",), True),
    ("lotse-own-waiting-run-mentions-lotse", "lotse", "waiting", ("lotse",), False),
    ("lotse-own-queued-run-mentions-lotse", "lotse", "queued", ("lotse",), False),
    ("texter-in-lotse-run-thread", "texter", "running", (), False),
    ("texter-in-lotse-run-thread-mentions-texter", "texter", "running", ("texter",), False),
    ("lotse-in-texter-run-thread-mentions-lotse", "lotse", "texter-running", ("lotse",), False),
    ("lotse-eskalation-main-mentions-lotse", "lotse", "eskalation", ("lotse",), False),
    ("lotse-own-bulletin-report-thread", "lotse", "bulletin", (), False),
    ("lotse-reports-mentions-lotse", "lotse", "reports", ("lotse",), False),
]

#: The same situations written by Alex: each would set something in motion, so the
#: agent cases above are meaningful. (id, where, mentions, expected trigger_state, reason)
AG01_HUMAN_CONTROLS = [
    ("free-channel", "allgemein", (), TriggerState.RECEIVED, None),
    ("mentions-lotse", "allgemein", ("lotse",), TriggerState.RECEIVED, None),
    ("guest-texter", "allgemein", ("texter",), TriggerState.RECEIVED, None),
    (
        "other-agent-in-run-thread",
        "running",
        ("texter",),
        TriggerState.FAILED,
        "run_active_other_agent",
    ),
    ("eskalation-mention", "eskalation", ("lotse",), TriggerState.RECEIVED, None),
    ("bulletin-thread", "bulletin", (), TriggerState.RECEIVED, None),
    ("reports-mention", "reports", ("lotse",), TriggerState.FAILED, "agent_not_allowed_here"),
]


class TestAG01_AgentMessagesNeverTrigger:  # noqa: N801 (the seed names the test)
    @pytest.mark.parametrize(
        ("author", "where", "mentions", "with_run_id"),
        [case[1:] for case in AG01_CASES],
        ids=[case[0] for case in AG01_CASES],
    )
    async def test_agent_message_sets_nothing_in_motion(
        self,
        services: Services,
        world: DemoWorld,
        author: str,
        where: str,
        mentions: tuple[str, ...],
        with_run_id: bool,
    ) -> None:
        thread_id = await _prepare(services, world, where)
        before = await world_state(services, world, thread_id)
        trigger_before = (
            await message(services, before.active.triggering_message_id) if before.active else None
        )
        run_id = before.active.id if with_run_id and before.active else None
        msg = await post(services, world, author, thread_id, "ag01", *mentions, run_id=run_id)

        assert (msg.origin, msg.kind, msg.trigger_state, msg.run_id) == (
            Origin.AGENT,
            MessageKind.TEXT,
            None,
            None,
        )
        stored = await message(services, msg.id)
        assert (stored.trigger_state, stored.trigger_state_reason, stored.version) == (
            None,
            None,
            1,
        )
        after = await world_state(services, world, thread_id)
        # Exactly the message's own event: no run anchor, no message.updated, no thread.
        new_shared = after.shared[len(before.shared) :]
        assert after.shared[: len(before.shared)] == before.shared
        assert [(e.type, e.resource_id) for e in new_shared] == [
            (EventType.MESSAGE_CREATED, msg.id)
        ]
        # No agent.invocation, no agent.followup, nothing personal for any agent.
        assert after.personal == before.personal
        # The active run (if any) is the same run with the same state and version.
        assert after.active == before.active
        if before.active is not None and trigger_before is not None:
            trigger_after = await message(services, before.active.triggering_message_id)
            assert trigger_after == trigger_before
        # Nothing was even considered: no agent.invoke denial is audited for anyone.
        for who in (author, *AGENTS):
            assert await denials(services, world.principal(who)) == []

    @pytest.mark.parametrize(
        ("where", "mentions", "state", "reason"),
        [case[1:] for case in AG01_HUMAN_CONTROLS],
        ids=[case[0] for case in AG01_HUMAN_CONTROLS],
    )
    async def test_control_the_same_message_from_alex_acts(
        self,
        services: Services,
        world: DemoWorld,
        where: str,
        mentions: tuple[str, ...],
        state: TriggerState,
        reason: str | None,
    ) -> None:
        thread_id = await _prepare(services, world, where)
        before = await world_state(services, world, thread_id)
        msg = await post(services, world, "alex", thread_id, "control", *mentions)
        stored = await message(services, msg.id)
        assert (stored.trigger_state, stored.trigger_state_reason) == (state, reason)
        after = await world_state(services, world, thread_id)
        assert len(after.shared) > len(before.shared) + 1

    async def test_many_agent_messages_in_a_row_stay_quiet(
        self, services: Services, world: DemoWorld
    ) -> None:
        # An agent answering an agent answering an agent: no loop can start (T-AI-07).
        thread_id = main_thread(world, "allgemein")
        before = await world_state(services, world, thread_id)
        for i in range(6):
            author, other = ("lotse", "texter") if i % 2 == 0 else ("texter", "lotse")
            await post(services, world, author, thread_id, f"loop-{i}", other)
        after = await world_state(services, world, thread_id)
        assert kinds(after.shared[len(before.shared) :]) == ["message.created"] * 6
        assert after.personal == before.personal
        assert after.active is None


# -- AG-26: agents without write -------------------------------------------------------------


class TestAG26_AgentWithoutWrite:  # noqa: N801 (the seed names the test)
    async def _kampagnen_thread(self, services: Services, world: DemoWorld) -> uuid.UUID:
        created = await services.conversation.create_thread(
            world.principal("robin"),
            world.channels["kampagnen"].id,
            title="Launch",
            first_message=draft("k-open", "planning"),
        )
        return created.thread.id

    async def test_without_read_not_found_like_unknown_ids(
        self, services: Services, world: DemoWorld
    ) -> None:
        lotse = world.principal("lotse")
        kampagnen_thread = await self._kampagnen_thread(services, world)
        before = await shared_events(services)
        for thread_id in (kampagnen_thread, main_thread(world, "kampagnen")):
            with pytest.raises(AccessDenied) as denied:
                await services.conversation.create_message(lotse, thread_id, draft("w1"))
            with pytest.raises(NotFound) as unknown:
                await services.conversation.create_message(lotse, uuid.uuid4(), draft("w1"))
            assert error_shape(denied.value)[1:] == error_shape(unknown.value)[1:]
            assert (denied.value.code, denied.value.reason) == ("not_found", None)
        with pytest.raises(AccessDenied) as thread_denied:
            await services.conversation.create_thread(
                lotse, world.channels["ideas"].id, title="Report", first_message=draft("w2")
            )
        with pytest.raises(NotFound) as unknown_channel:
            await services.conversation.create_thread(
                lotse, uuid.uuid4(), title="Report", first_message=draft("w2")
            )
        assert error_shape(thread_denied.value)[1:] == error_shape(unknown_channel.value)[1:]
        assert await shared_events(services) == before
        assert await stored_by_client_id(services, lotse, "w1") is None
        assert await stored_by_client_id(services, lotse, "w2") is None
        assert await denials(services, lotse) == [
            ("message.create", "no_grant", 2),
            ("thread.create", "no_grant", 1),
        ]

    async def test_read_only_is_forbidden_level_insufficient(
        self, services: Services, world: DemoWorld
    ) -> None:
        robin, lotse = world.principal("robin"), world.principal("lotse")
        kampagnen_thread = await self._kampagnen_thread(services, world)
        await services.admin.create_grant(
            robin,
            principal_id=lotse.id,
            resource_kind=ResourceKind.SPACE,
            resource_id=world.spaces["marketing"].id,
            level=Level.READ,
        )
        before = await shared_events(services)
        seq_before = await latest_seq(services, world, kampagnen_thread)
        for attempt in range(2):
            with pytest.raises(AccessDenied) as denied:
                await services.conversation.create_message(
                    lotse, kampagnen_thread, draft(f"r{attempt}")
                )
            assert (denied.value.code, denied.value.reason) == ("forbidden", "level_insufficient")
            with pytest.raises(AccessDenied) as thread_denied:
                await services.conversation.create_thread(
                    lotse, world.channels["ideas"].id, title="r", first_message=draft(f"t{attempt}")
                )
            assert (thread_denied.value.code, thread_denied.value.reason) == (
                "forbidden",
                "level_insufficient",
            )
        assert await shared_events(services) == before
        assert await latest_seq(services, world, kampagnen_thread) == seq_before
        # One aggregated entry per principal, action and reason.
        assert await denials(services, lotse) == [
            ("message.create", "level_insufficient", 2),
            ("thread.create", "level_insufficient", 2),
        ]

    async def test_archived_channel_refuses_its_operator(
        self, services: Services, world: DemoWorld
    ) -> None:
        lotse = world.principal("lotse")
        await services.admin.archive_channel(
            world.principal("robin"), world.channels["allgemein"].id
        )
        before = await shared_events(services)
        with pytest.raises(AccessDenied) as denied:
            await services.conversation.create_message(
                lotse, main_thread(world, "allgemein"), draft("arch")
            )
        assert (denied.value.code, denied.value.reason) == ("channel_read_only", "channel_archived")
        with pytest.raises(AccessDenied) as thread_denied:
            await services.conversation.create_thread(
                lotse, world.channels["allgemein"].id, title="x", first_message=draft("arch-t")
            )
        assert thread_denied.value.code == "channel_read_only"
        assert await shared_events(services) == before
        assert await denials(services, lotse) == [
            ("message.create", "channel_archived", 1),
            ("thread.create", "channel_archived", 1),
        ]

    async def test_grant_of_another_space_gives_nothing_here(
        self, services: Services, world: DemoWorld
    ) -> None:
        # Texter has write on Support/Allgemein only: Eskalation and Reports stay hidden.
        texter = world.principal("texter")
        for thread_id in (
            main_thread(world, "eskalation"),
            await report_thread(services, world, "reports", "rep"),
        ):
            with pytest.raises(AccessDenied) as denied:
                await services.conversation.create_message(texter, thread_id, draft("x"))
            assert denied.value.code == "not_found"


# -- writing with a grant or as operator --------------------------------------------------


class TestAgentWritesWithGrantOrAsOperator:
    async def test_operator_rule_and_report_grant(
        self, services: Services, world: DemoWorld
    ) -> None:
        lotse = world.principal("lotse")
        answer = await post(services, world, "lotse", main_thread(world, "allgemein"), "op")
        assert (answer.origin, answer.author_id) == (Origin.AGENT, lotse.id)
        thread_id = await report_thread(services, world, "reports", "rep-1")
        follow = await post(services, world, "lotse", thread_id, "rep-2")
        assert follow.thread_seq == 2

    async def test_report_channel_needs_the_grant(
        self, services: Services, world: DemoWorld
    ) -> None:
        robin, lotse = world.principal("robin"), world.principal("lotse")
        async with services.uow() as uow:
            grants = await uow.grants.for_principal(lotse.id)
        (reports_grant,) = [g for g in grants if g.resource_id == world.channels["reports"].id]
        await services.admin.delete_grant(robin, reports_grant.id)
        # Operator mode none: being Support's default operator gives Lotse nothing here.
        with pytest.raises(AccessDenied) as denied:
            await services.conversation.create_thread(
                lotse, world.channels["reports"].id, title="r", first_message=draft("r")
            )
        assert denied.value.code == "not_found"

    async def test_agent_grant_is_capped_at_write(
        self, services: Services, world: DemoWorld
    ) -> None:
        robin, lotse = world.principal("robin"), world.principal("lotse")
        await services.admin.create_grant(
            robin,
            principal_id=lotse.id,
            resource_kind=ResourceKind.SPACE,
            resource_id=world.spaces["marketing"].id,
            level=Level.TRIGGER,
        )
        thread_id = main_thread(world, "kampagnen")
        async with services.uow() as uow:
            target = await thread_target(uow, thread_id)
            level = effective_level(lotse, target, await uow.grants.for_principal(lotse.id))
        assert level is Level.WRITE
        written = await post(services, world, "lotse", thread_id, "cap", "texter")
        assert (await message(services, written.id)).trigger_state is None
        assert await runs_of(services, thread_id) == []

    async def test_guest_answers_its_run_until_the_grant_is_revoked(
        self, services: Services, world: DemoWorld
    ) -> None:
        robin, texter = world.principal("robin"), world.principal("texter")
        created = await services.conversation.create_thread(
            world.principal("alex"),
            world.channels["allgemein"].id,
            title="Copy",
            first_message=draft("g-open", mentions=(texter.id,)),
        )
        thread_id = created.thread.id
        run, _ = await start_delivered(services, texter)
        assert (run.thread_id, run.agent_id) == (thread_id, texter.id)
        answer = await post(services, world, "texter", thread_id, "g1", run_id=run.id)
        assert (answer.origin, answer.run_id) == (Origin.AGENT, None)
        async with services.uow() as uow:
            grants = await uow.grants.for_principal(texter.id)
        (allgemein,) = [g for g in grants if g.resource_id == world.channels["allgemein"].id]
        await services.admin.delete_grant(robin, allgemein.id)
        with pytest.raises(AccessDenied) as denied:
            await post(services, world, "texter", thread_id, "g2", run_id=run.id)
        assert denied.value.code == "not_found"
        assert await stored_by_client_id(services, texter, "g2") is None
        assert (await get_run(services, run.id)).state is RunState.RUNNING

    async def test_main_thread_answer_follows_the_channel_operator(
        self, services: Services, world: DemoWorld
    ) -> None:
        lotse = world.principal("lotse")
        thread_id = main_thread(world, "eskalation")
        await post(services, world, "alex", thread_id, "e-open", "lotse")
        run, _ = await start_delivered(services, lotse)
        assert run.thread_id == thread_id
        await post(services, world, "lotse", thread_id, "e1", run_id=run.id)
        await services.admin.set_operator(
            world.principal("robin"),
            world.channels["eskalation"].id,
            mode=OperatorMode.AGENT,
            operator_id=world.principal("texter").id,
        )
        seq = await latest_seq(services, world, thread_id)
        with pytest.raises(AccessDenied) as denied:
            await post(services, world, "lotse", thread_id, "e2", run_id=run.id)
        assert denied.value.code == "not_found"
        assert await latest_seq(services, world, thread_id) == seq

    async def test_fixed_operator_keeps_its_thread_and_the_new_operator_gets_only_main(
        self, services: Services, world: DemoWorld
    ) -> None:
        texter = world.principal("texter")
        thread_id = await report_thread(services, world, "eskalation", "esk-rep")
        await services.admin.set_operator(
            world.principal("robin"),
            world.channels["eskalation"].id,
            mode=OperatorMode.AGENT,
            operator_id=texter.id,
        )
        kept = await post(services, world, "lotse", thread_id, "esk-2")
        assert kept.thread_seq == 2
        await post(services, world, "texter", main_thread(world, "eskalation"), "t-main")
        # The channel's operator writes in the main thread, never in a thread that has
        # another fixed operator.
        with pytest.raises(AccessDenied) as denied:
            await post(services, world, "texter", thread_id, "t-thread")
        assert denied.value.code == "not_found"


# -- announcements --------------------------------------------------------------------------


class TestReport_NewThreadPerReport:  # noqa: N801 (the seed names the test)
    @pytest.mark.parametrize("title", ["Nightly report", None], ids=["titled", "untitled"])
    async def test_report_thread(
        self, services: Services, world: DemoWorld, title: str | None
    ) -> None:
        lotse = world.principal("lotse")
        before = await world_state(services, world, main_thread(world, "allgemein"))
        report = draft("rep-1", "Nightly report\nall green")
        created = await services.conversation.create_thread(
            lotse, world.channels["reports"].id, title=title, first_message=report
        )
        thread, first = created.thread, created.message
        assert not created.replayed
        assert (thread.title, thread.title_source) == ("Nightly report", TitleSource.AUTO)
        assert (thread.operator_agent_id, thread.created_by) == (None, lotse.id)
        assert (first.origin, first.thread_seq, first.trigger_state, first.run_id) == (
            Origin.AGENT,
            1,
            None,
            None,
        )
        after = await world_state(services, world, main_thread(world, "allgemein"))
        assert [(e.type, e.resource_id) for e in after.shared[len(before.shared) :]] == [
            (EventType.THREAD_CREATED, thread.id),
            (EventType.MESSAGE_CREATED, first.id),
        ]
        assert after.personal == before.personal
        assert await runs_of(services, thread.id) == []
        replay = await services.conversation.create_thread(
            lotse, world.channels["reports"].id, title=title, first_message=report
        )
        assert replay.replayed
        assert (replay.thread.id, replay.message) == (thread.id, first)
        assert await shared_events(services) == after.shared

    async def test_bulletin_report_thread_gets_the_operator(
        self, services: Services, world: DemoWorld
    ) -> None:
        lotse = world.principal("lotse")
        thread_id = await report_thread(services, world, "bulletin", "b-rep")
        thread = await services.conversation.get_thread(lotse, thread_id)
        assert (thread.operator_agent_id, thread.title_source) == (lotse.id, TitleSource.AUTO)
        assert await runs_of(services, thread_id) == []


class TestReport_FixedThread:  # noqa: N801 (the seed names the test)
    async def test_three_reports_into_one_thread(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = await report_thread(services, world, "bulletin", "fixed-0")
        before = await world_state(services, world, thread_id)
        reports = [
            await post(services, world, "lotse", thread_id, f"fixed-{i}", content=f"report {i}")
            for i in range(1, 4)
        ]
        assert [m.thread_seq for m in reports] == [2, 3, 4]
        assert {(m.origin, m.trigger_state) for m in reports} == {(Origin.AGENT, None)}
        after = await world_state(services, world, thread_id)
        assert kinds(after.shared[len(before.shared) :]) == ["message.created"] * 3
        assert after.personal == before.personal
        assert after.active is None


class TestReport_HumanReplyTriggersNormally:  # noqa: N801 (the seed names the test)
    async def test_reply_in_bulletin_report_thread_triggers_lotse(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = await report_thread(services, world, "bulletin", "b-rep")
        reply = await post(services, world, "alex", thread_id, "reply")
        (run,) = await runs_of(services, thread_id)
        assert (run.agent_id, run.triggering_message_id, run.state) == (
            world.principal("lotse").id,
            reply.id,
            RunState.QUEUED,
        )
        assert (await message(services, reply.id)).trigger_state is TriggerState.RECEIVED
        (delivery,) = await invocations(services, world.principal("lotse"))
        assert delivery.event.payload["thread_id"] == str(thread_id)

    async def test_reply_in_reports_thread_without_operator(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id = await report_thread(services, world, "reports", "r-rep")
        quiet = await post(services, world, "alex", thread_id, "quiet")
        assert (await message(services, quiet.id)).trigger_state is None
        assert await runs_of(services, thread_id) == []
        loud = await post(services, world, "alex", thread_id, "loud", "lotse")
        stored = await message(services, loud.id)
        assert (stored.trigger_state, stored.trigger_state_reason) == (
            TriggerState.FAILED,
            "agent_not_allowed_here",
        )
        assert await runs_of(services, thread_id) == []
        assert await invocations(services, world.principal("lotse")) == []


# -- rate limit, origin, forging, reopening ----------------------------------------------------


class TestAgentMessage_RateLimitClass:  # noqa: N801 (the seed names the test)
    @pytest.fixture
    def settings(self) -> Settings:
        return Settings(rl_message_burst=2, rl_message_per_minute=6)

    async def test_agent_has_its_own_rl_message_bucket(
        self, services: Services, world: DemoWorld, clock: FakeClock
    ) -> None:
        lotse = world.principal("lotse")
        thread_id = main_thread(world, "allgemein")
        # A report thread and an answer both cost a token of Lotse's rl.message.
        await report_thread(services, world, "reports", "rl-0")
        await post(services, world, "lotse", thread_id, "rl-1")
        seq = await latest_seq(services, world, thread_id)
        with pytest.raises(RateLimited) as limited:
            await post(services, world, "lotse", thread_id, "rl-2")
        assert limited.value.code == "rate_limited"
        assert limited.value.retry_after == 10
        with pytest.raises(RateLimited):
            await services.conversation.create_thread(
                lotse, world.channels["reports"].id, title=None, first_message=draft("rl-3")
            )
        assert await stored_by_client_id(services, lotse, "rl-2") is None
        assert await latest_seq(services, world, thread_id) == seq
        # At the same moment Alex and Texter still write: their buckets are their own.
        await post(services, world, "alex", main_thread(world, "eskalation"), "rl-a")
        await post(services, world, "texter", thread_id, "rl-t")
        clock.advance(limited.value.retry_after)
        again = await post(services, world, "lotse", thread_id, "rl-2")
        assert again.origin is Origin.AGENT

    async def test_refused_answer_costs_no_token(
        self, services: Services, world: DemoWorld
    ) -> None:
        lotse = world.principal("lotse")
        run, _ = await started_run(services, world)
        await services.runs.finish(lotse, run.id, RunState.COMPLETED, None)
        for i in range(3):
            with pytest.raises(Conflict):
                await post(services, world, "lotse", run.thread_id, f"late-{i}", run_id=run.id)
        for i in range(2):
            await post(services, world, "lotse", run.thread_id, f"late-{i}")
        with pytest.raises(RateLimited):
            await post(services, world, "lotse", run.thread_id, "late-2")


class TestAgentMessage_OriginEverywhere:  # noqa: N801 (the seed names the test)
    async def test_origin_and_author_in_every_representation(
        self, services: Services, world: DemoWorld
    ) -> None:
        lotse, alex = world.principal("lotse"), world.principal("alex")
        run, _ = await started_run(services, world)
        thread_id = run.thread_id
        author = {"id": str(lotse.id), "kind": "agent", "handle": "lotse"}
        posted = await services.conversation.create_message(
            lotse, thread_id, draft("o1", "the answer", run_id=run.id)
        )
        replay = await services.conversation.create_message(
            lotse, thread_id, draft("o1", "the answer", run_id=run.id)
        )
        assert (posted.replayed, replay.replayed) == (False, True)
        documents: list[dict[str, Any]] = [
            message_document(posted.message, posted.author),
            message_document(replay.message, replay.author),
        ]
        events = [
            e
            for e in await shared_events(services)
            if e.type is EventType.MESSAGE_CREATED and e.resource_id == posted.message.id
        ]
        (stored_event,) = events
        assert (stored_event.actor_id, stored_event.actor_kind) == (lotse.id, "agent")
        documents.append(stored_event.payload["message"])
        alex_feed = await services.conversation.list_events(alex)
        (alex_event,) = [e for e in alex_feed.events if e.resource_id == posted.message.id]
        documents.append(alex_event.payload["message"])
        page = await services.conversation.list_messages(alex, thread_id)
        (listed,) = [m for m in page.messages if m.id == posted.message.id]
        documents.append(message_document(listed, page.authors[listed.author_id]))
        for doc in documents:
            assert_no_null(doc)
            assert (doc["origin"], doc["kind"], doc["author"]) == ("agent", "text", author)
            assert "run_id" not in doc
            assert "trigger_state" not in doc
        assert documents[0] == documents[1] == documents[2] == documents[3] == documents[4]
        assert_no_null(stored_event.payload)

    async def test_origin_follows_the_principal_not_the_author_field(
        self, services: Services, world: DemoWorld
    ) -> None:
        # The service takes no origin from a request: the draft has no such member.
        names = {f.name for f in attrs.fields(MessageDraft)}
        assert not names & {"origin", "system_code", "kind", "author_id"}
        for handle, origin in (("lotse", Origin.AGENT), ("alex", Origin.HUMAN)):
            msg = await post(services, world, handle, main_thread(world, "eskalation"), "x")
            assert msg.origin is origin


class TestAgentMessage_CannotForgeOriginOrKind:  # noqa: N801 (the seed names the test)
    @pytest.mark.parametrize("author", ["lotse", "alex"])
    @pytest.mark.parametrize("kind", ["system", "run"])
    async def test_server_kinds_are_refused(
        self, services: Services, world: DemoWorld, author: str, kind: str
    ) -> None:
        who = world.principal(author)
        thread_id = main_thread(world, "eskalation")
        with pytest.raises(ValidationFailed) as failed:
            await services.conversation.create_message(who, thread_id, draft("f1"), kind=kind)
        assert failed.value.code == "validation_failed"
        assert [(e.pointer, e.code) for e in failed.value.errors] == [("/kind", "invalid_enum")]
        with pytest.raises(ValidationFailed) as first:
            await services.conversation.create_thread(
                who, world.channels["reports"].id, title="t", first_message=draft("f2"), kind=kind
            )
        assert [(e.pointer, e.code) for e in first.value.errors] == [
            ("/first_message/kind", "invalid_enum")
        ]
        assert await shared_events(services) == []
        assert await stored_by_client_id(services, who, "f1") is None
        assert await stored_by_client_id(services, who, "f2") is None
        assert await latest_seq(services, world, thread_id) == 0

    async def test_text_kind_is_accepted(self, services: Services, world: DemoWorld) -> None:
        posted = await services.conversation.create_message(
            world.principal("lotse"), main_thread(world, "allgemein"), draft("k"), kind="text"
        )
        assert (posted.message.kind, posted.message.origin) == (MessageKind.TEXT, Origin.AGENT)


class TestAgentMessage_ReopensDoneThread:  # noqa: N801 (the seed names the test)
    async def test_report_thread_reopens(self, services: Services, world: DemoWorld) -> None:
        lotse = world.principal("lotse")
        thread_id = await report_thread(services, world, "reports", "rep")
        await services.conversation.close_thread(world.principal("alex"), thread_id)
        before = await world_state(services, world, thread_id)
        answer = await post(services, world, "lotse", thread_id, "again")
        new = (await world_state(services, world, thread_id)).shared[len(before.shared) :]
        assert kinds(new) == ["thread.reopened", "message.created", "message.created"]
        line = new[1].payload["message"]
        assert (line["origin"], line["kind"], line["content"], line["author"]["id"]) == (
            "system",
            "system",
            SYSTEM_REOPENED_CONTENT,
            str(lotse.id),
        )
        assert all(e.actor_id == lotse.id for e in new)
        assert new[2].resource_id == answer.id
        assert (answer.thread_seq, answer.origin) == (3, Origin.AGENT)
        thread = await services.conversation.get_thread(lotse, thread_id)
        assert (thread.state, thread.latest_seq) == (ThreadState.OPEN, 3)
        assert await runs_of(services, thread_id) == []
        assert await personal_events(services, world) == before.personal

    async def test_answer_with_run_id_reopens_and_leaves_the_run(
        self, services: Services, world: DemoWorld
    ) -> None:
        run, _ = await started_run(services, world)
        await services.conversation.close_thread(world.principal("alex"), run.thread_id)
        answer = await post(services, world, "lotse", run.thread_id, "again", run_id=run.id)
        page = await services.conversation.list_messages(world.principal("alex"), run.thread_id)
        assert [(m.origin, m.kind) for m in page.messages[-2:]] == [
            (Origin.SYSTEM, MessageKind.SYSTEM),
            (Origin.AGENT, MessageKind.TEXT),
        ]
        assert page.messages[-1].id == answer.id
        assert await get_run(services, run.id) == run


# -- run_id on answers ------------------------------------------------------------------------


class TestAnswer_RunIDActiveRun:  # noqa: N801 (the seed names the test)
    @pytest.mark.parametrize("state", ["running", "waiting_input", "queued-other-thread"])
    async def test_answer_names_an_active_own_run(
        self, services: Services, world: DemoWorld, state: str
    ) -> None:
        lotse = world.principal("lotse")
        seen: dict[uuid.UUID, MessagePosted] = {}

        async def spy(uow: UnitOfWork, posted: MessagePosted) -> None:
            seen[posted.message.id] = posted

        services.bus.subscribe(MessagePosted, spy)
        if state == "queued-other-thread":
            # Lotse runs in Allgemein, and a second run of Lotse waits queued in Eskalation.
            await started_run(services, world)
            run = await queued_run(services, world, "eskalation", "lotse", "esk")
        else:
            run, _ = await started_run(services, world)
            if state == "waiting_input":
                run = (await services.runs.await_input(lotse, run.id)).run
        trigger = await message(services, run.triggering_message_id)
        before = await world_state(services, world, run.thread_id)

        posted = await services.conversation.create_message(
            lotse, run.thread_id, draft("ans", "the answer", run_id=run.id)
        )

        assert not posted.replayed
        assert (posted.message.run_id, posted.message.origin) == (None, Origin.AGENT)
        assert "run_id" not in message_document(posted.message, posted.author)
        assert (await message(services, posted.message.id)).run_id is None
        event = seen[posted.message.id]
        assert (event.run_id, event.message.origin, event.message.kind, event.author.id) == (
            run.id,
            Origin.AGENT,
            MessageKind.TEXT,
            lotse.id,
        )
        assert await get_run(services, run.id) == run
        assert await message(services, trigger.id) == trigger
        after = await world_state(services, world, run.thread_id)
        assert [(e.type, e.resource_id) for e in after.shared[len(before.shared) :]] == [
            (EventType.MESSAGE_CREATED, posted.message.id)
        ]
        assert after.personal == before.personal

    async def test_messages_of_people_carry_no_run_id(
        self, services: Services, world: DemoWorld
    ) -> None:
        seen: list[MessagePosted] = []

        async def spy(uow: UnitOfWork, posted: MessagePosted) -> None:
            seen.append(posted)

        services.bus.subscribe(MessagePosted, spy)
        trigger = await post(services, world, "alex", main_thread(world, "allgemein"), "t")
        texts = [p for p in seen if p.message.kind is MessageKind.TEXT]
        assert [(p.message.id, p.message.origin, p.run_id) for p in texts] == [
            (trigger.id, Origin.HUMAN, None)
        ]

    async def test_kind_run_anchor_is_published_with_its_run(
        self, services: Services, world: DemoWorld
    ) -> None:
        seen: list[MessagePosted] = []

        async def spy(uow: UnitOfWork, posted: MessagePosted) -> None:
            seen.append(posted)

        services.bus.subscribe(MessagePosted, spy)
        await post(services, world, "alex", main_thread(world, "allgemein"), "t")
        (run,) = await runs_of(services, main_thread(world, "allgemein"))
        anchors = [
            (p.message.kind, p.message.origin, p.run_id)
            for p in seen
            if p.message.kind is MessageKind.RUN
        ]
        assert anchors == [(MessageKind.RUN, Origin.SYSTEM, run.id)]


class TestAnswer_RunIDMismatch:  # noqa: N801 (the seed names the test)
    async def test_every_foreign_run_answers_alike(
        self, services: Services, world: DemoWorld
    ) -> None:
        lotse, alex = world.principal("lotse"), world.principal("alex")
        here = main_thread(world, "allgemein")
        # Lotse's own active run in another thread, and Texter's active guest run here.
        own_elsewhere = await queued_run(services, world, "eskalation", "lotse", "esk")
        await post(services, world, "alex", here, "guest", "texter")
        texter_run, _ = await start_delivered(services, world.principal("texter"))
        assert texter_run.thread_id == here
        unknown = services.ids.new_id()
        assert unknown.version == 7

        before = await world_state(services, world, here)
        seq = await latest_seq(services, world, here)
        attempts = [
            (lotse, unknown),
            (lotse, own_elsewhere.id),
            (lotse, texter_run.id),
            (alex, texter_run.id),
        ]
        shapes = []
        for author, run_id in attempts:
            with pytest.raises(ValidationFailed) as failed:
                await services.conversation.create_message(
                    author, here, draft("mm", "answer", run_id=run_id)
                )
            assert [(e.pointer, e.code) for e in failed.value.errors] == [
                ("/run_id", "run_mismatch")
            ]
            shapes.append(error_shape(failed.value))
            assert await stored_by_client_id(services, author, "mm") is None
        assert shapes[0] == shapes[1] == shapes[2] == shapes[3]
        assert await latest_seq(services, world, here) == seq
        assert await world_state(services, world, here) == before
        assert await get_run(services, own_elsewhere.id) == own_elsewhere
        assert await get_run(services, texter_run.id) == texter_run

    async def test_ownership_before_state(self, services: Services, world: DemoWorld) -> None:
        # An ended run of another agent is a mismatch, never run_not_active.
        here = main_thread(world, "allgemein")
        await post(services, world, "alex", here, "guest", "texter")
        texter_run, _ = await start_delivered(services, world.principal("texter"))
        await services.runs.finish(
            world.principal("texter"), texter_run.id, RunState.COMPLETED, None
        )
        with pytest.raises(ValidationFailed) as failed:
            await post(services, world, "lotse", here, "late", run_id=texter_run.id)
        assert [(e.pointer, e.code) for e in failed.value.errors] == [("/run_id", "run_mismatch")]

    async def test_ended_own_run_of_another_thread_is_a_mismatch(
        self, services: Services, world: DemoWorld
    ) -> None:
        lotse = world.principal("lotse")
        run, _ = await started_run(services, world)
        await services.runs.finish(lotse, run.id, RunState.COMPLETED, None)
        with pytest.raises(ValidationFailed) as failed:
            await post(
                services, world, "lotse", main_thread(world, "eskalation"), "x", run_id=run.id
            )
        assert [(e.pointer, e.code) for e in failed.value.errors] == [("/run_id", "run_mismatch")]


class TestAnswer_RunIDEndedRun:  # noqa: N801 (the seed names the test)
    @pytest.mark.parametrize(
        "how", ["completed", "failed", "cancelled", "cancelled-while-queued", "stale"]
    )
    async def test_ended_own_run_is_run_not_active(
        self, services: Services, world: DemoWorld, clock: FakeClock, how: str
    ) -> None:
        lotse, alex = world.principal("lotse"), world.principal("alex")
        if how == "cancelled-while-queued":
            run = await queued_run(services, world, "allgemein", "lotse", "q")
            await services.runs.cancel(alex, run.id)
        else:
            run, _ = await started_run(services, world)
            if how == "completed":
                await services.runs.finish(lotse, run.id, RunState.COMPLETED, None)
            elif how == "failed":
                await services.runs.finish(lotse, run.id, RunState.FAILED, "runtime_error")
            elif how == "cancelled":
                await services.runs.cancel(alex, run.id)
                await services.runs.finish(lotse, run.id, RunState.CANCELLED, "user_cancelled")
            else:
                clock.advance(services.settings.stall_after + timedelta(seconds=1))
                assert (await services.runs.run_jobs_once())["stall_check"] == 1
        ended = await get_run(services, run.id)
        assert not ended.state.active
        before = await world_state(services, world, run.thread_id)
        seq = await latest_seq(services, world, run.thread_id)

        with pytest.raises(Conflict) as conflict:
            await post(services, world, "lotse", run.thread_id, "late", run_id=run.id)
        assert (conflict.value.code, conflict.value.reason) == ("conflict", "run_not_active")
        assert await stored_by_client_id(services, lotse, "late") is None
        assert await latest_seq(services, world, run.thread_id) == seq
        assert await world_state(services, world, run.thread_id) == before

        # The adapter sends the same answer again without run_id: a normal agent message.
        again = await post(services, world, "lotse", run.thread_id, "late")
        assert (again.origin, again.run_id, again.thread_seq) == (Origin.AGENT, None, seq + 1)
        assert await get_run(services, run.id) == ended


class TestAnswer_ReplayAfterRunEnded:  # noqa: N801 (the seed names the test)
    async def test_replay_returns_the_original(self, services: Services, world: DemoWorld) -> None:
        lotse = world.principal("lotse")
        run, _ = await started_run(services, world)
        request = draft("a1", "final answer", run_id=run.id)
        original = await services.conversation.create_message(lotse, run.thread_id, request)
        await services.runs.finish(lotse, run.id, RunState.COMPLETED, None)
        events = await shared_events(services)

        replay = await services.conversation.create_message(lotse, run.thread_id, request)
        assert replay.replayed
        assert replay.message == original.message
        # run_id is not part of the digest: without it the retry replays as well.
        bare = await services.conversation.create_message(
            lotse, run.thread_id, draft("a1", "final answer")
        )
        assert bare.replayed
        assert bare.message == original.message
        assert await shared_events(services) == events
        with pytest.raises(IdempotencyConflict):
            await services.conversation.create_message(
                lotse, run.thread_id, draft("a1", "another answer", run_id=run.id)
            )


class TestAnswer_FirstMessageRunIDRejected:  # noqa: N801 (the seed names the test)
    @pytest.mark.parametrize("channel", ["reports", "allgemein"])
    async def test_first_message_cannot_name_a_run(
        self, services: Services, world: DemoWorld, channel: str
    ) -> None:
        lotse = world.principal("lotse")
        run, _ = await started_run(services, world)
        before = await world_state(services, world, run.thread_id)
        with pytest.raises(ValidationFailed) as failed:
            await services.conversation.create_thread(
                lotse,
                world.channels[channel].id,
                title="Report",
                first_message=draft("first", "report", run_id=run.id),
            )
        assert [(e.pointer, e.code) for e in failed.value.errors] == [
            ("/first_message/run_id", "run_mismatch")
        ]
        assert await stored_by_client_id(services, lotse, "first") is None
        assert await world_state(services, world, run.thread_id) == before
        assert await get_run(services, run.id) == run

    async def test_person_first_message_with_run_id(
        self, services: Services, world: DemoWorld
    ) -> None:
        with pytest.raises(ValidationFailed) as failed:
            await services.conversation.create_thread(
                world.principal("alex"),
                world.channels["bulletin"].id,
                title="Q",
                first_message=draft("first", run_id=uuid.uuid4()),
            )
        assert [(e.pointer, e.code) for e in failed.value.errors] == [
            ("/first_message/run_id", "run_mismatch")
        ]
        assert await shared_events(services) == []
