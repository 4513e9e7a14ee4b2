"""Answers of the Runs and Agent runtime sections of API.md (see `answers` for the rules)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal, cast

import msgspec
from msgspec import UNSET, UnsetType

from turnkeeper.adapters.http.answers import Answer, Event, optional, utc
from turnkeeper.application.services import agent_send, runs


class RunFollowup(Answer):
    """One follow-up of a run."""

    state: str


class Run(Answer):
    """The run document; its version is also the ETag."""

    id: uuid.UUID
    thread_id: uuid.UUID
    agent_id: uuid.UUID
    state: Literal["queued", "running", "waiting_input", "completed", "failed", "cancelled"]
    trigger_kind: Literal["message"]
    triggering_message_id: uuid.UUID
    triggered_by: uuid.UUID
    version: int
    followups: dict[str, RunFollowup]
    created_at: datetime
    updated_at: datetime
    state_reason: str | UnsetType = UNSET
    cancel_requested: bool | UnsetType = UNSET

    @classmethod
    def of(cls, view: runs.RunView) -> Run:
        """The answer of a run; ``cancel_requested`` only when true."""
        run = view.run
        return cls(
            id=run.id,
            thread_id=run.thread_id,
            agent_id=run.agent_id,
            state=run.state.value,
            # Runs are opened by messages; TriggerKind.FOLLOWUP names tokens only.
            trigger_kind=cast(Literal["message"], run.trigger_kind.value),
            triggering_message_id=run.triggering_message_id,
            triggered_by=run.triggered_by,
            version=run.version,
            followups={str(k): RunFollowup(state=v) for k, v in view.followups.items()},
            created_at=utc(run.created_at),
            updated_at=utc(run.updated_at),
            state_reason=optional(run.state_reason),
            cancel_requested=True if run.cancel_requested else UNSET,
        )


class AgentEvent(Event, kw_only=True):
    """An event of an agent's personal feed, with a fresh token where it applies."""

    invocation_token: str | UnsetType = UNSET
    redelivered: bool | UnsetType = UNSET

    @classmethod
    def delivered(cls, delivery: runs.Delivery) -> AgentEvent:
        """The answer of one delivery; ``redelivered`` only when true."""
        return cls(
            **msgspec.structs.asdict(Event.of(delivery.event)),
            invocation_token=optional(delivery.invocation_token),
            redelivered=True if delivery.redelivered else UNSET,
        )


class AgentEventPage(Answer):
    """One page of an agent's feed."""

    events: list[AgentEvent]
    next_after: int

    @classmethod
    def of(cls, page: runs.AgentEventPage) -> AgentEventPage:
        """The answer of a poll."""
        return cls(
            events=[AgentEvent.delivered(d) for d in page.deliveries], next_after=page.next_after
        )


class AgentSendResult(Answer):
    """Answer of POST /v1/agent/send: sent, already_sent or held."""

    state: Literal["sent", "already_sent", "held"]
    target_key: str
    client_message_id: str
    latest_seq: int
    message_id: uuid.UUID | UnsetType = UNSET
    seen_up_to_seq: int | UnsetType = UNSET
    accepted_seq: int | UnsetType = UNSET
    needs_refresh_until_seq: int | UnsetType = UNSET

    @classmethod
    def of(cls, outcome: agent_send.SendOutcome) -> AgentSendResult:
        """The answer of a send."""
        return cls(
            state=outcome.state.value,
            target_key=outcome.target_key,
            client_message_id=outcome.client_message_id,
            latest_seq=outcome.latest_seq,
            message_id=optional(outcome.message_id),
            seen_up_to_seq=optional(outcome.seen_up_to_seq),
            accepted_seq=optional(outcome.accepted_seq),
            needs_refresh_until_seq=optional(outcome.needs_refresh_until_seq),
        )
