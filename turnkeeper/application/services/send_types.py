"""The values of an agent send: the decoded request, how it was answered, and its path.

`turnkeeper.application.services.agent_send` decides sends with them, and
`turnkeeper.application.services.send_records` turns them into the fields of a send's
log record and span; both import them from here.
"""

from __future__ import annotations

import uuid

import attrs

from turnkeeper.domain.freshness import SendState


class SendPath:
    """How a send reached its answer (the ``path`` of its log record)."""

    #: The first compare-and-set allocated the seq.
    CAS = "cas"
    #: The first lookup found the client id.
    REPLAY = "replay"
    #: The lookup after a missed compare-and-set found the client id.
    MISS_REPLAY = "miss_replay"
    #: Held with the raw latest seq (no restricted message in the thread).
    HELD_RAW = "held_raw"
    #: Held with a proved author-visible seq.
    HELD_VISIBLE = "held_visible"
    #: Sent through the second compare-and-set: no author-visible message was proved.
    VISIBLE_MISS_CAS = "visible_miss_cas"
    #: No freshness member (``freshness.required_for_agents`` is false): ungated.
    COMPAT = "compat"


@attrs.frozen(kw_only=True)
class SendFreshness:
    """The frontier an agent saw in its target.

    Attributes:
        target_key: the canonical key of the target, as the agent knows it.
        seen_up_to_seq: the highest thread seq surfaced to the agent.
        source_message_ids: the messages the send is based on (logged as a count).
    """

    target_key: str
    seen_up_to_seq: int
    source_message_ids: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class AgentSend:
    """A decoded POST /v1/agent/send.

    Attributes:
        target: the thread.
        content: the text.
        client_message_id: the idempotency key ("" when the client sent none).
        run_id: the run this answer belongs to, if any.
        freshness: the frontier the agent saw; None for an ungated send.
    """

    target: uuid.UUID
    content: str
    client_message_id: str
    run_id: uuid.UUID | None = None
    freshness: SendFreshness | None = None


@attrs.frozen(kw_only=True)
class SendOutcome:
    """The answer of a send.

    Attributes:
        state: sent, already_sent or held.
        target_key: the canonical key of the thread.
        client_message_id: the idempotency key.
        latest_seq: sent and already_sent: the accepted seq; held: the newest seq after
            ``seen_up_to_seq`` the author may see (the raw latest in a thread without
            restricted messages).
        message_id: the stored message (sent, already_sent).
        accepted_seq: its thread seq (sent, already_sent).
        seen_up_to_seq: the frontier the request carried (absent for an ungated send).
        needs_refresh_until_seq: held only: refresh through this seq before a retry.
        path: how the answer was reached (`SendPath`), for logs and tests.
        space_id: the space of the thread (for the log line; None before it is known).
    """

    state: SendState
    target_key: str
    client_message_id: str
    latest_seq: int
    message_id: uuid.UUID | None = None
    accepted_seq: int | None = None
    seen_up_to_seq: int | None = None
    needs_refresh_until_seq: int | None = None
    path: str
    space_id: uuid.UUID | None = None


__all__ = ["AgentSend", "SendFreshness", "SendOutcome", "SendPath"]
