"""An agent moving its run by bearer token: authenticated in the round trip of the run's lock.

Run on both adapters. Start, await-input, resume, finish and the patch take the
request's token unresolved (ADR 0026): the use case answers what a request authenticated
first would (401 for an unknown or revoked token, then 404 and 403), reads the token in
its own unit (no separate read-only unit) and records its last use once per
``auth.token_last_used_interval``, as `authenticate` does.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from tests.support.fakes import FakeClock
from tests.support.scenario import denials, get_run, invocations, main_thread, post
from tests.support.services import CountingFactory, services_over
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.errors import BaseVersionConflict, Unauthenticated
from turnkeeper.application.ports import UnitOfWorkFactory
from turnkeeper.application.services.identity import BearerToken
from turnkeeper.application.services.runs import FollowupOp
from turnkeeper.application.settings import Settings
from turnkeeper.application.transactions import AccessDenied
from turnkeeper.domain.errors import NotFound, ValidationFailed
from turnkeeper.domain.followups import FollowupState
from turnkeeper.domain.runs import Run, RunState

#: ``auth.token_last_used_interval`` of these tests, in seconds.
INTERVAL = 60


async def _setup(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> tuple[Services, DemoWorld, CountingFactory]:
    counting = CountingFactory(uow_factory)
    settings = Settings(token_last_used_interval=timedelta(seconds=INTERVAL))
    services = services_over(counting, settings, clock)
    return services, await build_demo_world(services), counting


def _bearer(world: DemoWorld, handle: str) -> BearerToken:
    return BearerToken.of((world.people.get(handle) or world.agents[handle]).token)


async def _delivered(services: Services, world: DemoWorld) -> tuple[Run, str]:
    """Alex writes in Allgemein; Lotse polls the invocation (the run is queued)."""
    await post(services, world, "alex", main_thread(world, "allgemein"), "trigger")
    (delivery,) = await invocations(services, world.principal("lotse"))
    assert delivery.invocation_token is not None
    run = await get_run(services, uuid.UUID(delivery.event.payload["run_id"]))
    return run, delivery.invocation_token


async def _last_used(services: Services, world: DemoWorld, handle: str) -> object:
    (token,) = await services.tokens.list_tokens(world.owner.principal, world.principal(handle).id)
    return token.last_used_at


async def test_an_agent_moves_its_run_by_token_in_one_unit_each(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, counting = await _setup(uow_factory, clock)
    run, invocation = await _delivered(services, world)
    lotse = _bearer(world, "lotse")
    reads, writes = counting.reads, counting.writes

    started = await services.runs.start(lotse, run.id, invocation)

    assert started.run.state is RunState.RUNNING
    # The token was read in the start's unit; its first use was recorded in one more.
    assert (counting.reads, counting.writes) == (reads, writes + 2)
    waiting = await services.runs.await_input(lotse, run.id)
    assert waiting.run.state is RunState.WAITING_INPUT
    ended = await services.runs.finish(lotse, run.id, RunState.COMPLETED, "done")
    assert (ended.run.state, ended.run.state_reason) == (RunState.COMPLETED, "done")
    # Within the interval the later moves record nothing: one unit each.
    assert (counting.reads, counting.writes) == (reads, writes + 4)
    assert await _last_used(services, world, "lotse") == clock.now()
    assert (await get_run(services, run.id)).state is RunState.COMPLETED


async def test_an_agent_patches_its_run_by_token_as_its_principal_would(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, counting = await _setup(uow_factory, clock)
    run, invocation = await _delivered(services, world)
    lotse = _bearer(world, "lotse")
    started = await services.runs.start(lotse, run.id, invocation)
    writes = counting.writes
    with pytest.raises(BaseVersionConflict):
        await services.runs.patch(lotse, run.id, started.run.version + 1, [])
    same = await services.runs.patch(lotse, run.id, started.run.version, [])
    assert same.run == started.run
    assert counting.writes == writes + 2
    with pytest.raises(ValidationFailed):
        await services.runs.patch(
            lotse,
            run.id,
            started.run.version,
            [FollowupOp(message_id=uuid.uuid4(), value=FollowupState.DELIVERED)],
        )


async def test_the_last_use_of_a_moving_token_is_written_once_per_interval(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, counting = await _setup(uow_factory, clock)
    run, invocation = await _delivered(services, world)
    lotse = _bearer(world, "lotse")
    await services.runs.start(lotse, run.id, invocation)
    first = await _last_used(services, world, "lotse")
    clock.advance(timedelta(seconds=INTERVAL + 1))
    writes = counting.writes

    await services.runs.await_input(lotse, run.id)

    # The move's unit, then the use recorded in one more.
    assert counting.writes == writes + 2
    later = await _last_used(services, world, "lotse")
    assert later == clock.now()
    assert later != first


async def test_an_unknown_token_is_refused_before_anything_else_and_changes_nothing(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, _ = await _setup(uow_factory, clock)
    run, invocation = await _delivered(services, world)
    unknown = BearerToken.of("tk_unknown")
    for where in (run.id, uuid.uuid4()):
        with pytest.raises(Unauthenticated):
            await services.runs.start(unknown, where, invocation)
        with pytest.raises(Unauthenticated):
            await services.runs.await_input(unknown, where)
        with pytest.raises(Unauthenticated):
            await services.runs.resume(unknown, where, invocation)
        with pytest.raises(Unauthenticated):
            await services.runs.finish(unknown, where, RunState.FAILED, None)
        with pytest.raises(Unauthenticated):
            await services.runs.patch(unknown, where, run.version + 1, [])
    assert await get_run(services, run.id) == run


async def test_a_revoked_token_cannot_finish(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, _ = await _setup(uow_factory, clock)
    run, invocation = await _delivered(services, world)
    lotse = world.principal("lotse")
    issued = await services.tokens.issue_token(world.owner.principal, lotse.id, label="worker")
    started = await services.runs.start(BearerToken.of(issued.secret), run.id, invocation)
    assert started.run.state is RunState.RUNNING
    await services.tokens.revoke_token(world.owner.principal, lotse.id, issued.token.id)

    with pytest.raises(Unauthenticated):
        await services.runs.finish(BearerToken.of(issued.secret), run.id, RunState.COMPLETED, None)

    assert (await get_run(services, run.id)).state is RunState.RUNNING


async def test_a_known_token_gets_not_found_then_access_as_its_principal_would(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, _ = await _setup(uow_factory, clock)
    run, invocation = await _delivered(services, world)
    with pytest.raises(NotFound):
        await services.runs.finish(_bearer(world, "lotse"), uuid.uuid4(), RunState.FAILED, None)
    # Alex reads the thread but is not the run's agent; the other agent cannot read it.
    by_token, by_principal = [], []
    for handle in ("alex", "texter"):
        with pytest.raises((AccessDenied, NotFound)) as token_denied:
            await services.runs.start(_bearer(world, handle), run.id, invocation)
        with pytest.raises((AccessDenied, NotFound)) as principal_denied:
            await services.runs.start(world.principal(handle), run.id, invocation)
        by_token.append(_answer(token_denied.value))
        by_principal.append(_answer(principal_denied.value))
    assert by_token == by_principal
    assert by_token[0] == ("AccessDenied", "forbidden", "not_run_agent")
    assert (await get_run(services, run.id)).state is RunState.QUEUED


def _answer(error: BaseException) -> tuple[str, str | None, str | None]:
    if isinstance(error, AccessDenied):
        return ("AccessDenied", error.code, error.reason)
    return (type(error).__name__, None, None)


# -- the poll ------------------------------------------------------------------------------


async def test_an_agents_poll_by_token_delivers_as_its_principals_would_in_one_unit(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, counting = await _setup(uow_factory, clock)
    await post(services, world, "alex", main_thread(world, "allgemein"), "trigger")
    reads, writes = counting.reads, counting.writes

    polled = await services.runs.poll_as(_bearer(world, "lotse"))

    assert polled.agent == world.principal("lotse")
    (delivery,) = polled.page.deliveries
    assert delivery.invocation_token is not None
    assert not delivery.redelivered
    # The token was read in the poll's unit; its first use was recorded in one more.
    assert (counting.reads, counting.writes) == (reads, writes + 2)
    # The same cursor as a poll by the principal: the delivery comes again, redelivered.
    again = await services.runs.poll(world.principal("lotse"))
    assert [(d.event.seq, d.redelivered) for d in again.deliveries] == [(delivery.event.seq, True)]
    assert again.next_after == polled.page.next_after
    assert await _last_used(services, world, "lotse") == clock.now()


@pytest.mark.parametrize(("after", "limit"), [(None, None), (-1, None), (None, 0)])
async def test_a_poll_by_an_unknown_token_is_401_whatever_its_cursor_and_limit(
    uow_factory: UnitOfWorkFactory, clock: FakeClock, after: int | None, limit: int | None
) -> None:
    services, world, _ = await _setup(uow_factory, clock)
    await post(services, world, "alex", main_thread(world, "allgemein"), "trigger")
    with pytest.raises(Unauthenticated):
        await services.runs.poll(BearerToken.of("tk_unknown"), after=after, limit=limit)
    page = await services.runs.poll(world.principal("lotse"))
    assert [d.redelivered for d in page.deliveries] == [False]


async def test_a_persons_poll_by_token_is_agents_only_and_audited_as_by_principal(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, _ = await _setup(uow_factory, clock)
    alex = world.principal("alex")
    with pytest.raises(AccessDenied) as by_token:
        await services.runs.poll(_bearer(world, "alex"), after=-1)
    with pytest.raises(AccessDenied) as by_principal:
        await services.runs.poll(alex, after=-1)
    assert _answer(by_token.value) == _answer(by_principal.value)
    assert _answer(by_token.value) == ("AccessDenied", "forbidden", "agents_only")
    assert await denials(services, alex) == [("agent.events.consume", "agents_only", 2)]


async def test_an_agents_poll_by_token_with_a_bad_cursor_delivers_nothing(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, _ = await _setup(uow_factory, clock)
    await post(services, world, "alex", main_thread(world, "allgemein"), "trigger")
    for after, limit, pointer in ((-1, None, "/after"), (None, 0, "/limit")):
        with pytest.raises(ValidationFailed) as refused:
            await services.runs.poll(_bearer(world, "lotse"), after=after, limit=limit)
        assert [e.pointer for e in refused.value.errors] == [pointer]
    page = await services.runs.poll(world.principal("lotse"))
    assert [d.redelivered for d in page.deliveries] == [False]


async def test_an_agents_ack_by_token_moves_its_cursor_in_one_unit(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, counting = await _setup(uow_factory, clock)
    await post(services, world, "alex", main_thread(world, "allgemein"), "trigger")
    lotse = world.principal("lotse")
    (delivery,) = (await services.runs.poll(lotse)).deliveries
    reads, writes = counting.reads, counting.writes

    await services.runs.ack(_bearer(world, "lotse"), delivery.event.seq)

    # The token was read in the ack's unit; its first use was recorded in one more.
    assert (counting.reads, counting.writes) == (reads, writes + 2)
    assert (await services.runs.poll(lotse)).deliveries == []


async def test_an_ack_by_token_answers_401_then_403_then_its_seq(
    uow_factory: UnitOfWorkFactory, clock: FakeClock
) -> None:
    services, world, _ = await _setup(uow_factory, clock)
    await post(services, world, "alex", main_thread(world, "allgemein"), "trigger")
    lotse = world.principal("lotse")
    (delivery,) = (await services.runs.poll(lotse)).deliveries
    with pytest.raises(Unauthenticated):
        await services.runs.ack(BearerToken.of("tk_unknown"), -1)
    with pytest.raises(AccessDenied) as denied:
        await services.runs.ack(_bearer(world, "alex"), -1)
    assert _answer(denied.value) == ("AccessDenied", "forbidden", "agents_only")
    assert await denials(services, world.principal("alex")) == [
        ("agent.events.consume", "agents_only", 1)
    ]
    with pytest.raises(ValidationFailed) as refused:
        await services.runs.ack(_bearer(world, "lotse"), -1)
    assert [e.pointer for e in refused.value.errors] == ["/through_seq"]
    # Nothing was acknowledged: the delivery comes again.
    again = await services.runs.poll(lotse)
    assert [(d.event.seq, d.redelivered) for d in again.deliveries] == [(delivery.event.seq, True)]
