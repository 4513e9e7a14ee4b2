"""turnkeeper: keeps the turns of AI agents in chat threads.

The names below are the public API of the library: build the services over the memory
store (`memory_backend`) or PostgreSQL (`migrate`, then `postgres_backend`), call them with
a `Principal`, and catch the errors they raise. Everything else lives in the layers
`turnkeeper.domain` (pure rules), `turnkeeper.application` (services and ports) and
`turnkeeper.adapters` (PostgreSQL, memory, HTTP, client, command line), whose modules are
documented too but may change between minor versions.

The names are loaded on first use, so ``import turnkeeper.domain`` stays free of the
drivers and the web framework, and the core works without the ``embedded`` extra.

Example:
    >>> import turnkeeper
    >>> backend = turnkeeper.memory_backend(turnkeeper.Settings())
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # Re-exported through the literal `__all__` below (mypy --strict reads it).
    from turnkeeper.adapters.client import (
        AgentRuntimeClient,
        ClientError,
        ClientProblem,
        ClientUnavailable,
    )
    from turnkeeper.adapters.config import ConfigError, load_settings
    from turnkeeper.adapters.memory import MemoryUnitOfWorkFactory
    from turnkeeper.adapters.postgres.embedded import EmbeddedPostgres, EmbeddedServerMissing
    from turnkeeper.adapters.postgres.migrations import MigrationError, migrate
    from turnkeeper.adapters.postgres.uow import PostgresUnitOfWorkFactory
    from turnkeeper.adapters.system import SystemClock, UuidV7Generator
    from turnkeeper.adapters.tokens import JwtSigner
    from turnkeeper.adapters.wiring import Backend, memory_backend, postgres_backend
    from turnkeeper.application.bootstrap import Services, build_services
    from turnkeeper.application.bus import EventBus, MessagePosted
    from turnkeeper.application.errors import (
        ApplicationError,
        BaseVersionConflict,
        DuplicateKey,
        InvalidToken,
        RetriableConflict,
        StoreUnavailable,
        Unauthenticated,
    )
    from turnkeeper.application.services.admin import AdminService, NewPrincipal
    from turnkeeper.application.services.agent_send import AgentSendService
    from turnkeeper.application.services.conversation import (
        ConversationService,
        CreatedThread,
        EventPage,
        MessagePage,
        PostedMessage,
    )
    from turnkeeper.application.services.grants import GrantChange, GrantService
    from turnkeeper.application.services.identity import BearerToken, IdentityService
    from turnkeeper.application.services.runs.agent_feed import AgentEventPage, AgentFeedService
    from turnkeeper.application.services.runs.feed_delivery import Delivery
    from turnkeeper.application.services.runs.lifecycle import RunLifecycleService
    from turnkeeper.application.services.runs.run_jobs import RunJobsService
    from turnkeeper.application.services.runs.run_patch import FollowupOp, RunPatchService
    from turnkeeper.application.services.runs.service import RunsService
    from turnkeeper.application.services.runs.views import RunView
    from turnkeeper.application.services.send_types import AgentSend, SendFreshness, SendOutcome
    from turnkeeper.application.services.tokens import IssuedToken, OwnerTokenRefused, TokenService
    from turnkeeper.application.settings import Settings
    from turnkeeper.application.transactions import AccessDenied, ReadDenied
    from turnkeeper.domain.credentials import ApiToken
    from turnkeeper.domain.errors import (
        Conflict,
        DomainError,
        FieldError,
        Forbidden,
        IdempotencyConflict,
        InvalidStateTransition,
        NotFound,
        RateLimited,
        ValidationFailed,
    )
    from turnkeeper.domain.events import Event, EventType
    from turnkeeper.domain.followups import FollowupMode, FollowupState
    from turnkeeper.domain.messaging import Message, MessageDraft, Origin, TriggerState
    from turnkeeper.domain.runs import Run, RunState
    from turnkeeper.domain.world import (
        BillingMode,
        Channel,
        ChannelType,
        Level,
        OperatorMode,
        Principal,
        PrincipalKind,
        ResourceKind,
        Space,
        Thread,
    )

#: Where each public name is defined (the source of `__getattr__`).
_HOMES: dict[str, str] = {
    "Backend": "turnkeeper.adapters.wiring",
    "memory_backend": "turnkeeper.adapters.wiring",
    "postgres_backend": "turnkeeper.adapters.wiring",
    "MigrationError": "turnkeeper.adapters.postgres.migrations",
    "migrate": "turnkeeper.adapters.postgres.migrations",
    "EmbeddedPostgres": "turnkeeper.adapters.postgres.embedded",
    "EmbeddedServerMissing": "turnkeeper.adapters.postgres.embedded",
    "ConfigError": "turnkeeper.adapters.config",
    "load_settings": "turnkeeper.adapters.config",
    "JwtSigner": "turnkeeper.adapters.tokens",
    "PostgresUnitOfWorkFactory": "turnkeeper.adapters.postgres.uow",
    "SystemClock": "turnkeeper.adapters.system",
    "UuidV7Generator": "turnkeeper.adapters.system",
    "MemoryUnitOfWorkFactory": "turnkeeper.adapters.memory",
    "AgentRuntimeClient": "turnkeeper.adapters.client",
    "ClientError": "turnkeeper.adapters.client",
    "ClientProblem": "turnkeeper.adapters.client",
    "ClientUnavailable": "turnkeeper.adapters.client",
    "Services": "turnkeeper.application.bootstrap",
    "build_services": "turnkeeper.application.bootstrap",
    "Settings": "turnkeeper.application.settings",
    "AdminService": "turnkeeper.application.services.admin",
    "NewPrincipal": "turnkeeper.application.services.admin",
    "IdentityService": "turnkeeper.application.services.identity",
    "GrantChange": "turnkeeper.application.services.grants",
    "GrantService": "turnkeeper.application.services.grants",
    "IssuedToken": "turnkeeper.application.services.tokens",
    "OwnerTokenRefused": "turnkeeper.application.services.tokens",
    "TokenService": "turnkeeper.application.services.tokens",
    "ApiToken": "turnkeeper.domain.credentials",
    "ConversationService": "turnkeeper.application.services.conversation",
    "CreatedThread": "turnkeeper.application.services.conversation",
    "EventPage": "turnkeeper.application.services.conversation",
    "MessagePage": "turnkeeper.application.services.conversation",
    "PostedMessage": "turnkeeper.application.services.conversation",
    "AgentEventPage": "turnkeeper.application.services.runs.agent_feed",
    "AgentFeedService": "turnkeeper.application.services.runs.agent_feed",
    "Delivery": "turnkeeper.application.services.runs.feed_delivery",
    "RunLifecycleService": "turnkeeper.application.services.runs.lifecycle",
    "RunJobsService": "turnkeeper.application.services.runs.run_jobs",
    "RunPatchService": "turnkeeper.application.services.runs.run_patch",
    "RunsService": "turnkeeper.application.services.runs.service",
    "RunView": "turnkeeper.application.services.runs.views",
    "AgentSend": "turnkeeper.application.services.send_types",
    "AgentSendService": "turnkeeper.application.services.agent_send",
    "SendFreshness": "turnkeeper.application.services.send_types",
    "SendOutcome": "turnkeeper.application.services.send_types",
    "AccessDenied": "turnkeeper.application.transactions",
    "ReadDenied": "turnkeeper.application.transactions",
    "BearerToken": "turnkeeper.application.services.identity",
    "FollowupOp": "turnkeeper.application.services.runs.run_patch",
    "MessagePosted": "turnkeeper.application.bus",
    "EventBus": "turnkeeper.application.bus",
    "DuplicateKey": "turnkeeper.application.errors",
    "RetriableConflict": "turnkeeper.application.errors",
    "ApplicationError": "turnkeeper.application.errors",
    "BaseVersionConflict": "turnkeeper.application.errors",
    "InvalidToken": "turnkeeper.application.errors",
    "StoreUnavailable": "turnkeeper.application.errors",
    "Unauthenticated": "turnkeeper.application.errors",
    "Conflict": "turnkeeper.domain.errors",
    "DomainError": "turnkeeper.domain.errors",
    "FieldError": "turnkeeper.domain.errors",
    "Forbidden": "turnkeeper.domain.errors",
    "IdempotencyConflict": "turnkeeper.domain.errors",
    "InvalidStateTransition": "turnkeeper.domain.errors",
    "NotFound": "turnkeeper.domain.errors",
    "RateLimited": "turnkeeper.domain.errors",
    "ValidationFailed": "turnkeeper.domain.errors",
    "BillingMode": "turnkeeper.domain.world",
    "Channel": "turnkeeper.domain.world",
    "ChannelType": "turnkeeper.domain.world",
    "Level": "turnkeeper.domain.world",
    "OperatorMode": "turnkeeper.domain.world",
    "Principal": "turnkeeper.domain.world",
    "PrincipalKind": "turnkeeper.domain.world",
    "ResourceKind": "turnkeeper.domain.world",
    "Space": "turnkeeper.domain.world",
    "Thread": "turnkeeper.domain.world",
    "Message": "turnkeeper.domain.messaging",
    "MessageDraft": "turnkeeper.domain.messaging",
    "Origin": "turnkeeper.domain.messaging",
    "TriggerState": "turnkeeper.domain.messaging",
    "Event": "turnkeeper.domain.events",
    "EventType": "turnkeeper.domain.events",
    "Run": "turnkeeper.domain.runs",
    "RunState": "turnkeeper.domain.runs",
    "FollowupMode": "turnkeeper.domain.followups",
    "FollowupState": "turnkeeper.domain.followups",
}

try:
    __version__: str = version("turnkeeper")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0.0.0+unknown"

# A literal list, not one computed from `_HOMES`: type checkers read only a literal one
# (`from turnkeeper import *` in a checked program); a unit test keeps the two equal.
__all__ = [
    "AccessDenied",
    "AdminService",
    "AgentEventPage",
    "AgentFeedService",
    "AgentRuntimeClient",
    "AgentSend",
    "AgentSendService",
    "ApiToken",
    "ApplicationError",
    "Backend",
    "BaseVersionConflict",
    "BearerToken",
    "BillingMode",
    "Channel",
    "ChannelType",
    "ClientError",
    "ClientProblem",
    "ClientUnavailable",
    "ConfigError",
    "Conflict",
    "ConversationService",
    "CreatedThread",
    "Delivery",
    "DomainError",
    "DuplicateKey",
    "EmbeddedPostgres",
    "EmbeddedServerMissing",
    "Event",
    "EventBus",
    "EventPage",
    "EventType",
    "FieldError",
    "FollowupMode",
    "FollowupOp",
    "FollowupState",
    "Forbidden",
    "GrantChange",
    "GrantService",
    "IdempotencyConflict",
    "IdentityService",
    "InvalidStateTransition",
    "InvalidToken",
    "IssuedToken",
    "JwtSigner",
    "Level",
    "MemoryUnitOfWorkFactory",
    "Message",
    "MessageDraft",
    "MessagePage",
    "MessagePosted",
    "MigrationError",
    "NewPrincipal",
    "NotFound",
    "OperatorMode",
    "Origin",
    "OwnerTokenRefused",
    "PostedMessage",
    "PostgresUnitOfWorkFactory",
    "Principal",
    "PrincipalKind",
    "RateLimited",
    "ReadDenied",
    "ResourceKind",
    "RetriableConflict",
    "Run",
    "RunJobsService",
    "RunLifecycleService",
    "RunPatchService",
    "RunState",
    "RunView",
    "RunsService",
    "SendFreshness",
    "SendOutcome",
    "Services",
    "Settings",
    "Space",
    "StoreUnavailable",
    "SystemClock",
    "Thread",
    "TokenService",
    "TriggerState",
    "Unauthenticated",
    "UuidV7Generator",
    "ValidationFailed",
    "__version__",
    "build_services",
    "load_settings",
    "memory_backend",
    "migrate",
    "postgres_backend",
]


# Hidden from type checkers: a module `__getattr__` they can see makes every misspelled
# name under `turnkeeper.` an `Any` instead of an error; they read the imports above.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        """Load a public name from its module on first use (PEP 562).

        Args:
            name: the attribute asked for.

        Returns:
            The object.

        Raises:
            AttributeError: for a name that is not public.
        """
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module 'turnkeeper' has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        """The public names, for completion in shells and editors."""
        return __all__
