"""Helpers of the reliability tests: services over PostgreSQL, scenarios, raw SQL."""

from __future__ import annotations

import uuid
from typing import Any

import attrs
import psycopg

from tests.fakes import TEST_KEY, FakeClock, SequentialIds
from turnkeeper.adapters.postgres.invariants import Invariant, Violation, check_database
from turnkeeper.adapters.tokens import JwtSigner
from turnkeeper.application.bootstrap import Services, build_services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.ports import UnitOfWorkFactory
from turnkeeper.application.services.runs import FollowupOp
from turnkeeper.application.settings import Settings
from turnkeeper.domain.events import EventType
from turnkeeper.domain.followups import FollowupState
from turnkeeper.domain.messaging import Message, MessageDraft
from turnkeeper.domain.runs import RunState


def services_over(uow: UnitOfWorkFactory, clock: FakeClock | None = None) -> Services:
    """Services with the test clock, sequential ids and the test key."""
    return build_services(
        uow, Settings(), clock or FakeClock(), SequentialIds(), JwtSigner(TEST_KEY)
    )


def main_thread(world: DemoWorld, channel: str) -> uuid.UUID:
    """The main thread of a text channel of the demo world."""
    thread_id = world.channels[channel].main_thread_id
    assert thread_id is not None
    return thread_id


async def post(
    services: Services,
    world: DemoWorld,
    who: str,
    thread_id: uuid.UUID,
    client_id: str,
    *mentions: str,
    run_id: uuid.UUID | None = None,
) -> Message:
    """One message by a person or agent of the world."""
    draft = MessageDraft(
        client_msg_id=client_id,
        content=f"content of {client_id}",
        mentions=tuple(world.principal(m).id for m in mentions),
        run_id=run_id,
    )
    posted = await services.conversation.create_message(world.principal(who), thread_id, draft)
    return posted.message


@attrs.frozen(kw_only=True)
class Scenario:
    """Ids of what `busy_world` built."""

    thread_id: uuid.UUID
    ended_run_id: uuid.UUID
    active_run_id: uuid.UUID
    active_trigger_id: uuid.UUID
    agent_message_id: uuid.UUID


async def busy_world(services: Services, world: DemoWorld) -> Scenario:
    """Runs, follow-ups, a follow-on run and agent answers, all through the services.

    Alex triggers Lotse in Allgemein; Lotse (steer) starts, gets a follow-up, marks it
    delivered, asks for input, resumes with the answer's token, answers with its run_id
    and completes; a follow-up still open at the end becomes a follow-on run (queued).
    Texter writes in Allgemein; Robin triggers his personal agent in Notizen.
    """
    lotse = world.principal("lotse")
    thread_id = main_thread(world, "allgemein")
    await services.runs.heartbeat(lotse, "steer")
    await post(services, world, "alex", thread_id, "trigger")
    page = await services.runs.poll(lotse)
    (invocation,) = [d for d in page.deliveries if d.event.type is EventType.AGENT_INVOCATION]
    assert invocation.invocation_token is not None
    run_id = uuid.UUID(str(invocation.event.payload["run_id"]))
    await services.runs.start(lotse, run_id, invocation.invocation_token)
    first = await post(services, world, "alex", thread_id, "followup-1")
    current = await services.runs.get(lotse, run_id)
    await services.runs.patch(
        lotse,
        run_id,
        current.run.version,
        [FollowupOp(message_id=first.id, value=FollowupState.DELIVERED)],
    )
    await services.runs.await_input(lotse, run_id)
    await post(services, world, "alex", thread_id, "answer")
    page = await services.runs.poll(lotse, after=page.next_after)
    # The answer's delivery is the newest: its token supersedes every older one.
    followup = [d for d in page.deliveries if d.event.type is EventType.AGENT_FOLLOWUP][-1]
    assert followup.invocation_token is not None
    await services.runs.resume(lotse, run_id, followup.invocation_token)
    await post(services, world, "lotse", thread_id, "reply", run_id=run_id)
    await services.runs.finish(lotse, run_id, RunState.COMPLETED, None)
    async with services.uow() as uow:
        follow_on = await uow.runs.lock_active_in_thread(thread_id)
    assert follow_on is not None
    agent_message = await post(services, world, "texter", thread_id, "texter-note")
    await post(services, world, "robin", main_thread(world, "notizen"), "robin-note", "assistent")
    return Scenario(
        thread_id=thread_id,
        ended_run_id=run_id,
        active_run_id=follow_on.id,
        active_trigger_id=follow_on.triggering_message_id,
        agent_message_id=agent_message.id,
    )


async def execute(conninfo: str, statement: str, params: dict[str, Any] | None = None) -> int:
    """Run one raw statement (tests corrupt rows with it); returns the affected rows."""
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        cursor = await conn.execute(statement.encode(), params)
        return int(cursor.rowcount)


async def fetch(conninfo: str, statement: str, params: dict[str, Any] | None = None) -> list[Any]:
    """Rows of one raw query."""
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        cursor = await conn.execute(statement.encode(), params)
        return list(await cursor.fetchall())


async def violations(conninfo: str) -> list[Violation]:
    """Every invariant violation of a database."""
    return await check_database(conninfo)


def broken(found: list[Violation]) -> set[Invariant]:
    """The invariants a list of violations names."""
    return {v.invariant for v in found}
