"""The agent feed: personal events delivered with fresh invocation tokens, acks, heartbeat.

A poll locks the agent's cursor, reads its first page in the same round trip and hands
the events to `FeedDelivery` (`turnkeeper.application.services.runs.feed_delivery`),
which re-checks agent.invoke for each invocation and follow-up and signs their tokens.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import attrs

from turnkeeper.application.audit import DenialAudit
from turnkeeper.application.errors import Unauthenticated
from turnkeeper.application.ports import (
    AgentCursor,
    Clock,
    IdGenerator,
    ResolvedToken,
    TokenFeed,
    TokenSigner,
    UnitOfWork,
)
from turnkeeper.application.ports.audit import AuditAction
from turnkeeper.application.services.identity import BearerToken, record_use
from turnkeeper.application.services.runs.changes import RunChanges
from turnkeeper.application.services.runs.feed_delivery import Delivery, FeedDelivery
from turnkeeper.application.services.runs.guards import refuse_non_agent, require_agent
from turnkeeper.application.services.runs.run_end import RunEnder
from turnkeeper.application.settings import Settings
from turnkeeper.application.transactions import Transactor
from turnkeeper.domain.errors import FieldError, ValidationFailed
from turnkeeper.domain.events import MAX_SEQ
from turnkeeper.domain.followups import FollowupMode
from turnkeeper.domain.world import Principal

#: The capabilities an agent may report by heartbeat (none reported: absent).
_CAPABILITIES = frozenset({FollowupMode.STEER.value, FollowupMode.QUEUE.value})


@attrs.frozen(kw_only=True)
class AgentEventPage:
    """A page of an agent's feed.

    Attributes:
        deliveries: the deliverable events.
        next_after: the cursor for the next poll.
    """

    deliveries: list[Delivery]
    next_after: int


@attrs.frozen(kw_only=True)
class PolledPage:
    """A page of an agent's feed with the agent who polled (`AgentFeedService.poll_as`).

    Attributes:
        agent: the agent, as given or as read by its bearer token.
        page: the page.
    """

    agent: Principal
    page: AgentEventPage


class AgentFeedService:
    """GET /v1/agent/events, its ack, and the heartbeat.

    Args:
        tx: the transactor.
        ender: ends a queued run whose delivery is denied.
        changes: stores run changes and trigger states.
        audit: counts denied deliveries.
        clock: the time.
        ids: the jti source.
        settings: ``agent.invocation_token_ttl``, ``page.*``.
        signer: signs invocation tokens.
    """

    def __init__(
        self,
        tx: Transactor,
        ender: RunEnder,
        changes: RunChanges,
        audit: DenialAudit,
        clock: Clock,
        ids: IdGenerator,
        settings: Settings,
        signer: TokenSigner,
    ) -> None:
        self._tx = tx
        self._clock = clock
        self._settings = settings
        self._feed_delivery = FeedDelivery(
            ender, changes, audit, clock, ids, signer, settings.invocation_token_ttl
        )

    async def poll(
        self,
        actor: Principal | BearerToken,
        *,
        after: int | None = None,
        limit: int | None = None,
    ) -> AgentEventPage:
        """Deliver an agent's personal events with fresh invocation tokens.

        Every delivery of agent.invocation re-checks agent.invoke for the run's author
        with the rights of this moment; a denial sends nothing and ends the queued run
        (`turnkeeper.domain.delivery.refused_invocation_end`: failed with the delivery
        reason, or cancelled / agent_disabled for a disabled agent), its message with it.
        Invocations of runs that are no longer queued are not deliverable and are skipped.

        Args:
            actor: the polling agent, or the request's bearer token (see `poll_as`).
            after: cursor; the acknowledged position when None.
            limit: page size (``page.default_limit`` when None, at most ``page.max_limit``).

        Returns:
            The deliveries and the next cursor.

        Raises:
            Unauthenticated: for a bearer token that is unknown or revoked.
            AccessDenied: when the caller is not an agent (audited).
            ValidationFailed: for a bad cursor or limit.
        """
        return (await self.poll_as(actor, after=after, limit=limit)).page

    async def poll_as(
        self,
        actor: Principal | BearerToken,
        *,
        after: int | None = None,
        limit: int | None = None,
        check: Callable[[Principal], None] | None = None,
    ) -> PolledPage:
        """`poll`, answering with the agent who polled too.

        A bearer token is resolved in the round trip that locks the cursor and reads the
        first page (ADR 0026), and the answers keep the order of a request authenticated
        first: 401, then 403 agents_only, then the cursor's and the limit's 400, then
        what `check` raises; the token's last use is recorded after the unit, as
        `IdentityService.authenticate` records it.

        Args:
            actor: the polling agent, or the request's bearer token.
            after: as `poll`'s.
            limit: as `poll`'s.
            check: the caller's own checks of the request (a long poll's wait), run on
                the agent before anything is delivered.

        Returns:
            The agent (as given, or as read by its token) and the page.
        """
        invalid: ValidationFailed | None = None
        if isinstance(actor, Principal):
            size = await self._checked_page_size(actor, after, limit)
        else:
            try:
                size = self._page_size(after, limit)
            except ValidationFailed as exc:
                # Answered once the token is known to be live and an agent's.
                size, invalid = self._settings.page_size(None), exc

        # The runs whose invocation the unit refused (a retried unit starts it again).
        refused: list[uuid.UUID] = []

        async def work(uow: UnitOfWork) -> tuple[PolledPage, ResolvedToken | None]:
            refused.clear()
            token: ResolvedToken | None = None
            if isinstance(actor, Principal):
                agent = actor
                # The cursor's lock and the first page share a round trip.
                cursor, events = await uow.agent_feed.lock_cursor_and_read(agent.id, after, size)
            else:
                start = after if invalid is None else None
                found = await uow.agent_feed.lock_cursor_and_read_for_token(
                    actor.digest, start, size
                )
                agent, token, cursor = _token_agent(found, invalid)
                events = found.events if found is not None else []
            if check is not None:
                check(agent)
            deliveries, position = await self._feed_delivery.deliver(
                uow, agent, cursor, events, after, size, refused
            )
            page = AgentEventPage(deliveries=deliveries, next_after=position)
            return PolledPage(agent=agent, page=page), token

        polled, caller = await self._tx.run(work, named=self.poll)
        while refused and not polled.page.deliveries:
            # A refused invocation ended its run, which may have opened the follow-on
            # run: its invocation is readable once that unit committed, and a page is
            # empty only when nothing deliverable is left after the cursor (API.md).
            after = polled.page.next_after
            polled, caller = await self._tx.run(work, named=self.poll)
        if caller is not None:
            await record_use(self._tx, caller, self._clock, self._settings.token_last_used_interval)
        return polled

    async def check_poll(
        self, agent: Principal, *, after: int | None = None, limit: int | None = None
    ) -> None:
        """The checks of a poll without the poll: nothing is delivered, nothing moves.

        What a HEAD of the agent feed answers: the refusal of a caller who is no agent
        (audited, as a poll's), then the cursor's and the limit's. A HEAD is safe (RFC
        9110): it must not mint invocation tokens, move a trigger to queued or mark a
        delivery as made.

        Args:
            agent: the caller, resolved from its token.
            after: as `poll`'s.
            limit: as `poll`'s.

        Raises:
            AccessDenied: when the caller is not an agent (audited).
            ValidationFailed: for a bad cursor or limit.
        """
        await self._checked_page_size(agent, after, limit)

    async def _checked_page_size(
        self, agent: Principal, after: int | None, limit: int | None
    ) -> int:
        """The page size of a poll by a principal, after refusing one who is no agent."""
        if not agent.is_agent:
            await refuse_non_agent(self._tx, agent, AuditAction.AGENT_EVENTS_CONSUME)
        return self._page_size(after, limit)

    def _page_size(self, after: int | None, limit: int | None) -> int:
        """The page size of a poll, after checking its cursor."""
        size = self._settings.page_size(limit)
        if after is not None and not 0 <= after <= MAX_SEQ:
            # Beyond MAX_SEQ PostgreSQL cannot store the cursor (the memory store could).
            raise ValidationFailed([FieldError(pointer="/after", code="out_of_range")])
        return size

    async def ack(self, actor: Principal | BearerToken, through_seq: int) -> None:
        """Acknowledge the feed through a seq (the cursor never moves back).

        The cursor never passes what was delivered: an acknowledgement beyond the last
        delivered event counts up to that event only, so an agent that acknowledges a
        seq the feed has not reached yet (a bug of its own, or a huge number) still
        gets every event that comes later.

        Args:
            actor: the agent, or the request's bearer token (resolved in the round trip
                that locks the cursor, its last use recorded after the unit: ADR 0026;
                401, then 403, then 400, as a request authenticated first).
            through_seq: the last event it processed.

        Raises:
            Unauthenticated: for a bearer token that is unknown or revoked.
            AccessDenied: when the caller is not an agent (audited).
            ValidationFailed: for a negative seq.
        """
        invalid = (
            ValidationFailed([FieldError(pointer="/through_seq", code="out_of_range")])
            if through_seq < 0
            else None
        )
        if isinstance(actor, Principal):
            if not actor.is_agent:
                await refuse_non_agent(self._tx, actor, AuditAction.AGENT_EVENTS_CONSUME)
            if invalid is not None:
                raise invalid

        async def work(uow: UnitOfWork) -> ResolvedToken | None:
            token: ResolvedToken | None = None
            if isinstance(actor, Principal):
                agent, cursor = actor, await uow.agent_feed.lock_cursor(actor.id)
            else:
                found = await uow.agent_feed.lock_cursor_for_token(actor.digest)
                agent, token, cursor = _token_agent(found, invalid)
            through = min(through_seq, cursor.delivered_seq)
            if through > cursor.acked_seq:
                await uow.agent_feed.save_cursor(
                    agent.id,
                    AgentCursor(acked_seq=through, delivered_seq=cursor.delivered_seq),
                )
            return token

        caller = await self._tx.run(work)
        if caller is not None:
            await record_use(self._tx, caller, self._clock, self._settings.token_last_used_interval)

    async def heartbeat(self, agent: Principal, followups: str | None) -> None:
        """Store the capabilities an agent reports.

        Args:
            agent: the agent.
            followups: ``steer``, ``queue`` or None (nothing reported).

        Raises:
            AccessDenied: when the caller is not an agent.
            ValidationFailed: for an unknown capability value.
        """
        await refuse_non_agent(self._tx, agent, AuditAction.AGENT_HEARTBEAT)
        if followups is not None and followups not in _CAPABILITIES:
            raise ValidationFailed(
                [FieldError(pointer="/capabilities/followups", code="invalid_enum")]
            )

        async def work(uow: UnitOfWork) -> None:
            await uow.agent_feed.set_capabilities(agent.id, followups)

        await self._tx.run(work)


def _token_agent(
    found: TokenFeed | None, invalid: ValidationFailed | None
) -> tuple[Principal, ResolvedToken, AgentCursor]:
    """The agent a token's feed read found, in the order of a request authenticated first.

    Raises:
        Unauthenticated: no live token (`found` is None).
        AccessDenied: agents_only for a person or app (audited by the transactor).
        ValidationFailed: `invalid`, the request's own refusal, once the caller may hear it.
    """
    if found is None:
        raise Unauthenticated()
    agent = found.caller.principal
    require_agent(agent, AuditAction.AGENT_EVENTS_CONSUME)
    if invalid is not None:
        raise invalid
    if found.cursor is None:
        raise RuntimeError("the store locked no cursor for an agent")
    return agent, found.caller, found.cursor


__all__ = ["AgentEventPage", "AgentFeedService", "PolledPage"]
