"""The runtime side of turnkeeper for agents: an httpx client with the freshness gate.

`AgentRuntimeClient` polls and acknowledges the agent's events, sends heartbeats, reads
history (surfacing it to the session's freshness frontiers) and sends messages, single
or chunked, through the freshness gate of DESIGN section 9.
"""

from turnkeeper.adapters.client.errors import (
    UNEXPECTED_ANSWER,
    AnswerInvalid,
    ClientError,
    ClientProblem,
    ClientUnavailable,
)
from turnkeeper.adapters.client.models import (
    AgentEvent,
    Capabilities,
    EventPage,
    FollowupMode,
    HistoryMessage,
    HistoryPage,
    LogicalSendResult,
    SendResult,
    ThreadTarget,
)
from turnkeeper.adapters.client.runtime import AgentRuntimeClient

__all__ = [
    "UNEXPECTED_ANSWER",
    "AgentEvent",
    "AgentRuntimeClient",
    "AnswerInvalid",
    "Capabilities",
    "ClientError",
    "ClientProblem",
    "ClientUnavailable",
    "EventPage",
    "FollowupMode",
    "HistoryMessage",
    "HistoryPage",
    "LogicalSendResult",
    "SendResult",
    "ThreadTarget",
]
