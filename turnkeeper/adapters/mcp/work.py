"""``wait_for_work`` of ``turnkeeper mcp``: the agent's next event, handed to the model.

`WorkWaiter.wait` long-polls the agent's feed, starts an invocation's run, resumes a
waiting run with a follow-up and acknowledges it, or relays a cancel request; each event
is acknowledged once handled. An invocation whose start may have committed without the
model hearing of it (an answer lost, a call cancelled) is kept by the session and handed
over at the next call. `ToolAnswer` is what every tool answers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Any

import attrs

from turnkeeper.adapters.client import (
    AgentEvent,
    Capabilities,
    ClientProblem,
    ClientUnavailable,
    FollowupAck,
    FollowupMode,
    RunState,
)
from turnkeeper.adapters.mcp import texts
from turnkeeper.adapters.mcp.failures import deferral, out_of_reach, passing, superseded
from turnkeeper.adapters.mcp.session import McpSession
from turnkeeper.adapters.mcp.tools import WaitArgs
from turnkeeper.application.logs import get_logger
from turnkeeper.application.settings import Settings

#: The logger of every record of the tool server.
LOGGER_NAME = "turnkeeper.mcp"
#: The agent event types wait_for_work hands to the model.
INVOCATION = "agent.invocation"
FOLLOWUP = "agent.followup"
CANCEL_REQUESTED = "run.cancel_requested"


def _log() -> Any:
    return get_logger(LOGGER_NAME)


@attrs.frozen(kw_only=True)
class ToolAnswer:
    """What one tool call answers.

    Attributes:
        text: the answer for the model.
        is_error: True for a tool error (bad arguments, a problem of the server).
        structured: a structured copy for hosts that read one (reads and waits only).
        outcome: a short word for the log line (``sent``, ``held``, a problem code ...).
    """

    text: str = attrs.field(repr=False)
    is_error: bool = False
    structured: Mapping[str, Any] | None = attrs.field(default=None, repr=False)
    outcome: str = "ok"


class WorkWaiter:
    """The ``wait_for_work`` tool.

    Args:
        settings: ``stream.max_wait_seconds`` (the longest single long-poll).
        monotonic: the time source of the call's deadline.
    """

    def __init__(
        self, settings: Settings, *, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._settings = settings
        self._monotonic = monotonic

    async def wait(self, session: McpSession, args: WaitArgs) -> ToolAnswer:
        """Wait for the agent's next event and hand it to the model (docs/mcp.md).

        Args:
            session: the calling session's state.
            args: the call's checked arguments.

        Returns:
            The work for the model, or that nothing came in time.

        Raises:
            WorkDeferred: when the server cannot handle the event now (the event stays
                for the next call).
            ClientProblem: for a problem of the server that is not passing.
            ClientUnavailable: when the server was not reached.
        """
        client = session.client
        # Steer: every follow-up of a running run becomes an event, which the model
        # takes in its next wait_for_work (queue would hold it until await_input).
        await client.heartbeat(Capabilities(followups=FollowupMode.STEER))
        seconds = args.timeout.total_seconds()
        deadline = self._monotonic() + seconds
        step = self._settings.stream_max_wait.total_seconds()
        while True:
            remaining = max(0.0, deadline - self._monotonic())
            event = session.unsettled_invocation
            if event is None:
                page = await client.wait_events(wait=min(remaining, step), limit=1)
                event = page.events[0] if page.events else None
            if event is not None:
                answer = await self._handle(session, event)
                if answer is not None:
                    return answer
                continue
            if self._monotonic() >= deadline:
                return ToolAnswer(
                    text=texts.idle_text(int(seconds)),
                    structured={"event": "none"},
                    outcome="idle",
                )

    async def _handle(self, session: McpSession, event: AgentEvent) -> ToolAnswer | None:
        """Hand one event to the model (None: nothing to do with it) and acknowledge it."""
        client = session.client
        try:
            answer = await self._work(session, event)
        except asyncio.CancelledError:
            # Cancelled (a host's read timeout) before the model got the work: the start
            # may have committed, and the server skips a started run's invocation, so
            # the session keeps it as below.
            if event.type == INVOCATION:
                session.unsettled_invocation = event
            raise
        except (ClientUnavailable, ClientProblem) as failed:
            deferred = deferral(failed)
            if deferred is None:
                raise
            if event.type == INVOCATION:
                # The start may have committed all the same (its answer lost):
                # the server then skips the invocation, so the session keeps it.
                # Its next start answers 409 and the running run is handed over.
                session.unsettled_invocation = event
            raise deferred from failed
        session.unsettled_invocation = None
        # Handled (or nothing to do with it): it is not delivered again. An event
        # whose handling failed above stays unacknowledged and comes again.
        try:
            await client.ack(event.seq)
        except asyncio.CancelledError:
            if answer is not None and event.type == INVOCATION:
                # The run is started for this session, and the model never heard of it.
                session.unsettled_invocation = event
            raise
        except (ClientUnavailable, ClientProblem) as failed:
            if answer is None or deferral(failed) is None:
                raise
            # The work is the model's now (a started run's invocation is never
            # delivered again); a later ack covers this event.
            _log().info("mcp_ack_deferred", seq=event.seq)
        return answer

    async def _work(self, session: McpSession, event: AgentEvent) -> ToolAnswer | None:
        if event.run_id is None:
            return None
        if event.type == INVOCATION and event.invocation_token is not None:
            kept = event is session.unsettled_invocation
            return await self._invocation(session, event.run_id, event.invocation_token, kept)
        if event.type == FOLLOWUP:
            return await self._followup(session, event)
        if event.type == CANCEL_REQUESTED:
            return await self._cancel(session, event.run_id)
        return None

    async def _invocation(
        self, session: McpSession, run_id: str, token: str, kept: bool
    ) -> ToolAnswer | None:
        client = session.client
        try:
            run = await client.start(run_id, token)
        except ClientProblem as problem:
            if problem.status != HTTPStatus.CONFLICT:
                if not superseded(problem):
                    # Passing (429, 5xx) or unforeseen: the delivery stays for later.
                    raise
                # A superseded or expired delivery: a newer one is on its way, if any.
                _log().info("mcp_invocation_skipped", run_id=run_id, code=problem.code)
                return None
            if not kept:
                # Another session (or a parallel wait of this one) started the run with
                # its own delivery: the run is that one's work, not this one's.
                _log().info("mcp_invocation_skipped", run_id=run_id, code=problem.code)
                return None
            # This session's own start, its answer lost: the run is running for it.
            run = await client.get_run(run_id)
            if run.state not in (RunState.RUNNING, RunState.WAITING_INPUT):
                return None
        session.take_run(run.thread_id, run.id)
        return ToolAnswer(
            text=texts.invocation_text(run),
            structured=_work_document(
                "invocation", run.id, run.thread_id, run.triggering_message_id
            ),
            outcome="invocation",
        )

    async def _cancel(self, session: McpSession, run_id: str) -> ToolAnswer | None:
        try:
            run = await session.client.get_run(run_id)
        except ClientProblem as problem:
            if problem.status != HTTPStatus.NOT_FOUND:
                raise
            # Gone or out of sight: there is nothing the model could finish.
            return None
        if not run.active:
            # Ended before the request reached the model: finish_run could not cancel it.
            session.drop_run(run.id)
            return None
        return ToolAnswer(
            text=texts.cancel_text(run.id, run.thread_id),
            structured=_work_document("cancel_requested", run.id, run.thread_id),
            outcome="cancel_requested",
        )

    async def _followup(self, session: McpSession, event: AgentEvent) -> ToolAnswer | None:
        client = session.client
        assert event.run_id is not None  # checked by _work
        try:
            run = await client.get_run(event.run_id)
            if not run.active:
                return None
            if run.state is RunState.WAITING_INPUT and event.invocation_token is not None:
                run = await client.resume(run.id, event.invocation_token)
        except ClientProblem as problem:
            if not out_of_reach(problem):
                raise
            # Refused on every delivery: skipped, so that later work comes through.
            _log().info("mcp_followup_skipped", run_id=event.run_id, code=problem.code)
            return None
        if event.message_id is not None:
            try:
                run = await client.patch_followups(
                    run.id, {event.message_id: FollowupAck.DELIVERED.value}
                )
            except ClientProblem as problem:
                if out_of_reach(problem):
                    _log().info("mcp_followup_skipped", run_id=run.id, code=problem.code)
                    return None
                if passing(problem):
                    # The server cannot take the acknowledgement now: the event stays
                    # unacknowledged, so that the next wait hands it over and acknowledges
                    # it (handed over without it, it stayed queued on the server).
                    raise
                # Acknowledged before (a redelivery): the model still hears of it.
                _log().info("mcp_followup_ack_skipped", run_id=run.id, code=problem.code)
            session.hand_over(run.id, event.message_id)
        session.take_run(run.thread_id, run.id)
        return ToolAnswer(
            text=texts.followup_text(run, event.message_id or "unknown"),
            structured=_work_document("followup", run.id, run.thread_id, event.message_id),
            outcome="followup",
        )


def _work_document(
    kind: str, run_id: str, thread_id: str | None, message_id: str | None = None
) -> dict[str, Any]:
    document = {"event": kind, "run_id": run_id}
    if thread_id is not None:
        document["thread_id"] = thread_id
    if message_id is not None:
        document["message_id"] = message_id
    return document


__all__ = ["CANCEL_REQUESTED", "FOLLOWUP", "INVOCATION", "LOGGER_NAME", "ToolAnswer", "WorkWaiter"]
