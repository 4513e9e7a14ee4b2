"""Live delivery: long-polls and event streams over the shared and the agent feeds.

Every read goes through the page use cases (`ConversationService.list_events` and
`RunsService.poll`), so a long-poll and a stream see exactly the events, order,
visibility and cursor of the pages, and an agent gets a fresh invocation token per
delivery. Between reads a reader waits on the wake-up port
(`turnkeeper.application.wakeup.EventWaker`): its listener is opened before the first
read, so a commit that lands between a read and the wait still wakes it.

A long-poll or a stream opened with a bearer token answers only while that token lives
(ADR 0016: no cache window): every read after the first resolves the token again (the
agent feed in the read's own round trip), and so does a stream before each heartbeat. A
revoked token's long-poll answers 401 at its next read, its stream ends.

Limits: ``stream.max_wait_seconds`` (the longest ``wait`` of a long-poll),
``stream.heartbeat_seconds`` (the longest wait of a stream before a heartbeat) and
``stream.max_per_principal`` (streams per principal, across every process that shares
the store: `turnkeeper.application.stream_places`).
"""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from datetime import timedelta

from turnkeeper.application.ports import Clock
from turnkeeper.application.services.conversation import ConversationService, EventPage
from turnkeeper.application.services.identity import BearerToken, IdentityService
from turnkeeper.application.services.live_stream import (
    LiveStream,
    PageT,
    Reader,
    events_in,
    moved,
)
from turnkeeper.application.services.runs import AgentEventPage, RunsService
from turnkeeper.application.settings import Settings
from turnkeeper.application.stream_places import LocalStreamPlaces, StreamPlaces
from turnkeeper.application.wakeup import SHARED_FEED, EventWaker, Feed
from turnkeeper.domain.errors import FieldError, RateLimited, ValidationFailed
from turnkeeper.domain.world import Principal

#: Called with the number of open streams of this process whenever it changes.
StreamCountHook = Callable[[int], None]


class LiveDelivery:
    """Long-polls and streams over the page use cases.

    Args:
        conversation: the shared feed's pages.
        runs: the agent feed's pages.
        identity: resolves the token of a long read again before its later reads.
        waker: the wake-up port of the store.
        clock: the time (deadlines).
        settings: ``stream.*`` and ``page.default_limit``.
        places: the stream places of the store (`LocalStreamPlaces`, this process's
            alone, when None).
    """

    def __init__(
        self,
        conversation: ConversationService,
        runs: RunsService,
        identity: IdentityService,
        waker: EventWaker,
        clock: Clock,
        settings: Settings,
        places: StreamPlaces | None = None,
    ) -> None:
        self._conversation = conversation
        self._runs = runs
        self._identity = identity
        self._waker = waker
        self._clock = clock
        self._settings = settings
        self._heartbeat = settings.stream_heartbeat
        self._places = places if places is not None else LocalStreamPlaces()
        self._lock = threading.Lock()
        self._open = 0
        #: Called with the number of open streams whenever it changes (for example the
        #: gauge ``turnkeeper_event_stream_clients``).
        self.stream_count_hooks: list[StreamCountHook] = []

    @property
    def waker(self) -> EventWaker:
        """The wake-up port in use."""
        return self._waker

    @property
    def places(self) -> StreamPlaces:
        """The stream places in use (``stream.max_per_principal``)."""
        return self._places

    @property
    def open_streams(self) -> int:
        """Streams open on this process now."""
        return self._open

    def wait_time(self, wait: float | None) -> timedelta:
        """The wait of a long-poll request.

        Args:
            wait: the request's ``wait`` in seconds; None when absent.

        Returns:
            The wait (zero when absent: an ordinary page).

        Raises:
            ValidationFailed: ``/wait`` out_of_range below 0, above
                ``stream.max_wait_seconds``, or not a finite number.
        """
        if wait is None:
            return timedelta(0)
        if (
            not math.isfinite(wait)
            or not 0 <= wait <= self._settings.stream_max_wait.total_seconds()
        ):
            raise ValidationFailed([FieldError(pointer="/wait", code="out_of_range")])
        return timedelta(seconds=wait)

    # -- long-poll -------------------------------------------------------------------------

    async def wait_events(
        self,
        actor: Principal,
        *,
        after: int = 0,
        limit: int | None = None,
        wait: float | None = None,
        bearer: BearerToken | None = None,
    ) -> EventPage:
        """A page of the shared feed, waiting up to `wait` seconds for one event.

        Args:
            actor: the reader, as the request resolved it.
            after: the cursor.
            limit: the page size.
            wait: the longest wait in seconds (None: none).
            bearer: the token `actor` was resolved from, resolved again before each
                later read (None: `actor` is kept).

        Raises:
            ValidationFailed: for a bad cursor, limit or wait.
            Unauthenticated: the token was revoked during the wait.
        """
        waited = self.wait_time(wait)
        caller = Reader(actor, bearer, self._identity)

        async def read(cursor: int | None) -> EventPage:
            reader = await caller.current()
            return await self._conversation.list_events(reader, after=cursor or 0, limit=limit)

        return await self._long_poll(SHARED_FEED, waited, after, read, caller.check)

    async def wait_agent_events(
        self,
        actor: Principal | BearerToken,
        *,
        after: int | None = None,
        limit: int | None = None,
        wait: float | None = None,
    ) -> AgentEventPage:
        """A page of the agent's feed, waiting up to `wait` seconds for one delivery.

        A bearer token is resolved by the first read (`RunsService.poll_as`, ADR 0026),
        which answers 401, then 403, then the 400 of the cursor, the limit or the wait,
        as a request authenticated first would. A page with deliveries, or a request
        without a wait, is answered from that read; an empty one waits as the agent's
        listener, registered before the next read so that no wake-up is missed.

        Raises:
            Unauthenticated: for a bearer token that is unknown or revoked.
            AccessDenied: when the caller is not an agent.
            ValidationFailed: for a bad cursor, limit or wait.
        """
        if isinstance(actor, Principal):
            agent = actor
            if not agent.is_agent:
                # Refused (403, audited) before its wait is judged, as a poll by token.
                return await self._runs.poll(agent, after=after, limit=limit)
            waited = self.wait_time(wait)
        else:

            def check(_: Principal) -> None:
                self.wait_time(wait)

            first = await self._runs.poll_as(actor, after=after, limit=limit, check=check)
            agent, waited = first.agent, self.wait_time(wait)
            if not waited or events_in(first.page):
                return first.page
            after = first.page.next_after
            bearer = actor

            async def read_by_token(cursor: int | None) -> AgentEventPage:
                # The token again in the read's own round trip: a revoked one is 401.
                return (await self._runs.poll_as(bearer, after=cursor, limit=limit)).page

            return await self._long_poll(
                agent.id, waited, after, read_by_token, Reader(agent, bearer, self._identity).check
            )

        async def read(cursor: int | None) -> AgentEventPage:
            return await self._runs.poll(agent, after=cursor, limit=limit)

        return await self._long_poll(agent.id, waited, after, read)

    async def check_agent_feed(
        self,
        actor: Principal | BearerToken,
        *,
        after: int | None = None,
        limit: int | None = None,
        wait: float | None = None,
    ) -> Principal:
        """The checks of an agent feed request without delivering anything (a HEAD).

        Answers as a poll or a stream of the same request would before it delivers:
        401, then 403 agents_only (audited), then the 400 of the cursor, the limit or
        the wait.

        Args:
            actor: the caller, or the request's bearer token.
            after: the cursor.
            limit: the page size.
            wait: the long-poll's wait in seconds.

        Returns:
            The agent.

        Raises:
            Unauthenticated: for a bearer token that is unknown or revoked.
            AccessDenied: when the caller is not an agent.
            ValidationFailed: for a bad cursor, limit or wait.
        """
        agent = (
            actor
            if isinstance(actor, Principal)
            else await self._identity.authenticate_bearer(actor)
        )
        await self._runs.check_poll(agent, after=after, limit=limit)
        self.wait_time(wait)
        return agent

    async def _long_poll(
        self,
        feed: Feed,
        wait: timedelta,
        after: int | None,
        read: Callable[[int | None], Awaitable[PageT]],
        check: Callable[[], Awaitable[None]] | None = None,
    ) -> PageT:
        """Read, then wait for the feed's wake-ups and read again, until events or the end.

        Args:
            feed: the feed whose wake-ups end a wait.
            wait: the longest wait.
            after: the cursor.
            read: reads a page after a cursor (resolving the caller's token again).
            check: resolves the caller's token after each quiet heartbeat step, as a
                stream's heartbeat does, so that a long-poll nothing wakes answers 401
                once its token is revoked (None: a principal given without a token).

        Raises:
            Unauthenticated: from `read` or `check`, once the token is revoked.
        """
        if not wait:
            return await read(after)
        deadline = self._clock.now() + wait
        # Timed-out waits are counted too, so that a clock standing still (a test's)
        # cannot make a long-poll wait for ever.
        budget = wait
        with self._waker.listen(feed) as listener:
            generation = self._waker.generation
            before, page = after, await read(after)
            while not events_in(page) and not self._waker.closed:
                remaining = min(budget, deadline - self._clock.now())
                if remaining <= timedelta(0):
                    break
                if moved(page, before):
                    # Only undeliverable events were read (invocations of runs that are
                    # no longer queued): more may follow at once.
                    before, page = page.next_after, await read(page.next_after)
                    continue
                step = min(remaining, self._heartbeat)
                woken = await listener.wait(step)
                if not woken:
                    budget -= step
                    if self._waker.generation == generation:
                        if check is not None:
                            await check()
                        continue
                generation = self._waker.generation
                before, page = page.next_after, await read(page.next_after)
        return page

    # -- streams ---------------------------------------------------------------------------

    async def open_events(
        self, actor: Principal, *, after: int = 0, bearer: BearerToken | None = None
    ) -> LiveStream[EventPage]:
        """Open a stream of the shared feed after a cursor.

        Args:
            actor: the reader, as the request resolved it.
            after: the cursor.
            bearer: the token `actor` was resolved from: the stream ends once it is
                revoked (None: `actor` is kept).

        Raises:
            RateLimited: when the principal holds ``stream.max_per_principal`` streams.
            ValidationFailed: for a bad cursor.
        """
        size = self._settings.default_page_size
        caller = Reader(actor, bearer, self._identity)

        async def read(cursor: int | None) -> EventPage:
            reader = await caller.current()
            return await self._conversation.list_events(reader, after=cursor or 0, limit=size)

        def more(page: EventPage, before: int | None) -> bool:
            # A short page read everything that was readable.
            return len(page.events) >= size

        return await self._open_stream(actor, SHARED_FEED, after, read, more, caller)

    async def open_agent_events(
        self, agent: Principal, *, after: int | None = None, bearer: BearerToken | None = None
    ) -> LiveStream[AgentEventPage]:
        """Open a stream of the agent's feed after a cursor (the acknowledged one if None).

        Args:
            agent: the agent, as the request resolved it.
            after: the cursor (None: the acknowledged one).
            bearer: the token `agent` was resolved from: the stream ends once it is
                revoked (None: `agent` is kept).

        Raises:
            AccessDenied: when the caller is not an agent.
            RateLimited: when the agent holds ``stream.max_per_principal`` streams.
            ValidationFailed: for a bad cursor.
        """
        size = self._settings.default_page_size
        if not agent.is_agent:
            # Refused (403, audited) before a place is taken, as a poll is: a person
            # holding its streams is told it may not, not 429 to retry for ever.
            await self._runs.poll(agent, after=after, limit=size)
        caller = Reader(agent, bearer, self._identity)

        async def read(cursor: int | None) -> AgentEventPage:
            token = caller.bearer
            if caller.take_resolved() or token is None:
                return await self._runs.poll(agent, after=cursor, limit=size)
            # The token again in the read's own round trip: a revoked one ends the stream.
            return (await self._runs.poll_as(token, after=cursor, limit=size)).page

        return await self._open_stream(agent, agent.id, after, read, moved, caller)

    async def _open_stream(
        self,
        principal: Principal,
        feed: Feed,
        after: int | None,
        read: Callable[[int | None], Awaitable[PageT]],
        more: Callable[[PageT, int | None], bool],
        caller: Reader,
    ) -> LiveStream[PageT]:
        exits = ExitStack()
        try:
            exits.callback(await self._take_place(principal.id))
            listener = exits.enter_context(self._waker.listen(feed))
            generation = self._waker.generation
            first = await read(after)
        except BaseException:
            exits.close()
            raise
        return LiveStream(
            first=first,
            read=read,
            more=more,
            listener=listener,
            exits=exits,
            waker=self._waker,
            clock=self._clock,
            heartbeat=self._heartbeat,
            generation=generation,
            after=after,
            check=caller.check,
        )

    async def _take_place(self, principal_id: uuid.UUID) -> Callable[[], None]:
        """Take a place of the principal's streams; returns what gives it back."""
        release = await self._places.take(principal_id, self._settings.stream_max_per_principal)
        if release is None:
            raise RateLimited(retry_after=int(self._heartbeat.total_seconds()))
        self._count(+1)

        def free() -> None:
            release()
            self._count(-1)

        return free

    def _count(self, change: int) -> None:
        with self._lock:
            self._open += change
            count = self._open
        self._counted(count)

    def _counted(self, count: int) -> None:
        for hook in self.stream_count_hooks:
            hook(count)

    def close(self) -> None:
        """End every stream and long-poll of this process (it shuts down)."""
        self._waker.close()
