"""Run defects of issue 16 item 8, on the memory adapter and on PostgreSQL.

- The run document lists for each reader only the follow-ups whose messages it may see
  (the run's agent sees them all): GET, the cancel answer and the 409 ``current``.
- The consumed start token never resumes a waiting run, also when no follow-up came:
  only the token of a follow-up delivered while the run waits does.
- A page of the agent feed is empty only when nothing deliverable is left after the
  cursor, however many undeliverable events fill the pages before it; long-poll and
  stream read the same.
"""

from __future__ import annotations

import uuid

import pytest

from tests.integration.test_followups import extend, set_mode
from tests.support.scenario import (
    active_run,
    denials,
    main_thread,
    message,
    post,
    start_delivered,
)
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.errors import BaseVersionConflict, InvalidToken
from turnkeeper.application.services.live_stream import Heartbeat
from turnkeeper.application.services.runs import Delivery, FollowupOp, run_document
from turnkeeper.application.settings import Settings
from turnkeeper.domain.events import EventType
from turnkeeper.domain.followups import FollowupState
from turnkeeper.domain.messaging import Message, TriggerState
from turnkeeper.domain.runs import Run, RunState
from turnkeeper.domain.world import OperatorMode

#: The page size of the feed tests: smaller than the undeliverable backlog.
PAGE = 2
#: Ended runs whose invocations stay in the agent's feed before the deliverable one.
ENDED_RUNS = 5


@pytest.fixture
def settings() -> Settings:
    """Pages (and stream reads) of `PAGE` events, fewer than the undeliverable backlog."""
    return Settings(page_default_limit=PAGE)


@pytest.fixture
async def ext(services: Services, world: DemoWorld) -> DemoWorld:
    """The demo world with Sam as a second person with trigger in Allgemein."""
    return await extend(services, world)


async def _running_with_followups(
    services: Services, world: DemoWorld
) -> tuple[uuid.UUID, uuid.UUID, uuid.UUID]:
    """Alex's running run with a public follow-up and one to Alex and Lotse, both Sam's.

    Returns:
        The run id, the public follow-up and the restricted follow-up.
    """
    await set_mode(services, world, "steer")
    thread_id = main_thread(world, "allgemein")
    await post(services, world, "alex", thread_id, "trigger", content="help")
    run, _ = await start_delivered(services, world.principal("lotse"))
    public = await post(services, world, "sam", thread_id, "public", content="also this")
    secret = await post(
        services,
        world,
        "sam",
        thread_id,
        "secret",
        content="between us",
        restricted_to=["alex", "lotse"],
    )
    return run.id, public.id, secret.id


class TestRunDocumentHidesRestrictedFollowups:
    async def test_each_reader_sees_the_followups_it_may_see(
        self, services: Services, ext: DemoWorld
    ) -> None:
        run_id, public, secret = await _running_with_followups(services, ext)

        async def shown(handle: str) -> set[str]:
            view = await services.runs.get(ext.principal(handle), run_id)
            return set(run_document(view)["followups"])

        everything = {str(public), str(secret)}
        assert await shown("lotse") == everything  # the run's agent
        assert await shown("alex") == everything  # the audience
        assert await shown("sam") == everything  # the author
        # Robin reads every thread (the owner) but is no member of the audience.
        assert await shown("robin") == {str(public)}

    async def test_the_cancel_answer_hides_them_too(
        self, services: Services, ext: DemoWorld
    ) -> None:
        run_id, public, _ = await _running_with_followups(services, ext)
        view = await services.runs.cancel(ext.principal("robin"), run_id)
        assert view.run.cancel_requested
        assert set(run_document(view)["followups"]) == {str(public)}

    async def test_the_agent_gets_them_all_in_the_conflict_current(
        self, services: Services, ext: DemoWorld
    ) -> None:
        run_id, public, secret = await _running_with_followups(services, ext)
        with pytest.raises(BaseVersionConflict) as conflict:
            await services.runs.patch(ext.principal("lotse"), run_id, 1, [])
        followups = conflict.value.current["followups"]
        assert isinstance(followups, dict)
        assert set(followups) == {str(public), str(secret)}


async def _run_versions(
    services: Services, world: DemoWorld, handle: str, run_id: uuid.UUID
) -> set[int]:
    """The versions of the run's ``run.state_changed`` events the reader may read."""
    reader = world.principal(handle)
    found: set[int] = set()
    after = 0
    while True:
        page = await services.conversation.list_events(reader, after=after)
        if not page.events:
            return found
        found |= {
            int(e.payload["version"])
            for e in page.events
            if e.type is EventType.RUN_STATE_CHANGED and e.resource_id == run_id
        }
        after = page.next_after


class TestRestrictedFollowupsLeaveNoTraceInTheFeed:
    """A change of a run made for restricted follow-ups alone is read by their audience.

    Its ``run.state_changed`` would otherwise tell every reader of the thread who wrote
    to the agent, and when, or when the agent took a hidden message into account.
    """

    async def test_the_acceptance_of_a_restricted_followup(
        self, services: Services, ext: DemoWorld
    ) -> None:
        run_id, _, _ = await _running_with_followups(services, ext)
        accepted = (await services.runs.get(ext.principal("lotse"), run_id)).run.version
        everything = await _run_versions(services, ext, "lotse", run_id)
        assert accepted in everything
        for handle in ("alex", "sam"):  # the audience and the author
            assert await _run_versions(services, ext, handle, run_id) == everything
        assert await _run_versions(services, ext, "robin", run_id) == everything - {accepted}

    async def test_the_agents_patch_of_restricted_followups_alone(
        self, services: Services, ext: DemoWorld
    ) -> None:
        run_id, public, secret = await _running_with_followups(services, ext)
        lotse = ext.principal("lotse")
        before = (await services.runs.get(lotse, run_id)).run.version
        hidden = await services.runs.patch(
            lotse, run_id, before, [FollowupOp(message_id=secret, value=FollowupState.ABSORBED)]
        )
        mixed = await services.runs.patch(
            lotse,
            run_id,
            hidden.run.version,
            [
                FollowupOp(message_id=public, value=FollowupState.ABSORBED),
                FollowupOp(message_id=secret, value=FollowupState.ABSORBED),
            ],
        )
        robin = await _run_versions(services, ext, "robin", run_id)
        assert hidden.run.version not in robin
        assert mixed.run.version in robin  # a public follow-up changed too
        assert {hidden.run.version, mixed.run.version} <= await _run_versions(
            services, ext, "alex", run_id
        )

    async def test_a_restricted_followup_refused_at_delivery(
        self, services: Services, ext: DemoWorld
    ) -> None:
        run_id, _, _ = await _running_with_followups(services, ext)
        lotse = ext.principal("lotse")
        await services.admin.set_agent_config(ext.principal("robin"), lotse.id, enabled=False)
        before = (await services.runs.get(lotse, run_id)).run.version
        await services.runs.poll(lotse)  # both deliveries refused: agent_disabled
        after = (await services.runs.get(lotse, run_id)).run.version
        refusals = set(range(before + 1, after + 1))
        assert len(refusals) == 2
        robin = await _run_versions(services, ext, "robin", run_id)
        assert len(refusals & robin) == 1  # the public follow-up's
        assert refusals <= await _run_versions(services, ext, "alex", run_id)


class TestNoFollowOnRunForAnAgentThatNoLongerAnswersThere:
    """A follow-on run is an acceptance: its agent must still be one the thread sets in motion.

    Lotse answers Allgemein's main thread as the channel's operator; when the operator
    changes to Texter while Lotse runs, Lotse can no longer read the thread, and a run of
    Lotse there would block Texter until the queued expiry.
    """

    @staticmethod
    async def _lotse_running_with_a_followup(
        services: Services, world: DemoWorld
    ) -> tuple[uuid.UUID, Run, Message]:
        """Alex's run of Lotse in Allgemein's main thread, running, and Alex's follow-up."""
        thread_id = main_thread(world, "allgemein")
        await post(services, world, "alex", thread_id, "trigger", content="export broken")
        run, _ = await start_delivered(services, world.principal("lotse"))
        followup = await post(services, world, "alex", thread_id, "more", content="and import")
        assert followup.trigger_state is not None
        return thread_id, run, followup

    async def test_an_operator_change_while_the_run_is_active(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id, run, followup = await self._lotse_running_with_a_followup(services, world)
        await services.admin.set_operator(
            world.principal("robin"),
            world.channels["allgemein"].id,
            mode=OperatorMode.AGENT,
            operator_id=world.principal("texter").id,
        )
        await services.runs.finish(world.principal("lotse"), run.id, RunState.COMPLETED, None)

        assert await active_run(services, thread_id) is None
        refused = await message(services, followup.id)
        assert (refused.trigger_state, refused.trigger_state_reason) == (
            TriggerState.FAILED,
            "access_revoked",
        )
        # Alex lost nothing: no denial of Alex's is recorded.
        assert await denials(services, world.principal("alex")) == []
        # The thread is free for its new operator.
        await post(services, world, "alex", thread_id, "again", content="still broken")
        opened = await active_run(services, thread_id)
        assert opened is not None
        assert opened.agent_id == world.principal("texter").id

    async def test_the_run_of_an_operator_that_stays_opens_as_before(
        self, services: Services, world: DemoWorld
    ) -> None:
        thread_id, run, followup = await self._lotse_running_with_a_followup(services, world)
        await services.runs.finish(world.principal("lotse"), run.id, RunState.COMPLETED, None)
        follow_on = await active_run(services, thread_id)
        assert follow_on is not None
        assert (follow_on.agent_id, follow_on.triggering_message_id) == (
            world.principal("lotse").id,
            followup.id,
        )


class TestStartTokenDoesNotResume:
    async def test_refused_when_no_followup_was_delivered(
        self, services: Services, ext: DemoWorld
    ) -> None:
        lotse = ext.principal("lotse")
        await post(services, ext, "alex", main_thread(ext, "allgemein"), "trigger")
        run, start_token = await start_delivered(services, lotse)
        await services.runs.await_input(lotse, run.id)

        with pytest.raises(InvalidToken) as refused:
            await services.runs.resume(lotse, run.id, start_token)

        assert (refused.value.code, refused.value.reason) == (
            "invocation_token_invalid",
            "superseded",
        )
        stored = await services.runs.get(lotse, run.id)
        assert stored.run.state is RunState.WAITING_INPUT

    async def test_an_answer_resumes_once(self, services: Services, ext: DemoWorld) -> None:
        lotse = ext.principal("lotse")
        thread_id = main_thread(ext, "allgemein")
        await set_mode(services, ext, "queue")
        await post(services, ext, "alex", thread_id, "trigger")
        run, _ = await start_delivered(services, lotse)
        await services.runs.await_input(lotse, run.id)
        await post(services, ext, "alex", thread_id, "answer", content="yes")
        page = await services.runs.poll(lotse)
        (answer,) = [d for d in page.deliveries if d.event.type is EventType.AGENT_FOLLOWUP]
        assert answer.invocation_token is not None
        resumed = await services.runs.resume(lotse, run.id, answer.invocation_token)
        assert resumed.run.state is RunState.RUNNING
        await services.runs.await_input(lotse, run.id)

        # The answer's token was consumed by its resume: the next question needs its own.
        with pytest.raises(InvalidToken) as refused:
            await services.runs.resume(lotse, run.id, answer.invocation_token)
        assert refused.value.reason == "superseded"


async def _backlog(services: Services, world: DemoWorld) -> uuid.UUID:
    """`ENDED_RUNS` cancelled queued runs of Lotse, then one that stays queued.

    Returns:
        The queued run.
    """
    thread_id = main_thread(world, "allgemein")
    alex = world.principal("alex")
    for n in range(ENDED_RUNS):
        posted = await post(services, world, "alex", thread_id, f"ended-{n}")
        run = await active_run(services, thread_id)
        assert run is not None
        assert run.triggering_message_id == posted.id
        await services.runs.cancel(alex, run.id)
    await post(services, world, "alex", thread_id, "wanted")
    queued = await active_run(services, thread_id)
    assert queued is not None
    assert queued.state is RunState.QUEUED
    return queued.id


def _invoked(deliveries: list[Delivery]) -> list[str]:
    return [
        str(d.event.payload["run_id"])
        for d in deliveries
        if d.event.type is EventType.AGENT_INVOCATION
    ]


class TestAgentFeedPagesPastUndeliverableEvents:
    async def test_the_first_page_holds_the_invocation(
        self, services: Services, world: DemoWorld
    ) -> None:
        wanted = await _backlog(services, world)
        lotse = world.principal("lotse")
        async with services.uow() as uow:
            backlog = await uow.agent_feed.read(lotse.id, 0, 1000)
        assert len(backlog) > PAGE  # the undeliverable events fill more than a page

        page = await services.runs.poll(lotse, after=0, limit=PAGE)

        assert _invoked(page.deliveries) == [str(wanted)]
        assert page.next_after <= backlog[-1].seq

    async def test_an_empty_page_means_nothing_is_left(
        self, services: Services, world: DemoWorld
    ) -> None:
        wanted = await _backlog(services, world)
        lotse = world.principal("lotse")
        first = await services.runs.poll(lotse, after=0, limit=PAGE)
        assert _invoked(first.deliveries) == [str(wanted)]
        await services.runs.start(lotse, wanted, first.deliveries[0].invocation_token or "")

        rest = await services.runs.poll(lotse, after=first.next_after, limit=PAGE)
        assert rest.deliveries == []
        again = await services.runs.poll(lotse, after=rest.next_after, limit=PAGE)
        assert (again.deliveries, again.next_after) == ([], rest.next_after)

    async def test_long_poll_and_stream_read_the_same(
        self, services: Services, world: DemoWorld
    ) -> None:
        wanted = await _backlog(services, world)
        lotse = world.principal("lotse")
        live = services.live
        polled = await live.wait_agent_events(lotse, after=0, limit=PAGE, wait=1.0)
        assert _invoked(polled.deliveries) == [str(wanted)]

        stream = await live.open_agent_events(lotse, after=0)
        async with stream:
            item = await anext(aiter(stream))
        assert not isinstance(item, Heartbeat)
        assert _invoked(item.deliveries) == [str(wanted)]
