"""Ports: the protocols the services need, satisfied by the memory and PostgreSQL adapters.

Every repository lives inside a `UnitOfWork`; nothing is stored until `commit()`, and a
unit left without commit rolls back. Reads inside a unit see the unit's own writes. Each
port is defined in the submodule of its concern and named here, its one import path.
"""

from turnkeeper.application.ports.audit import (
    AdminChange,
    AuditAction,
    AuditLog,
    DenialRecord,
    DeniedAction,
    RateLimitStore,
)
from turnkeeper.application.ports.freshness import (
    FreshnessRepository,
    ThreadFrontier,
    VisibleWindow,
)
from turnkeeper.application.ports.messages import EventLog, MessageRepository, ReaderScope
from turnkeeper.application.ports.runs import (
    AgentCursor,
    AgentFeedRepository,
    FollowupRepository,
    RunRepository,
    TokenFeed,
    TokenRun,
)
from turnkeeper.application.ports.system import Clock, IdGenerator, InvocationClaims, TokenSigner
from turnkeeper.application.ports.tokens import ResolvedToken, TokenRepository
from turnkeeper.application.ports.unit import UnitOfWork, UnitOfWorkFactory
from turnkeeper.application.ports.world import (
    BucketTake,
    ChannelRepository,
    GrantRepository,
    HistoryFacts,
    PostFacts,
    PrincipalRepository,
    SpaceRepository,
    ThreadRepository,
    TokenPostFacts,
)

__all__ = [
    "AdminChange",
    "AgentCursor",
    "AgentFeedRepository",
    "AuditAction",
    "AuditLog",
    "BucketTake",
    "ChannelRepository",
    "Clock",
    "DenialRecord",
    "DeniedAction",
    "EventLog",
    "FollowupRepository",
    "FreshnessRepository",
    "GrantRepository",
    "HistoryFacts",
    "IdGenerator",
    "InvocationClaims",
    "MessageRepository",
    "PostFacts",
    "PrincipalRepository",
    "RateLimitStore",
    "ReaderScope",
    "ResolvedToken",
    "RunRepository",
    "SpaceRepository",
    "ThreadFrontier",
    "ThreadRepository",
    "TokenFeed",
    "TokenPostFacts",
    "TokenRepository",
    "TokenRun",
    "TokenSigner",
    "UnitOfWork",
    "UnitOfWorkFactory",
    "VisibleWindow",
]
