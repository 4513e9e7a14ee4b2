"""The unit of work over every repository, and the factory that opens units.

Nothing is stored until `UnitOfWork.commit`; a unit left without commit rolls back.
Reads inside a unit see the unit's own writes.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Protocol

from turnkeeper.application.ports.audit import AuditLog, RateLimitStore
from turnkeeper.application.ports.freshness import FreshnessRepository
from turnkeeper.application.ports.messages import EventLog, MessageRepository
from turnkeeper.application.ports.runs import (
    AgentFeedRepository,
    FollowupRepository,
    RunRepository,
)
from turnkeeper.application.ports.tokens import TokenRepository
from turnkeeper.application.ports.world import (
    ChannelRepository,
    GrantRepository,
    PrincipalRepository,
    SpaceRepository,
    ThreadRepository,
)


class UnitOfWork(Protocol):
    """One transaction over every repository; rolls back unless `commit` is called."""

    @property
    def principals(self) -> PrincipalRepository:
        """The principals repository of this unit."""
        ...

    @property
    def tokens(self) -> TokenRepository:
        """The API tokens repository of this unit."""
        ...

    @property
    def spaces(self) -> SpaceRepository:
        """The spaces repository of this unit."""
        ...

    @property
    def channels(self) -> ChannelRepository:
        """The channels repository of this unit."""
        ...

    @property
    def threads(self) -> ThreadRepository:
        """The threads repository of this unit."""
        ...

    @property
    def grants(self) -> GrantRepository:
        """The grants repository of this unit."""
        ...

    @property
    def messages(self) -> MessageRepository:
        """The messages repository of this unit."""
        ...

    @property
    def events(self) -> EventLog:
        """The events repository of this unit."""
        ...

    @property
    def audit(self) -> AuditLog:
        """The audit repository of this unit."""
        ...

    @property
    def buckets(self) -> RateLimitStore:
        """The buckets repository of this unit."""
        ...

    @property
    def runs(self) -> RunRepository:
        """The runs repository of this unit."""
        ...

    @property
    def agent_feed(self) -> AgentFeedRepository:
        """The agent feed repository of this unit."""
        ...

    @property
    def followups(self) -> FollowupRepository:
        """The follow-ups repository of this unit."""
        ...

    @property
    def freshness(self) -> FreshnessRepository:
        """The freshness gate's allocator and visibility check of this unit."""
        ...

    async def commit(self) -> None:
        """Make every change of the unit durable, atomically."""
        ...


class UnitOfWorkFactory(Protocol):
    """Opens units of work."""

    def __call__(self) -> AbstractAsyncContextManager[UnitOfWork]:
        """A new unit; leaving the context without commit rolls back."""
        ...

    def read_only(self) -> AbstractAsyncContextManager[UnitOfWork]:
        """A unit for reads only: no locks taken, no writes, nothing to commit.

        Each statement sees the latest committed state, exactly as it would inside a READ
        COMMITTED transaction, so a read-only use case needs no transaction of its own
        (which saves PostgreSQL the BEGIN and COMMIT round trips).
        """
        ...
