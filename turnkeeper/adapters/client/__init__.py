"""The runtime side of turnkeeper for agents: an httpx client with the freshness gate.

`AgentRuntimeClient` covers the agent's whole loop: it follows the agent's event stream
(reconnecting with Last-Event-ID, acknowledging handled events) or long-polls it, moves
runs (start, await input, resume, finish, follow-up acknowledgements), sends heartbeats,
reads history (surfacing it to the session's freshness frontiers) and sends messages,
single or chunked, through the freshness gate of DESIGN section 9.
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
    AppliedFollowupMode,
    Capabilities,
    EventPage,
    FollowupMode,
    HistoryMessage,
    HistoryPage,
    LogicalSendResult,
    PostedMessage,
    SendResult,
    ThreadTarget,
    Trigger,
    TriggerOutcome,
)
from turnkeeper.adapters.client.runs import FollowupAck, Run, RunState
from turnkeeper.adapters.client.runtime import AgentRuntimeClient

__all__ = [
    "UNEXPECTED_ANSWER",
    "AgentEvent",
    "AgentRuntimeClient",
    "AnswerInvalid",
    "AppliedFollowupMode",
    "Capabilities",
    "ClientError",
    "ClientProblem",
    "ClientUnavailable",
    "EventPage",
    "FollowupAck",
    "FollowupMode",
    "HistoryMessage",
    "HistoryPage",
    "LogicalSendResult",
    "PostedMessage",
    "Run",
    "RunState",
    "SendResult",
    "ThreadTarget",
    "Trigger",
    "TriggerOutcome",
]
