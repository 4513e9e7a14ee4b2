"""The fields of a freshness-gate send, for its log record and its span (seed section 7).

One vocabulary for both: a log line and the span of the same send are searched with the
same keys (``agent_id``, ``target_key``, ``state``, ``seen_up_to_seq``, ``latest_seq``,
``accepted_seq`` ...). Message content and tokens are never among them.
"""

from __future__ import annotations

from typing import Any

from turnkeeper.application.logs import get_logger
from turnkeeper.application.services.send_types import AgentSend, SendOutcome, SendPath
from turnkeeper.application.telemetry import AttributeValue, SendAnswered, TelemetryHub
from turnkeeper.domain.errors import DomainError
from turnkeeper.domain.freshness import SendState
from turnkeeper.domain.messaging import Message
from turnkeeper.domain.world import Principal, thread_target_key

#: The logger of every send outcome (one record per answered or refused send).
LOGGER_NAME = "turnkeeper.freshness"


def send_log() -> Any:
    """The logger of send records (a fresh proxy per record: it follows the configuration)."""
    return get_logger(LOGGER_NAME)


def request_fields(actor: Principal, request: AgentSend) -> dict[str, AttributeValue]:
    """The fields every record of a send has, answered or refused.

    Args:
        actor: the sending principal.
        request: the decoded request.

    Returns:
        ``agent_id``, ``target_key`` (the canonical key of the target),
        ``client_message_id``, ``gated`` and, for a gated send, ``seen_up_to_seq``,
        ``source_message_count`` and ``target_key_valid``.
    """
    fields: dict[str, AttributeValue] = {
        "agent_id": str(actor.id),
        "target_key": thread_target_key(request.target),
        "client_message_id": request.client_message_id,
        "gated": request.freshness is not None,
    }
    if request.freshness is not None:
        fields["seen_up_to_seq"] = request.freshness.seen_up_to_seq
        fields["source_message_count"] = len(request.freshness.source_message_ids)
        fields["target_key_valid"] = request.freshness.target_key == fields["target_key"]
    return fields


def seq_delta(outcome: SendOutcome) -> int | None:
    """How far a held send was behind: ``latest_seq - seen_up_to_seq``.

    Args:
        outcome: the answer.

    Returns:
        The distance for a held gated send, None for every other answer.
    """
    if outcome.state is SendState.HELD and outcome.seen_up_to_seq is not None:
        return outcome.latest_seq - outcome.seen_up_to_seq
    return None


def outcome_fields(
    actor: Principal, request: AgentSend, outcome: SendOutcome
) -> dict[str, AttributeValue]:
    """The fields of an answered send.

    Args:
        actor: the sending agent.
        request: the request.
        outcome: the answer.

    Returns:
        `request_fields` plus ``space_id``, ``state``, ``path``, ``latest_seq`` and,
        where they apply, ``accepted_seq``, ``needs_refresh_until_seq`` and
        ``seq_delta``.
    """
    fields = request_fields(actor, request)
    if outcome.space_id is not None:
        fields["space_id"] = str(outcome.space_id)
    fields.update(
        state=outcome.state.value,
        path=outcome.path,
        latest_seq=outcome.latest_seq,
    )
    if outcome.accepted_seq is not None:
        fields["accepted_seq"] = outcome.accepted_seq
    if outcome.needs_refresh_until_seq is not None:
        fields["needs_refresh_until_seq"] = outcome.needs_refresh_until_seq
    delta = seq_delta(outcome)
    if delta is not None:
        fields["seq_delta"] = delta
    return fields


def refused_fields(
    actor: Principal, request: AgentSend, refused: DomainError
) -> dict[str, AttributeValue]:
    """The fields of a refused send: `request_fields`, the problem code and reason.

    Args:
        actor: the sending principal.
        request: the request.
        refused: the error it was refused with.

    Returns:
        `request_fields` plus ``state`` (``refused``), ``code`` and ``reason``.
    """
    fields = request_fields(actor, request)
    fields.update(state="refused", code=refused.code)
    if refused.reason is not None:
        fields["reason"] = refused.reason
    return fields


def report_ungated(
    telemetry: TelemetryHub, author: Principal, message: Message, replayed: bool
) -> None:
    """Record an agent's message written through createMessage or createThread.

    Those are the agent's ungated compatibility path (DESIGN section 9): it is logged
    as an ``agent_send`` record with ``gated`` false and reported as an ungated send
    answer, as a send without freshness is: ``sent`` for a message written (a
    compatibility count), ``already_sent`` for an idempotent replay, which wrote
    nothing (a retry only). A person's message is no send: nothing is recorded.

    Args:
        telemetry: where the answer is counted.
        author: the message's author.
        message: the stored message (or the replayed original).
        replayed: whether the request was an idempotent replay.
    """
    if not author.is_agent:
        return
    state = SendState.ALREADY_SENT if replayed else SendState.SENT
    send_log().info(
        "agent_send",
        agent_id=str(author.id),
        target_key=thread_target_key(message.thread_id),
        client_message_id=message.client_msg_id or "",
        gated=False,
        state=state.value,
        path=SendPath.REPLAY if replayed else SendPath.COMPAT,
        accepted_seq=message.thread_seq,
    )
    telemetry.send_answered(SendAnswered(state=state.value, gated=False))


__all__ = [
    "LOGGER_NAME",
    "outcome_fields",
    "refused_fields",
    "report_ungated",
    "request_fields",
    "send_log",
    "seq_delta",
]
