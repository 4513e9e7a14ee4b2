"""Typed values the agent runtime client returns (frozen attrs, no HTTP types).

Tokens and message content never appear in a ``repr``, so a value that reaches a log
line by accident leaks neither.
"""

from __future__ import annotations

import enum
import uuid
from datetime import datetime

import attrs

from turnkeeper.domain.freshness import HELD_GUIDANCE, SendState
from turnkeeper.domain.logical_sends import PARTIAL_HELD_GUIDANCE, AcceptedChunk, LogicalSendState

#: A thread, run or message id as the caller holds it (text or UUID).
Id = str | uuid.UUID


class FollowupMode(enum.StrEnum):
    """How the agent takes follow-ups written while it runs (heartbeat capability)."""

    STEER = "steer"
    QUEUE = "queue"


@attrs.frozen(kw_only=True)
class Capabilities:
    """What the agent runtime announces in its heartbeat.

    Attributes:
        followups: steer or queue; None when the runtime takes no follow-ups.
    """

    followups: FollowupMode | None = None


@attrs.frozen(kw_only=True)
class AgentEvent:
    """One personal event of the agent feed (GET /v1/agent/events).

    Attributes:
        seq: the event's position in the log; the ack cursor, never a thread seq.
        type: ``agent.invocation``, ``agent.followup`` or ``run.cancel_requested``.
        created_at: when the event was written.
        actor_id: who caused it.
        thread_id: the thread of the run (payload, else scope).
        run_id: the run (payload).
        message_id: the triggering or follow-up message (payload).
        invocation_token: fresh on every delivery of agent.invocation and
            agent.followup; never shown in ``repr``.
        redelivered: True when the event was delivered before without an ack.
    """

    seq: int
    type: str
    created_at: datetime
    actor_id: str
    thread_id: str | None = None
    run_id: str | None = None
    message_id: str | None = None
    invocation_token: str | None = attrs.field(default=None, repr=False)
    redelivered: bool = False


@attrs.frozen(kw_only=True)
class EventPage:
    """One page of the agent feed.

    Attributes:
        events: the events, in seq order.
        next_after: the cursor of the next call (and the ``through_seq`` to ack).
    """

    events: tuple[AgentEvent, ...]
    next_after: int


@attrs.frozen(kw_only=True)
class ThreadTarget:
    """A thread as a send target.

    Attributes:
        thread_id: the thread.
        target_key: the canonical key the server derives from it.
        latest_seq: the raw frontier of the thread when it was read. It is not a
            surface and does not move the session's frontiers.
    """

    thread_id: str
    target_key: str
    latest_seq: int


@attrs.frozen(kw_only=True)
class HistoryMessage:
    """A message of a thread's history, as the agent may see it.

    Attributes:
        id: the message.
        thread_id: its thread.
        thread_seq: its seq in the thread.
        author_id: the author.
        author_kind: person, agent or app.
        author_handle: the author's handle.
        origin: human, agent, app or system.
        kind: text, system or run.
        content: the text (never shown in ``repr``).
        mentions: mentioned principal ids.
        created_at: when it was written.
        reply_to_id: the replied message, if any.
        run_id: the run of a run anchor.
    """

    id: str
    thread_id: str
    thread_seq: int
    author_id: str
    author_kind: str
    author_handle: str
    origin: str
    kind: str
    content: str = attrs.field(repr=False)
    mentions: tuple[str, ...] = ()
    created_at: datetime
    reply_to_id: str | None = None
    run_id: str | None = None


class TriggerOutcome(enum.StrEnum):
    """What became of a created message (API.md Trigger ``outcome``)."""

    RUN_OPENED = "run_opened"
    FOLLOWUP = "followup"
    REFUSED = "refused"
    NONE = "none"


class AppliedFollowupMode(enum.StrEnum):
    """How a follow-up reaches the agent: now, at its next input boundary, or not."""

    STEER = "steer"
    QUEUE = "queue"
    NONE = "none"


@attrs.frozen(kw_only=True)
class Trigger:
    """The ``trigger`` of a create answer, the same on every replay.

    Attributes:
        outcome: run_opened, followup, refused or none.
        run_id: the run opened, or the run the follow-up was accepted into.
        mode: a follow-up's mode (steer, queue or none).
        reason: a refusal's reason (the message's trigger_state_reason).
    """

    outcome: TriggerOutcome
    run_id: str | None = None
    mode: AppliedFollowupMode | None = None
    reason: str | None = None


@attrs.frozen(kw_only=True)
class PostedMessage:
    """The answer of POST /v1/threads/{id}/messages (or of its replay).

    Attributes:
        message: the message as committed (or, on a replay, as it is now).
        trigger: what became of it.
        replayed: True for the replay of an earlier identical request.
    """

    message: HistoryMessage
    trigger: Trigger
    replayed: bool = False


@attrs.frozen(kw_only=True)
class HistoryPage:
    """A page of a thread's history.

    Attributes:
        thread_id: the thread.
        target_key: its canonical key.
        messages: the messages the agent may see, in seq order.
        covers_through_seq: the page proves the history through this seq; the session's
            observed frontier has been advanced to it.
    """

    thread_id: str
    target_key: str
    messages: tuple[HistoryMessage, ...]
    covers_through_seq: int


@attrs.frozen(kw_only=True)
class SendResult:
    """The outcome of one send.

    Attributes:
        state: sent, already_sent or held.
        target_key: the canonical target key.
        client_message_id: the idempotency key of the send.
        seen_up_to_seq: the frontier the send carried (or would have carried).
        latest_seq: the target's frontier the server (or, held locally, the session)
            knows.
        message_id: the stored message (sent, already_sent).
        accepted_seq: its thread seq (sent, already_sent).
        needs_refresh_until_seq: through which seq to refresh (held).
        held_locally: True when the session held the send without a request.
    """

    state: SendState
    target_key: str
    client_message_id: str
    seen_up_to_seq: int
    latest_seq: int
    message_id: str | None = None
    accepted_seq: int | None = None
    needs_refresh_until_seq: int | None = None
    held_locally: bool = False

    @property
    def guidance(self) -> str | None:
        """The text for the runtime: a refresh instruction when held, else None.

        It names no sequence, key or id: freshness internals stay out of the runtime.
        """
        return HELD_GUIDANCE if self.state is SendState.HELD else None


@attrs.frozen(kw_only=True)
class LogicalSendResult:
    """The outcome of a logical (chunked) send.

    For the program driving the runtime it keeps the facts (which chunks the server
    holds, where and why it stopped); the runtime itself gets only `guidance`, which
    names no chunk, seq, key or id.

    Attributes:
        state: sent, already_sent, held (no chunk stored) or partial_held.
        logical_id: the id of the logical send (reuse it to retry).
        target_key: the canonical target key.
        chunk_count: how many chunks the content has.
        accepted: the chunks the server holds, in order (replays marked).
        held_chunk_index: the first chunk not sent, when held.
        latest_seq: the frontier that held it, when held.
        held_locally: True when the session held that chunk without a request.
    """

    state: LogicalSendState
    logical_id: str
    target_key: str
    chunk_count: int
    accepted: tuple[AcceptedChunk, ...]
    held_chunk_index: int | None = None
    latest_seq: int | None = None
    held_locally: bool = False

    @property
    def guidance(self) -> str | None:
        """The text for the runtime when (partly) held, else None."""
        if self.state is LogicalSendState.PARTIAL_HELD:
            return PARTIAL_HELD_GUIDANCE
        if self.state is LogicalSendState.HELD:
            return HELD_GUIDANCE
        return None
