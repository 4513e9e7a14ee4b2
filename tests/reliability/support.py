"""Helpers of the reliability tests: a busy scenario through the services, invariant checks."""

from __future__ import annotations

import uuid
from pathlib import Path

import attrs

from tests.support.scenario import main_thread, post
from turnkeeper.adapters.postgres.invariants import Invariant, Violation, check_database
from turnkeeper.application.bootstrap import Services
from turnkeeper.application.demo import DemoWorld
from turnkeeper.application.services.runs import FollowupOp
from turnkeeper.domain.events import EventType
from turnkeeper.domain.followups import FollowupState
from turnkeeper.domain.runs import RunState


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


async def violations(conninfo: str) -> list[Violation]:
    """Every invariant violation of a database."""
    return await check_database(conninfo)


def broken(found: list[Violation]) -> set[Invariant]:
    """The invariants a list of violations names."""
    return {v.invariant for v in found}


def process_running(pid: int) -> bool:
    """Whether a process runs (an exited one its parent has not reaped yet does not).

    Args:
        pid: the process.

    Returns:
        True while it runs.
    """
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status
