"""Ports: the protocols the services need, satisfied by the memory and PostgreSQL adapters.

Every repository lives inside a `UnitOfWork`; nothing is stored until `commit()`, and a
unit left without commit rolls back. Reads inside a unit see the unit's own writes. Each
port is defined in the submodule of its concern and named here, its one import path.
"""

from turnkeeper.application.ports.audit import (
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
)
from turnkeeper.application.ports.system import Clock, IdGenerator, InvocationClaims, TokenSigner
from turnkeeper.application.ports.unit import UnitOfWork, UnitOfWorkFactory
from turnkeeper.application.ports.world import (
    ChannelRepository,
    GrantRepository,
    PrincipalRepository,
    SpaceRepository,
    ThreadRepository,
)

__all__ = [
    "AgentCursor",
    "AgentFeedRepository",
    "AuditAction",
    "AuditLog",
    "ChannelRepository",
    "Clock",
    "DenialRecord",
    "DeniedAction",
    "EventLog",
    "FollowupRepository",
    "FreshnessRepository",
    "GrantRepository",
    "IdGenerator",
    "InvocationClaims",
    "MessageRepository",
    "PrincipalRepository",
    "RateLimitStore",
    "ReaderScope",
    "RunRepository",
    "SpaceRepository",
    "ThreadFrontier",
    "ThreadRepository",
    "TokenSigner",
    "UnitOfWork",
    "UnitOfWorkFactory",
    "VisibleWindow",
]
