"""The one authorization rule: who may do what on a channel or thread.

`authorize` is pure: the application gathers the facts (principal, space, channel,
thread, the principal's grants) and this module decides. A denial without read is
`not_found`, identical to an unknown id, so that ids cannot be probed.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

import attrs

from turnkeeper.domain.world import (
    AGENT_GRANT_CAP,
    Channel,
    Grant,
    Level,
    Principal,
    PrincipalKind,
    ResourceKind,
    Space,
    Thread,
    effective_operator,
)


class Action(enum.StrEnum):
    """Actions on channels and threads, each with the level it needs."""

    CHANNEL_READ = "channel.read"
    THREAD_READ = "thread.read"
    THREAD_CREATE = "thread.create"
    MESSAGE_CREATE = "message.create"
    THREAD_CLOSE = "thread.close"
    RUN_CANCEL = "run.cancel"

    @property
    def required_level(self) -> Level:
        """The level the action needs on its target."""
        return _REQUIRED[self]


_REQUIRED: dict[Action, Level] = {
    Action.CHANNEL_READ: Level.READ,
    Action.THREAD_READ: Level.READ,
    Action.THREAD_CREATE: Level.WRITE,
    Action.MESSAGE_CREATE: Level.WRITE,
    Action.THREAD_CLOSE: Level.WRITE,
    Action.RUN_CANCEL: Level.TRIGGER,
}

#: Actions only a person (or the owner) may take, whatever an agent's level.
_PEOPLE_ONLY = frozenset({Action.THREAD_CLOSE, Action.RUN_CANCEL})


class DenyReason(enum.StrEnum):
    """Why an action was refused (audited, and shown for 403 answers)."""

    NO_GRANT = "no_grant"
    LEVEL_INSUFFICIENT = "level_insufficient"
    CHANNEL_ARCHIVED = "channel_archived"


@attrs.frozen(kw_only=True)
class AccessTarget:
    """Everything the rule needs to know about the target of an action.

    Attributes:
        space: the space of the channel.
        channel: the channel acted on (or the channel of the thread).
        thread: the thread acted on, None for channel-level actions.
    """

    space: Space
    channel: Channel
    thread: Thread | None = None


@attrs.frozen(kw_only=True)
class Decision:
    """The outcome of `authorize`.

    Attributes:
        allowed: True when the action may proceed.
        code: for a denial, ``not_found``, ``forbidden`` or ``channel_read_only``.
        reason: for a denial, a `DenyReason` value.
    """

    allowed: bool
    code: str | None = None
    reason: DenyReason | None = None


ALLOW = Decision(allowed=True)


def archive_decision(target: AccessTarget) -> Decision:
    """The part of `authorize` an archived channel decides: every action above read.

    Args:
        target: where.

    Returns:
        `ALLOW` in a live channel, else the channel_read_only / channel_archived denial.
    """
    if target.channel.archived:
        return Decision(allowed=False, code="channel_read_only", reason=DenyReason.CHANNEL_ARCHIVED)
    return ALLOW


def effective_level(principal: Principal, target: AccessTarget, grants: Iterable[Grant]) -> Level:
    """The level a principal has on a channel or thread right now.

    Grants on the space are inherited by its channels; an agent's grants are capped at
    write; the channel's effective operator has write on the channel and its main thread;
    a thread's fixed operator has write on that thread. The owner has every level.

    Args:
        principal: who acts.
        target: the space, channel and optional thread.
        grants: the principal's grants (others are ignored).

    Returns:
        The effective level (``Level.NONE`` when nothing applies).
    """
    if principal.is_owner:
        return Level.TRIGGER
    level = grant_level(principal, target, grants)
    if principal.kind is PrincipalKind.AGENT:
        thread = target.thread
        operator = effective_operator(target.channel, target.space)
        # A main thread has no fixed operator: it follows the channel's current operator.
        if operator == principal.id and (thread is None or thread.is_main):
            level = max(level, Level.WRITE)
        if thread is not None and thread.operator_agent_id == principal.id:
            level = max(level, Level.WRITE)
    return level


def grant_level(principal: Principal, target: AccessTarget, grants: Iterable[Grant]) -> Level:
    """The level a principal's grants give on a channel, the same on each of its threads.

    The part of `effective_level` that does not depend on the thread: grants on the space
    or the channel, an agent's capped at write. The operator roles are not included: the
    channel's operator reads only its main thread, a fixed operator only its thread.

    Args:
        principal: who acts (the owner is not special here).
        target: the space and channel (the thread is ignored).
        grants: the principal's grants (others are ignored).

    Returns:
        The highest applicable grant level (``Level.NONE`` without one).
    """
    level = Level.NONE
    for grant in grants:
        if grant.principal_id != principal.id:
            continue
        applies = (
            grant.resource_kind is ResourceKind.SPACE and grant.resource_id == target.space.id
        ) or (
            grant.resource_kind is ResourceKind.CHANNEL and grant.resource_id == target.channel.id
        )
        if applies and grant.level > level:
            level = grant.level
    if principal.kind is PrincipalKind.AGENT:
        level = min(level, AGENT_GRANT_CAP)
    return level


def authorize(
    principal: Principal, action: Action, target: AccessTarget, grants: Iterable[Grant]
) -> Decision:
    """Decide whether a principal may take an action on a target.

    Order: without read the answer is not_found (as for an unknown id); an archived
    channel refuses every action above read with channel_read_only / channel_archived;
    a level below the action's need is forbidden / level_insufficient.

    Args:
        principal: who acts.
        action: what it wants to do.
        target: where.
        grants: the principal's grants.

    Returns:
        `ALLOW` or a denial decision.
    """
    level = effective_level(principal, target, grants)
    if level < Level.READ:
        return Decision(allowed=False, code="not_found", reason=DenyReason.NO_GRANT)
    needed = action.required_level
    if needed > Level.READ and not (archived := archive_decision(target)).allowed:
        return archived
    if action in _PEOPLE_ONLY and principal.kind is not PrincipalKind.PERSON:
        return Decision(allowed=False, code="forbidden", reason=DenyReason.LEVEL_INSUFFICIENT)
    if level < needed:
        return Decision(allowed=False, code="forbidden", reason=DenyReason.LEVEL_INSUFFICIENT)
    return ALLOW
