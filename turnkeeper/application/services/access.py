"""Loading the facts of an authorization decision and enforcing it inside a unit.

The single application entry point to `turnkeeper.domain.authorization.authorize`: services call
`require`, which raises `AccessDenied` (audited by the transactor) on a denial.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence

import attrs

from turnkeeper.application.errors import Unauthenticated
from turnkeeper.application.ports import (
    BucketTake,
    PostFacts,
    ReaderScope,
    ResolvedToken,
    UnitOfWork,
)
from turnkeeper.application.ports.audit import AuditAction, DeniedAction
from turnkeeper.application.services.identity import BearerToken
from turnkeeper.application.transactions import AccessDenied, Transactor, denial
from turnkeeper.domain.authorization import (
    AccessTarget,
    Action,
    Decision,
    authorize,
    grant_level,
)
from turnkeeper.domain.errors import NotFound
from turnkeeper.domain.world import (
    Grant,
    Level,
    Principal,
    Space,
    Thread,
    effective_operator,
)


async def channel_target(uow: UnitOfWork, channel_id: uuid.UUID) -> AccessTarget:
    """The access target of a channel.

    Args:
        uow: the unit of work.
        channel_id: the channel.

    Returns:
        Space and channel.

    Raises:
        NotFound: for an unknown channel.
    """
    channel = await uow.channels.get(channel_id)
    if channel is None:
        raise NotFound()
    space = await uow.spaces.get(channel.space_id)
    if space is None:
        raise NotFound()
    return AccessTarget(space=space, channel=channel)


async def thread_target(
    uow: UnitOfWork, thread_id: uuid.UUID, *, lock: bool = False
) -> AccessTarget:
    """The access target of a thread (with its channel and space).

    Args:
        uow: the unit of work.
        thread_id: the thread.
        lock: read it under the thread row lock (`ThreadRepository.locked_target`), for
            a change of the thread: one that waited for the row decides on the channel as
            committed when it got it (ADR 0044).

    Raises:
        NotFound: for an unknown thread.
    """
    read = uow.threads.locked_target if lock else uow.threads.target
    target = await read(thread_id)
    if target is None:
        raise NotFound()
    return target


async def require(
    uow: UnitOfWork, principal: Principal, action: Action, target: AccessTarget
) -> None:
    """Enforce the authorization rule for an action.

    Args:
        uow: the unit of work (for the principal's grants).
        principal: who acts.
        action: the action.
        target: where.

    Raises:
        AccessDenied: not_found without read, else forbidden or channel_read_only.
    """
    enforce(principal, action, target, await uow.grants.for_principal(principal.id))


async def authorized_thread(
    uow: UnitOfWork,
    principal: Principal,
    action: Action,
    thread_id: uuid.UUID,
    *,
    lock: bool = False,
) -> AccessTarget:
    """A thread's access target with the rule of an action enforced on it, in one wait.

    The principal's grants are queued before the thread is read (`GrantRepository.prefetch`),
    so both arrive in the same round trip.

    Args:
        uow: the unit of work.
        principal: who acts.
        action: the action.
        thread_id: the thread.
        lock: read the thread under its row lock (`thread_target`).

    Returns:
        The thread with its channel and space.

    Raises:
        NotFound: for an unknown thread.
        AccessDenied: not_found without read, else forbidden or channel_read_only.
    """
    await uow.grants.prefetch([principal.id])
    target = await thread_target(uow, thread_id, lock=lock)
    await require(uow, principal, action, target)
    return target


async def post_target(
    uow: UnitOfWork,
    principal: Principal,
    thread_id: uuid.UUID,
    client_msg_id: str,
    take: BucketTake | None = None,
) -> PostFacts:
    """Authorize a message post and read its earlier message, in one read of the facts.

    The thread row stays locked until the unit ends (`ThreadRepository.post_facts`).

    Args:
        uow: the unit of work.
        principal: the author.
        thread_id: the thread.
        client_msg_id: the request's idempotency key.
        take: the rate-limit token taken in the same round trip (None: none); the
            caller refuses on its ``retry_after`` after its own earlier checks.

    Returns:
        The facts: the target, the message the author stored under that key (or None)
        and the take's answer.

    Raises:
        NotFound: for an unknown thread.
        AccessDenied: without write (not_found without read; channel_read_only).
    """
    facts = await uow.threads.post_facts(thread_id, principal.id, client_msg_id, take)
    if facts is None:
        raise NotFound()
    enforce(principal, Action.MESSAGE_CREATE, facts.target, facts.grants)
    return facts


@attrs.frozen(kw_only=True)
class AuthoredFacts:
    """The facts of a post with the author they were read for (`authored_post_target`).

    Attributes:
        author: the author, as given or as read by its token.
        facts: the post's facts.
        token: the token the author was read by (its use to be recorded after the unit),
            or None when the author was given.
    """

    author: Principal
    facts: PostFacts
    token: ResolvedToken | None


async def authored_post_target(
    uow: UnitOfWork,
    actor: Principal | BearerToken,
    thread_id: uuid.UUID,
    client_msg_id: str,
    take: BucketTake | None,
    check: Callable[[Principal], None],
) -> AuthoredFacts:
    """`post_target` for an author given, or known by a bearer token only (ADR 0026).

    For a token the author is read in the same one read as the facts, and the answers
    keep the order of a request authenticated first: 401 for an unknown or revoked
    token, then whatever `check` raises on the author (the body rules, which depend on
    the author's kind), then 404 and 403. An author given was checked by the caller
    before its unit, and `check` is not called again.

    Args:
        uow: the unit of work.
        actor: the author, or the request's bearer token.
        thread_id: the thread.
        client_msg_id: the request's idempotency key.
        take: the rate-limit token taken in the same round trip (None: none).
        check: the caller's checks of an author read by its token, before the access
            decision.

    Returns:
        The author, the facts and the token the author was read by.

    Raises:
        Unauthenticated: for an unknown or revoked token.
        NotFound: for an unknown thread.
        AccessDenied: without write (not_found without read; channel_read_only).
    """
    if isinstance(actor, Principal):
        facts = await post_target(uow, actor, thread_id, client_msg_id, take)
        return AuthoredFacts(author=actor, facts=facts, token=None)
    found = await uow.threads.token_post_facts(thread_id, actor.digest, client_msg_id, take)
    if found is None:
        raise Unauthenticated()
    author = found.caller.principal
    check(author)
    if found.facts is None:
        raise NotFound()
    enforce(author, Action.MESSAGE_CREATE, found.facts.target, found.facts.grants)
    return AuthoredFacts(author=author, facts=found.facts, token=found.caller)


def enforce(
    principal: Principal, action: Action, target: AccessTarget, grants: Sequence[Grant]
) -> None:
    """Apply the authorization rule to facts already read.

    Args:
        principal: who acts.
        action: the action.
        target: where.
        grants: the principal's grants.

    Raises:
        AccessDenied: not_found without read, else forbidden or channel_read_only.
    """
    uphold(principal, action, authorize(principal, action, target, grants))


def uphold(principal: Principal, action: DeniedAction, decision: Decision) -> None:
    """Raise a denial decision of the domain as the `AccessDenied` the transactor audits.

    Args:
        principal: who acts.
        action: what the decision refuses.
        decision: the domain's decision.

    Raises:
        AccessDenied: when the decision is a denial, with its code and reason.
    """
    if not decision.allowed:
        raise denial(
            code=decision.code or "forbidden",
            reason=str(decision.reason or ""),
            principal_id=principal.id,
            action=action,
        )


async def reader_scope(uow: UnitOfWork, principal: Principal) -> ReaderScope:
    """Every thread a principal may open, as the shared event feed filters by it.

    Exactly the threads `require` lets the principal read with ``thread.read``: the
    channels where its grants give read (every thread), and for an agent the main thread of
    each channel it operates now plus, matched by the log, the threads whose fixed operator
    it is. Operating a channel alone does not open the channel's other threads: their
    fixed operator is whoever operated the channel when they were created.

    Args:
        uow: the unit of work.
        principal: the reader.

    Returns:
        The reader's scope.
    """
    if principal.is_owner:
        return ReaderScope(reader_id=principal.id, everything=True)
    grants = await uow.grants.for_principal(principal.id)
    spaces: dict[uuid.UUID, Space] = {s.id: s for s in await uow.spaces.list_all()}
    targets = [
        AccessTarget(space=spaces[channel.space_id], channel=channel)
        for channel in await uow.channels.list_all()
        if channel.space_id in spaces
    ]
    readable = frozenset(
        t.channel.id for t in targets if grant_level(principal, t, grants) >= Level.READ
    )
    if not principal.is_agent:
        return ReaderScope(reader_id=principal.id, channel_ids=readable)
    main_threads = frozenset(
        t.channel.main_thread_id
        for t in targets
        if t.channel.id not in readable
        and t.channel.main_thread_id is not None
        and effective_operator(t.channel, t.space) == principal.id
    )
    return ReaderScope(
        reader_id=principal.id,
        channel_ids=readable,
        thread_ids=main_threads,
        fixed_operator_id=principal.id,
    )


def thread_of(target: AccessTarget) -> Thread:
    """The thread of a thread target.

    Raises:
        NotFound: when the target is a channel.
    """
    if target.thread is None:
        raise NotFound()
    return target.thread


async def require_owner(tx: Transactor, actor: Principal, action: AuditAction) -> None:
    """Enforce the owner role of an administrative use case, auditing a denial.

    Called before the use case opens its unit, so the denial is recorded here (the
    transactor records only denials raised inside a unit).

    Args:
        tx: the transactor (records the denial).
        actor: the caller.
        action: the audited action, for example ``token.create``.

    Raises:
        AccessDenied: 403 ``forbidden`` with reason ``owner_required`` for anyone else.
    """
    if not actor.is_owner:
        denied = AccessDenied(
            code="forbidden", reason="owner_required", principal_id=actor.id, action=action
        )
        await tx.record_denial(denied)
        raise denied
