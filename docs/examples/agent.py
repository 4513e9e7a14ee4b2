"""A complete turnkeeper agent: it answers every invocation in its thread, live.

Run it against a server (``turnkeeper serve --demo`` prints the agents' tokens):

    TURNKEEPER_URL=http://127.0.0.1:8000 TURNKEEPER_AGENT_TOKEN=tk_... python agent.py

The agent announces its follow-up mode, then follows its event stream. For each
``agent.invocation`` it starts the run with the delivery's token, reads the thread up to
its latest message (which surfaces it to the freshness gate), answers with the run's id
and finishes. A send held by the gate (a person wrote meanwhile) is answered after
reading what is new in the thread. A follow-up written while the run is busy is
acknowledged; one that answers a question resumes the run; one of a run the agent can
no longer read or resume is skipped. A cancel request ends the run as cancelled. Events
are acknowledged once handled; a lost connection or a server restart is resumed with
``Last-Event-ID``, so no event is lost and none handled twice. A run call the server
cannot take now (429, 5xx, unreachable) is tried again after its ``Retry-After``: every
one of them is idempotent (the answer keeps its client message id), and a start whose
answer was lost finds its run running and goes on with it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

from turnkeeper.adapters.client import (
    AgentEvent,
    AgentRuntimeClient,
    Capabilities,
    ClientProblem,
    ClientUnavailable,
    FollowupMode,
    RunState,
)
from turnkeeper.domain.freshness import SendState

T = TypeVar("T")

#: How often a held answer is refreshed and sent again before the run gives up.
SEND_ATTEMPTS = 3
#: Refusals that come again on every delivery: the run is out of sight (404), or no
#: longer the agent's to resume (403, a newer token or lost rights).
REFUSED_FOR_GOOD = frozenset({403, 404})
#: Tries of one run call the server cannot take now, before the agent gives up.
CALL_ATTEMPTS = 5
#: Seconds to wait before the next try when the server names no Retry-After.
RETRY_PAUSE_SECONDS = 2.0
#: Too many requests: the only refusal below 500 that passes.
RATE_LIMITED = 429
#: Statuses from here on are the server's passing trouble.
SERVER_ERROR = 500
#: A start refused because the run is no longer queued.
CONFLICT = 409


async def patiently(call: Callable[[], Awaitable[T]]) -> T:
    """A run call, tried again while the server cannot take it now (429, 5xx, unreachable)."""
    for attempt in range(1, CALL_ATTEMPTS + 1):
        try:
            return await call()
        except ClientUnavailable:
            if attempt == CALL_ATTEMPTS:
                raise
            pause = RETRY_PAUSE_SECONDS
        except ClientProblem as problem:
            passing = problem.status == RATE_LIMITED or problem.status >= SERVER_ERROR
            if not passing or attempt == CALL_ATTEMPTS:
                raise
            pause = RETRY_PAUSE_SECONDS if problem.retry_after is None else problem.retry_after
        await asyncio.sleep(pause)
    raise AssertionError("unreachable")


def compose(question: str) -> str:
    """The agent's "thinking": replace it with a model call."""
    return f"You wrote {len(question.split())} words. Noted, I am on it."


async def answer(client: AgentRuntimeClient, event: AgentEvent) -> None:
    """Run an invocation: start, read, answer through the freshness gate, finish."""
    run_id, token = event.run_id, event.invocation_token
    assert run_id is not None
    assert token is not None
    try:
        run = await patiently(lambda: client.start(run_id, token))
    except ClientProblem as problem:
        # Not queued any more: started by an earlier try whose answer was lost (go on
        # with it), or ended or superseded meanwhile (nothing to do).
        run = await patiently(lambda: client.get_run(run_id))
        if problem.status != CONFLICT or run.state is not RunState.RUNNING:
            print(f"run {run_id} not started: {problem.code}")
            return
    read_through, asked = 0, ""
    for attempt in range(SEND_ATTEMPTS):
        # Read up to the latest message (page by page in a long thread), and on a retry
        # only what came after the last read: that is what ends a freshness hold.
        history = await patiently(
            partial(client.read_history_to_latest, run.thread_id, after_seq=read_through)
        )
        read_through = history.covers_through_seq
        humans = [m.content for m in history.messages if m.origin == "human"]
        asked = humans[-1] if humans else asked
        text = compose(asked)
        sent = await patiently(
            partial(client.send, run.thread_id, text, f"{run.id}:answer", run_id=run.id)
        )
        if sent.state is not SendState.HELD:
            print(f"run {run.id} answered ({sent.state.value}, attempt {attempt + 1})")
            await patiently(lambda: client.finish(run.id, "completed"))
            return
    await patiently(lambda: client.finish(run.id, "failed", reason="kept_being_overtaken"))


async def take_followup(client: AgentRuntimeClient, event: AgentEvent) -> None:
    """A message written while the run is busy: resume on it, or take it into account."""
    assert event.run_id is not None
    assert event.message_id is not None
    try:
        run = await client.get_run(event.run_id)
        if run.state is RunState.WAITING_INPUT and event.invocation_token is not None:
            run = await client.resume(run.id, event.invocation_token)
        if run.active:
            await client.patch_followups(run.id, {event.message_id: "absorbed"})
    except ClientProblem as problem:
        if problem.status not in REFUSED_FOR_GOOD:
            raise
        # Skipped and acknowledged: raising would leave the event to come again after
        # every restart, and no later event would get through.
        print(f"follow-up {event.message_id} skipped: {problem.code}")


async def serve(url: str, token: str, *, handled: int | None = None) -> int:
    """Follow the agent's stream and handle its events.

    Args:
        url: the turnkeeper server.
        token: the agent's API token.
        handled: stop after this many events (None: for ever).

    Returns:
        How many events were handled.
    """
    count = 0
    async with AgentRuntimeClient(url, token) as client:
        await client.heartbeat(Capabilities(followups=FollowupMode.QUEUE))
        async for event in client.events():
            if event.type == "agent.invocation":
                await answer(client, event)
            elif event.type == "agent.followup":
                await take_followup(client, event)
            elif event.type == "run.cancel_requested" and event.run_id is not None:
                await patiently(
                    partial(client.finish, event.run_id, "cancelled", reason="requested")
                )
            count += 1
            if handled is not None and count >= handled:
                break
    return count


if __name__ == "__main__":
    asyncio.run(serve(os.environ["TURNKEEPER_URL"], os.environ["TURNKEEPER_AGENT_TOKEN"]))
