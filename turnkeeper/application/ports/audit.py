"""The audit of denials and the stored rate-limit buckets."""

from __future__ import annotations

import enum
import uuid
from datetime import datetime
from typing import Protocol, TypeAlias

import attrs

from turnkeeper.domain.authorization import Action


class AuditAction(enum.StrEnum):
    """What a denial refused, beyond the `Action` of a channel or thread."""

    AGENT_INVOKE = "agent.invoke"
    FOLLOWUP_CREATE = "run.followup.create"
    AGENT_EVENTS_CONSUME = "agent.events.consume"
    AGENT_HEARTBEAT = "agent.heartbeat"
    AGENT_SEND = "agent.send"
    RUN_UPDATE = "run.update"
    PRINCIPAL_CREATE = "principal.create"
    SPACE_CREATE = "space.create"
    CHANNEL_CREATE = "channel.create"
    CHANNEL_BEHAVIOR = "channel.behavior"
    CHANNEL_OPERATOR = "channel.operator"
    CHANNEL_ARCHIVE = "channel.archive"
    GRANT_CREATE = "grant.create"
    GRANT_DELETE = "grant.delete"
    AGENT_CONFIG = "agent.config"


#: The action of an audited denial: an authorization action or one of the services'.
DeniedAction: TypeAlias = Action | AuditAction


@attrs.frozen(kw_only=True)
class DenialRecord:
    """One aggregated audit row.

    Attributes:
        principal_id: who was denied.
        action: the action.
        reason: why.
        window_start: the start of the aggregation window.
        count: denials in the window.
    """

    principal_id: uuid.UUID
    action: str
    reason: str
    window_start: datetime
    count: int


class AuditLog(Protocol):
    """Audit of authorization denials, aggregated per window."""

    async def record_denial(
        self, principal_id: uuid.UUID, action: DeniedAction, reason: str, window_start: datetime
    ) -> None:
        """Count a denial in the row of its principal, action, reason and window."""
        ...

    async def denials(self, principal_id: uuid.UUID) -> list[DenialRecord]:
        """The aggregated denials of a principal, oldest window first."""
        ...


class RateLimitStore(Protocol):
    """Stored token buckets per principal and class."""

    async def take_token(
        self,
        principal_id: uuid.UUID,
        limit_class: str,
        now: datetime,
        *,
        burst: int,
        per_minute: int,
    ) -> int | None:
        """Take one token, refilling the bucket for the time that passed.

        The rule is `turnkeeper.domain.ratelimit.take_token`'s; the bucket stays locked until the
        unit ends, so concurrent takes of one principal serialize, and a principal's
        first take creates a full bucket.

        Args:
            principal_id: the principal.
            limit_class: the class, for example ``rl.message``.
            now: the time of the take.
            burst: the bucket's capacity.
            per_minute: its refill rate.

        Returns:
            None when a token was taken; otherwise whole seconds until one is there (the
            caller must roll the unit back: what a refusal stored is not kept).
        """
        ...
