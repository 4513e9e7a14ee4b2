"""The run lifecycle in the agent runtime client (API.md, Runs).

`RunCalls` gives `turnkeeper.adapters.client.AgentRuntimeClient` the agent's side of a
run: start it with the token of the invocation's delivery, ask for input and resume
with the token of the follow-up that answers, finish it, and acknowledge follow-ups
(PATCH with ``base_version``, re-read and retried once when the run moved on).

Example:
    >>> async def work(client: AgentRuntimeClient, event: AgentEvent) -> None:
    ...     # An agent.invocation event carries both (other events may not).
    ...     assert event.run_id is not None and event.invocation_token is not None
    ...     run = await client.start(event.run_id, event.invocation_token)
    ...     await client.send(run.thread_id, "On it.", f"{run.id}:ack", run_id=run.id)
    ...     await client.finish(run.id, "completed")
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs
import httpx
import msgspec

from turnkeeper.adapters.client import wire
from turnkeeper.adapters.client.errors import ClientProblem

Id = str | uuid.UUID

#: Attempts of a follow-up patch whose ``base_version`` was overtaken (re-read between).
PATCH_ATTEMPTS = 3


class RunState(enum.StrEnum):
    """The states of a run."""

    QUEUED = "queued"
    RUNNING = "running"
    WAITING_INPUT = "waiting_input"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class FollowupAck(enum.StrEnum):
    """What an agent may say about a follow-up: it got it, or it took it into account."""

    DELIVERED = "delivered"
    ABSORBED = "absorbed"


@attrs.frozen(kw_only=True)
class Run:
    """A run as the server answers it.

    Attributes:
        id: the run.
        thread_id: its thread.
        agent_id: its agent.
        state: its state.
        version: its version (the ``base_version`` of a patch).
        triggering_message_id: the message that opened it.
        triggered_by: the author of that message.
        followups: follow-up states by message id.
        state_reason: why it ended, for failed and cancelled runs.
        cancel_requested: a person asked the running run to stop.
        created_at: when it was opened.
        updated_at: when it last changed.
    """

    id: str
    thread_id: str
    agent_id: str
    state: RunState
    version: int
    triggering_message_id: str
    triggered_by: str
    followups: Mapping[str, str]
    created_at: datetime
    updated_at: datetime
    state_reason: str | None = None
    cancel_requested: bool = False

    @property
    def active(self) -> bool:
        """Queued, running or waiting for input."""
        return self.state in (RunState.QUEUED, RunState.RUNNING, RunState.WAITING_INPUT)


class _Followup(msgspec.Struct):
    state: str


class _Run(msgspec.Struct):
    id: str
    thread_id: str
    agent_id: str
    state: RunState
    version: int
    triggering_message_id: str
    triggered_by: str
    created_at: datetime
    updated_at: datetime
    followups: dict[str, _Followup] = msgspec.field(default_factory=dict)
    state_reason: str | None = None
    cancel_requested: bool = False


def run_of(response: httpx.Response) -> Run:
    """Decode a Run answer.

    Args:
        response: a 200 answer of a run route.

    Returns:
        The run.

    Raises:
        AnswerInvalid: when the body is not a Run.
    """
    run = wire.decode(response, _Run)
    return Run(
        id=run.id,
        thread_id=run.thread_id,
        agent_id=run.agent_id,
        state=run.state,
        version=run.version,
        triggering_message_id=run.triggering_message_id,
        triggered_by=run.triggered_by,
        followups={k: v.state for k, v in run.followups.items()},
        created_at=run.created_at,
        updated_at=run.updated_at,
        state_reason=run.state_reason,
        cancel_requested=run.cancel_requested,
    )


class RunCalls:
    """The run routes of an agent's client (mixed into `AgentRuntimeClient`)."""

    async def _request(
        self,
        method: str,
        path: str,
        *,
        json: Mapping[str, Any] | None = None,
        params: Mapping[str, int] | None = None,
    ) -> httpx.Response:
        raise NotImplementedError  # pragma: no cover (the client's own wins)

    async def get_run(self, run_id: Id) -> Run:
        """Read a run of the agent's threads.

        Raises:
            ClientProblem: on an error answer (404 for a run the agent may not read).
            ClientUnavailable: when the server cannot be reached.
        """
        return run_of(await self._request("GET", f"/v1/runs/{run_id}"))

    async def start(self, run_id: Id, invocation_token: str) -> Run:
        """Queued -> running, with the token of the invocation's delivery.

        Args:
            run_id: the run of an ``agent.invocation``.
            invocation_token: that delivery's token.

        Raises:
            ClientProblem: 403 invocation_token_invalid (superseded, expired), 409 when
                the run is no longer queued.
            ClientUnavailable: when the server cannot be reached.
        """
        body = {"invocation_token": invocation_token}
        return run_of(await self._request("POST", f"/v1/runs/{run_id}/start", json=body))

    async def await_input(self, run_id: Id, question: str | None = None) -> Run:
        """Running -> waiting_input: the run waits for a person's answer.

        Args:
            run_id: the run.
            question: what the agent asks (shown by the agent itself, not stored).

        Raises:
            ClientProblem: 409 when the run is not running.
            ClientUnavailable: when the server cannot be reached.
        """
        body = {} if question is None else {"question": question}
        return run_of(await self._request("POST", f"/v1/runs/{run_id}/await-input", json=body))

    async def resume(self, run_id: Id, invocation_token: str) -> Run:
        """waiting_input -> running, with the token of the follow-up that answers.

        Raises:
            ClientProblem: 403 invocation_token_invalid for any older token.
            ClientUnavailable: when the server cannot be reached.
        """
        body = {"invocation_token": invocation_token}
        return run_of(await self._request("POST", f"/v1/runs/{run_id}/resume", json=body))

    async def finish(self, run_id: Id, state: str, reason: str | None = None) -> Run:
        """End the run: completed, failed or cancelled (repeating it changes nothing).

        Args:
            run_id: the run.
            state: ``completed``, ``failed`` or ``cancelled``.
            reason: why, for failed and cancelled.

        Raises:
            ClientProblem: 409 for a queued run or one that ended otherwise.
            ClientUnavailable: when the server cannot be reached.
        """
        body: dict[str, str] = {"state": RunState(state).value}
        if reason is not None:
            body["reason"] = reason
        return run_of(await self._request("POST", f"/v1/runs/{run_id}/finish", json=body))

    async def patch_followups(
        self, run_id: Id, acks: Mapping[Id, str], *, base_version: int | None = None
    ) -> Run:
        """Acknowledge follow-ups of a run (all or nothing, forward only).

        Without `base_version` the run is read first, and a patch overtaken by another
        change of the run (409 base_version_conflict) is re-read and sent again, up to
        `PATCH_ATTEMPTS` times.

        Args:
            run_id: the run.
            acks: follow-up message id -> ``delivered`` or ``absorbed``.
            base_version: the version the patch is based on; given, it is sent once.

        Returns:
            The patched run.

        Raises:
            ClientProblem: 400 patch_target_missing for a message that is no follow-up
                of the run, 409 base_version_conflict (with `base_version` given, or
                when every attempt was overtaken).
            ClientUnavailable: when the server cannot be reached.
        """
        ops = [
            {
                "op": "replace",
                "path": f"/followups/{message_id}/state",
                "value": FollowupAck(state).value,
            }
            for message_id, state in acks.items()
        ]
        attempts = 1 if base_version is not None else PATCH_ATTEMPTS
        for attempt in range(1, attempts + 1):
            version = (
                base_version if base_version is not None else (await self.get_run(run_id)).version
            )
            body = {"base_version": version, "ops": ops}
            try:
                return run_of(await self._request("PATCH", f"/v1/runs/{run_id}", json=body))
            except ClientProblem as problem:
                if problem.code != "base_version_conflict" or attempt == attempts:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover
