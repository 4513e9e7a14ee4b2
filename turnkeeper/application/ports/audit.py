"""The audit (denials, administrative changes) and the stored rate-limit buckets."""

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
    GRANT_LIST = "grant.list"
    TOKEN_CREATE = "token.create"  # noqa: S105 (an audit action name, not a secret)
    TOKEN_LIST = "token.list"  # noqa: S105 (an audit action name, not a secret)
    TOKEN_REVOKE = "token.revoke"  # noqa: S105 (an audit action name, not a secret)
    AGENT_CONFIG = "agent.config"


class ChangeAction(enum.StrEnum):
    """What an administrative change did, as the audit keeps it."""

    GRANT_CREATED = "grant.created"
    #: The level of an existing grant changed (before and after differ).
    GRANT_LEVEL_CHANGED = "grant.level_changed"
    #: The same level was granted again.
    GRANT_LEVEL_KEPT = "grant.level_kept"
    GRANT_DELETED = "grant.deleted"
    TOKEN_ISSUED = "token.issued"  # noqa: S105 (an audit action name, not a secret)
    TOKEN_REVOKED = "token.revoked"  # noqa: S105 (an audit action name, not a secret)


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


@attrs.frozen(kw_only=True)
class AdminChange:
    """One administrative change, as the audit keeps it.

    Attributes:
        id: UUIDv7 of the record.
        actor_id: who made the change (the owner).
        action: what changed (a `ChangeAction` value).
        subject_id: the grant or token.
        at: when.
        before: the value before (a grant's level), None where there was none.
        after: the value after, None where there is none.
    """

    id: uuid.UUID
    actor_id: uuid.UUID
    action: str
    subject_id: uuid.UUID
    at: datetime
    before: str | None = None
    after: str | None = None


class AuditLog(Protocol):
    """Audit of denials (aggregated per window) and of administrative changes (one each)."""

    async def record_denial(
        self, principal_id: uuid.UUID, action: DeniedAction, reason: str, window_start: datetime
    ) -> None:
        """Count a denial in the row of its principal, action, reason and window."""
        ...

    async def denials(self, principal_id: uuid.UUID) -> list[DenialRecord]:
        """The aggregated denials of a principal, oldest window first."""
        ...

    async def record_change(self, change: AdminChange) -> None:
        """Keep the record of an administrative change (committed with the change)."""
        ...

    async def changes(self, subject_id: uuid.UUID) -> list[AdminChange]:
        """The recorded changes of a grant or token, oldest first."""
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
