"""Every row lock of docs/architecture.md ("Where the locks are") makes a second unit wait.

Each test holds the lock in one unit of work, starts a second unit that needs the same
row, and observes on the server (`tests.support.locks.wait_until_blocked`, from
``pg_stat_activity`` and ``pg_blocking_pids``) that the second one waits for the first;
then the first commits and the second must see what the first committed. Each scenario
repeats, as the other concurrency tests do. The unique-key wait of two inserts with one
client id is in tests/integration/test_postgres_uow.py; the event log takes no lock that
other writers wait for (tests/concurrency/test_event_cursor.py shows writers committing
while one unit is held in its commit).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TypeVar

import attrs
import psycopg
import pytest

from tests.support.locks import backend_pid, wait_until_blocked
from tests.support.scenario import main_thread, post, started_run
from tests.support.services import services_over
from turnkeeper.adapters.postgres import queries as q
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld, build_demo_world
from turnkeeper.application.ports import UnitOfWork, UnitOfWorkFactory
from turnkeeper.domain.followups import FollowupState
from turnkeeper.domain.messaging import Message
from turnkeeper.domain.runs import AnswerRun, Run

T = TypeVar("T")
U = TypeVar("U")

#: Rounds of each scenario.
ROUNDS = 5
#: The time of every bucket take (the buckets do not refill in these tests).
AT = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
#: A limit class of its own, so that no take of the demo world's messages interferes.
LIMIT_CLASS = "rl.lock-test"
#: Principals whose new buckets the bucket test fights over (one round each).
BUCKET_OWNERS = ("alex", "sam", "robin", "lotse", "texter")
#: Looks of the helper's own failing case (nothing waits, so it must give up quickly).
FEW_TRIES = 3


@attrs.frozen(kw_only=True)
class Rows:
    """Rows of the demo world the units fight over."""

    thread_id: uuid.UUID
    run_id: uuid.UUID
    principal_ids: tuple[uuid.UUID, ...]


@pytest.fixture
async def rows(pg_uow_factory: UnitOfWorkFactory) -> Rows:
    """The demo world on PostgreSQL with a running run of Lotse in Allgemein."""
    services = services_over(pg_uow_factory)
    world = await build_demo_world(services)
    run, _ = await started_run(services, world)
    return Rows(
        thread_id=main_thread(world, "eskalation"),
        run_id=run.id,
        principal_ids=tuple(world.principal(h).id for h in BUCKET_OWNERS),
    )


async def _in_unit(
    factory: UnitOfWorkFactory, work: Callable[[UnitOfWork], Awaitable[T]], commit: bool
) -> T:
    async with factory() as uow:
        result = await work(uow)
        if commit:
            await uow.commit()
        return result


async def second_waits_for_first(
    conninfo: str,
    factory: UnitOfWorkFactory,
    first: Callable[[UnitOfWork], Awaitable[T]],
    second: Callable[[UnitOfWork], Awaitable[U]],
    *,
    commit_second: bool = True,
) -> tuple[T, U]:
    """Run `first` in a unit, then `second` in another; prove it waits until the commit.

    Returns:
        What `first` and `second` returned.
    """
    async with factory() as holder:
        held = await first(holder)
        waiting = asyncio.create_task(_in_unit(factory, second, commit_second))
        await wait_until_blocked(conninfo, backend_pid(holder))
        assert not waiting.done(), "the second unit must wait for the first one's lock"
        await holder.commit()
    return held, await waiting


# -- what the units do -------------------------------------------------------------------


def append_to(thread_id: uuid.UUID) -> Callable[[UnitOfWork], Awaitable[int]]:
    """createMessage's allocation of the next thread_seq."""

    async def work(uow: UnitOfWork) -> int:
        return await uow.threads.allocate_seq(thread_id)

    return work


def send_from(thread_id: uuid.UUID, seen: int) -> Callable[[UnitOfWork], Awaitable[int | None]]:
    """The freshness gate's compare-and-set allocation from the frontier `seen`."""

    async def work(uow: UnitOfWork) -> int | None:
        return await uow.freshness.compare_and_allocate(thread_id, seen)

    return work


def post_into(
    thread_id: uuid.UUID, author_id: uuid.UUID, seen: int | None = None
) -> Callable[[UnitOfWork], Awaitable[int | None]]:
    """A post's facts under the thread row lock, then its seq (from the frontier `seen`).

    The seq is decided on the latest_seq the facts read (ADR 0022): an allocation when
    `seen` is None, the freshness gate's compare-and-set otherwise.
    """

    async def work(uow: UnitOfWork) -> int | None:
        facts = await uow.threads.post_facts(thread_id, author_id, str(uuid.uuid4()))
        assert facts is not None
        if seen is None:
            return await uow.threads.allocate_seq(thread_id)
        return await uow.freshness.compare_and_allocate(thread_id, seen)

    return work


def take_one(principal_id: uuid.UUID) -> Callable[[UnitOfWork], Awaitable[int | None]]:
    """A take from a bucket of one token that never refills."""

    async def work(uow: UnitOfWork) -> int | None:
        return await uow.buckets.take_token(principal_id, LIMIT_CLASS, AT, burst=1, per_minute=0)

    return work


def answer_in(run_id: uuid.UUID) -> Callable[[UnitOfWork], Awaitable[AnswerRun | None]]:
    """An agent answer's share lock on the run it names."""

    async def work(uow: UnitOfWork) -> AnswerRun | None:
        return await uow.runs.lock_for_answer(run_id)

    return work


def end_of(run_id: uuid.UUID) -> Callable[[UnitOfWork], Awaitable[Run | None]]:
    """The end of a run (or its follow-up acceptance): the update lock on the run."""

    async def work(uow: UnitOfWork) -> Run | None:
        return await uow.runs.lock(run_id)

    return work


# -- the locks ---------------------------------------------------------------------------


async def test_the_helper_fails_when_nothing_waits(
    pg_conninfo: str, pg_uow_factory: UnitOfWorkFactory, rows: Rows
) -> None:
    async with pg_uow_factory() as holder:
        await holder.threads.allocate_seq(rows.thread_id)
        with pytest.raises(pytest.fail.Exception, match="should wait for a lock"):
            await wait_until_blocked(pg_conninfo, backend_pid(holder), tries=FEW_TRIES)


async def test_appends_to_one_thread_wait_for_the_thread_row(
    pg_conninfo: str, pg_uow_factory: UnitOfWorkFactory, rows: Rows
) -> None:
    for _ in range(ROUNDS):
        first, second = await second_waits_for_first(
            pg_conninfo, pg_uow_factory, append_to(rows.thread_id), append_to(rows.thread_id)
        )
        assert second == first + 1


async def test_a_compare_and_set_behind_an_append_finds_the_frontier_moved(
    pg_conninfo: str, pg_uow_factory: UnitOfWorkFactory, rows: Rows
) -> None:
    for _ in range(ROUNDS):
        async with pg_uow_factory() as uow:
            seen = (await uow.freshness.frontier(rows.thread_id)).latest_seq
        appended, allocated = await second_waits_for_first(
            pg_conninfo,
            pg_uow_factory,
            append_to(rows.thread_id),
            send_from(rows.thread_id, seen),
        )
        # The send rechecks the row the append committed: the frontier it saw is gone.
        assert appended == seen + 1
        assert allocated is None


async def test_a_post_waits_at_its_facts_for_the_thread_row(
    pg_conninfo: str, pg_uow_factory: UnitOfWorkFactory, rows: Rows
) -> None:
    author = rows.principal_ids[0]
    for _ in range(ROUNDS):
        first, second = await second_waits_for_first(
            pg_conninfo,
            pg_uow_factory,
            post_into(rows.thread_id, author),
            post_into(rows.thread_id, author),
        )
        # The second read latest_seq after the first committed its allocation.
        assert first is not None
        assert second == first + 1


async def test_a_gated_send_behind_a_post_finds_the_frontier_moved(
    pg_conninfo: str, pg_uow_factory: UnitOfWorkFactory, rows: Rows
) -> None:
    author = rows.principal_ids[0]
    for _ in range(ROUNDS):
        async with pg_uow_factory() as uow:
            seen = (await uow.freshness.frontier(rows.thread_id)).latest_seq
        posted, allocated = await second_waits_for_first(
            pg_conninfo,
            pg_uow_factory,
            post_into(rows.thread_id, author),
            post_into(rows.thread_id, author, seen),
        )
        assert posted == seen + 1
        assert allocated is None


async def test_takes_of_one_bucket_wait_for_the_bucket_row(
    pg_conninfo: str, pg_uow_factory: UnitOfWorkFactory, rows: Rows
) -> None:
    # One new bucket per round: the first take creates it, the second meets its key.
    for principal_id in rows.principal_ids:
        first, second = await second_waits_for_first(
            pg_conninfo,
            pg_uow_factory,
            take_one(principal_id),
            take_one(principal_id),
            commit_second=False,
        )
        # The first take took the one token; the second waited on that row, found it
        # empty and was refused.
        assert first is None
        assert second is not None


async def test_the_end_of_a_run_waits_for_an_answer_naming_it(
    pg_conninfo: str, pg_uow_factory: UnitOfWorkFactory, rows: Rows
) -> None:
    for _ in range(ROUNDS):
        answered, ending = await second_waits_for_first(
            pg_conninfo, pg_uow_factory, answer_in(rows.run_id), end_of(rows.run_id)
        )
        assert answered is not None
        assert ending is not None
        assert (answered.id, ending.id) == (rows.run_id, rows.run_id)


async def test_an_answer_waits_for_the_end_of_the_run_it_names(
    pg_conninfo: str, pg_uow_factory: UnitOfWorkFactory, rows: Rows
) -> None:
    for _ in range(ROUNDS):
        ending, answered = await second_waits_for_first(
            pg_conninfo, pg_uow_factory, end_of(rows.run_id), answer_in(rows.run_id)
        )
        assert ending is not None
        assert answered is not None
        assert answered.state is ending.state


async def _run_of(factory: UnitOfWorkFactory, run_id: uuid.UUID) -> Run:
    async with factory() as uow:
        run = await uow.runs.get(run_id)
    assert run is not None
    return run


async def test_the_lock_of_a_run_waits_for_its_thread_row_before_the_run_row(
    pg_conninfo: str, pg_uow_factory: UnitOfWorkFactory, rows: Rows
) -> None:
    # Found by a black-box audit: the end of a run held the run row and then needed the
    # thread row (the anchor of a follow-on run), while an acceptance held the thread row
    # and waited for the run row; under a burst of follow-ups the reruns of the deadlock
    # ran out. Every unit now takes the thread row first.
    run = await _run_of(pg_uow_factory, rows.run_id)
    author = rows.principal_ids[0]
    for _ in range(ROUNDS):
        async with pg_uow_factory() as holder:
            await post_into(run.thread_id, author)(holder)
            waiting = asyncio.create_task(
                _in_unit(pg_uow_factory, end_of(rows.run_id), commit=True)
            )
            await wait_until_blocked(pg_conninfo, backend_pid(holder))
            # While it waits for the thread, the run row is free: it is not held by a
            # unit that waits for the thread (the cycle the audit found).
            async with await psycopg.AsyncConnection.connect(pg_conninfo) as probe:
                await probe.execute(
                    "SELECT 1 FROM runs WHERE id = %s FOR UPDATE NOWAIT", (rows.run_id,)
                )
                await probe.rollback()
            assert not waiting.done(), "the lock of the run must wait for the thread row"
            await holder.commit()
        locked = await waiting
        assert locked is not None
        assert locked.id == rows.run_id


#: The bound on a job's lock wait in the test below: a job that waited for the thread
#: row would fail with LockNotAvailable instead of hanging the test run.
JOB_LOCK_TIMEOUT = "10s"
#: Runs a job pass takes at most in the test below.
JOB_BATCH = 100


async def test_a_job_skips_a_run_whose_thread_row_is_held(
    pg_conninfo: str, pg_uow_factory: UnitOfWorkFactory, rows: Rows
) -> None:
    run = await _run_of(pg_uow_factory, rows.run_id)
    author = rows.principal_ids[0]
    later = datetime(9999, 1, 1, tzinfo=UTC)
    for _ in range(ROUNDS):
        async with (
            pg_uow_factory() as holder,
            await psycopg.AsyncConnection.connect(pg_conninfo) as job,
        ):
            await post_into(run.thread_id, author)(holder)
            await job.execute(f"SET LOCAL lock_timeout = '{JOB_LOCK_TIMEOUT}'")
            taken = await q.lock_runs_updated_before(
                job, states=["running"], before=later, max_runs=JOB_BATCH
            )
            # The stall check's pass leaves the run to its next pass, without waiting.
            assert rows.run_id not in {r.id for r in taken}
            await job.rollback()
            await holder.commit()
            taken = await q.lock_runs_updated_before(
                job, states=["running"], before=later, max_runs=JOB_BATCH
            )
            assert rows.run_id in {r.id for r in taken}
            await job.rollback()


async def _followups(services: Services, world: DemoWorld, run: Run, round_: int) -> list[Message]:
    """Two new follow-ups of the run by Alex, in its thread."""
    return [
        await post(services, world, "alex", run.thread_id, f"more-{round_}-{i}", content="and")
        for i in range(2)
    ]


def patch_of(
    run_id: uuid.UUID, message_ids: list[uuid.UUID]
) -> Callable[[UnitOfWork], Awaitable[dict[uuid.UUID, FollowupState]]]:
    """A run patch's lock of the follow-ups it names, and its change of them to absorbed."""

    async def work(uow: UnitOfWork) -> dict[uuid.UUID, FollowupState]:
        # The ops' order is not the lock's: the lock takes them in message_id order.
        found = await uow.followups.lock_many(run_id, message_ids[::-1])
        await uow.followups.set_states(run_id, message_ids, FollowupState.ABSORBED, AT)
        return found

    return work


def open_followups_of(run_id: uuid.UUID) -> Callable[[UnitOfWork], Awaitable[list[uuid.UUID]]]:
    """The end of a run's lock of its open follow-ups, and its change of them to delivered."""

    async def work(uow: UnitOfWork) -> list[uuid.UUID]:
        found = [f.message_id for f in await uow.followups.lock_open(run_id)]
        await uow.followups.set_states(run_id, found, FollowupState.DELIVERED, AT)
        return found

    return work


async def test_a_patch_and_the_end_of_a_run_wait_for_each_others_follow_up_locks(
    pg_conninfo: str, pg_uow_factory: UnitOfWorkFactory
) -> None:
    services = services_over(pg_uow_factory)
    world = await build_demo_world(services)
    run, _ = await started_run(services, world)
    for round_ in range(ROUNDS):
        patched = [m.id for m in await _followups(services, world, run, 2 * round_)]
        found, still_open = await second_waits_for_first(
            pg_conninfo, pg_uow_factory, patch_of(run.id, patched), open_followups_of(run.id)
        )
        assert found == dict.fromkeys(patched, FollowupState.QUEUED)
        # The end of the run saw the patch's commit: the absorbed ones are no longer open.
        assert not set(patched) & set(still_open)

        ended = [m.id for m in await _followups(services, world, run, 2 * round_ + 1)]
        locked, seen = await second_waits_for_first(
            pg_conninfo, pg_uow_factory, open_followups_of(run.id), patch_of(run.id, ended)
        )
        assert set(ended) <= set(locked)
        assert seen == dict.fromkeys(ended, FollowupState.DELIVERED)
