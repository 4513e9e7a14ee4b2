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
``stream.max_per_principal`` (streams per principal on this process).
"""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from datetime import timedelta
from typing import Final, Generic, TypeVar

import attrs

from turnkeeper.application.errors import Unauthenticated
from turnkeeper.application.ports import Clock
from turnkeeper.application.services.conversation import ConversationService, EventPage
from turnkeeper.application.services.identity import BearerToken, IdentityService
from turnkeeper.application.services.runs import AgentEventPage, RunsService
from turnkeeper.application.settings import Settings
from turnkeeper.application.wakeup import SHARED_FEED, EventWaker, Feed, WakeListener
from turnkeeper.domain.errors import FieldError, RateLimited, ValidationFailed
from turnkeeper.domain.world import Principal

PageT = TypeVar("PageT", bound=EventPage | AgentEventPage)

#: Called with the number of open streams of this process whenever it changes.
StreamCountHook = Callable[[int], None]


@attrs.frozen
class Heartbeat:
    """A stream item that carries no event: the stream is alive and waited in vain."""


#: The one heartbeat item.
HEARTBEAT: Final = Heartbeat()


def _moved(page: EventPage | AgentEventPage, before: int | None) -> bool:
    """Whether a read may have left readable events behind (read again at once).

    The agent feed skips undeliverable events without a trace in the page, so any page
    that moved the cursor (or that started from the feed's default position) may have
    stopped at its size with more to come; an empty page of the shared feed never moves.
    """
    return before is None or page.next_after != before


def _size(page: EventPage | AgentEventPage) -> int:
    if isinstance(page, EventPage):
        return len(page.events)
    return len(page.deliveries)


class _Caller:
    """The reader of a long-poll or a stream, resolved from its token again before each read.

    The request resolved the token just before the first read, which uses that principal;
    every later read resolves it again, so that a revoked token reads nothing more.

    Args:
        principal: the principal the request resolved.
        bearer: the request's token (None: a principal given without one, kept as is).
        identity: the token authentication.
    """

    def __init__(
        self, principal: Principal, bearer: BearerToken | None, identity: IdentityService
    ) -> None:
        self._principal = principal
        self._bearer = bearer
        self._identity = identity
        self._resolved = True

    @property
    def bearer(self) -> BearerToken | None:
        """The token, or None when there is none to resolve again."""
        return self._bearer

    def take_resolved(self) -> bool:
        """Whether the principal at hand is fresh (once, for the first read).

        Returns:
            True the first time, or always when there is no token; False after.
        """
        fresh, self._resolved = self._resolved, False
        return fresh or self._bearer is None

    async def current(self) -> Principal:
        """The reader now.

        Raises:
            Unauthenticated: the token was revoked (or its principal is gone).
        """
        if self.take_resolved() or self._bearer is None:
            return self._principal
        return await self._identity.authenticate_bearer(self._bearer)

    async def check(self) -> None:
        """Resolve the token again (a stream's heartbeat), unless there is none.

        Raises:
            Unauthenticated: the token was revoked.
        """
        if self._bearer is not None:
            await self._identity.authenticate_bearer(self._bearer)


class LiveStream(Generic[PageT]):
    """An open event stream: pages of new events and heartbeats, until closed.

    Iterate it (``async for item in stream``) for `EventPage` / `AgentEventPage` items
    with at least one event, and `HEARTBEAT` when a wait of ``stream.heartbeat_seconds``
    saw nothing. Iteration ends when the process shuts down (`LiveDelivery.close`).
    Close it with `aclose` (or ``async with``): that frees its place among the
    principal's streams.

    Args:
        first: the page read when the stream opened.
        read: reads the page after a cursor.
        more: whether a page read after a cursor (None: the feed's default) may have
            left readable events behind, so that the stream reads again at once.
        listener: the stream's open listener.
        exits: closes the listener and frees the stream's place.
        waker: the wake-up port (generation and closing).
        clock: the time (heartbeat deadlines).
        heartbeat: the longest wait before a heartbeat.
        generation: the waker's generation before the first read.
        after: the cursor of the first read.
        check: raises `Unauthenticated` once the stream's token is revoked (asked
            before each heartbeat; the reads check it themselves).
    """

    def __init__(
        self,
        *,
        first: PageT,
        read: Callable[[int | None], Awaitable[PageT]],
        more: Callable[[PageT, int | None], bool],
        listener: WakeListener,
        exits: ExitStack,
        waker: EventWaker,
        clock: Clock,
        heartbeat: timedelta,
        generation: int,
        after: int | None,
        check: Callable[[], Awaitable[None]],
    ) -> None:
        self._pending: PageT | None = first
        self._check = check
        self._cursor = first.next_after
        self._read = read
        self._more = more
        self._listener = listener
        self._exits = exits
        self._waker = waker
        self._clock = clock
        self._heartbeat = heartbeat
        self._generation = generation
        self._read_at_once = more(first, after)
        self._last_sent = clock.now()
        self._closed = False

    @property
    def cursor(self) -> int:
        """The cursor after everything this stream read (resume with it)."""
        return self._cursor

    def __aiter__(self) -> LiveStream[PageT]:
        return self

    async def __anext__(self) -> PageT | Heartbeat:
        """The next page with events, or a heartbeat.

        Raises:
            StopAsyncIteration: when the stream was closed or the process shuts down.
        """
        pending, self._pending = self._pending, None
        if pending is not None and _size(pending):
            self._last_sent = self._clock.now()
            return pending
        while True:
            if self._closed or self._waker.closed:
                raise StopAsyncIteration
            if not self._read_at_once:
                waited = self._heartbeat - (self._clock.now() - self._last_sent)
                woken = await self._listener.wait(max(waited, timedelta(0)))
                if self._waker.closed:
                    raise StopAsyncIteration
                if not woken and self._waker.generation == self._generation:
                    return await self._heartbeat_item()
            try:
                page = await self._next_page()
            except Unauthenticated:
                await self.aclose()
                raise StopAsyncIteration from None
            if _size(page):
                self._last_sent = self._clock.now()
                return page
            if not self._read_at_once and self._clock.now() - self._last_sent >= self._heartbeat:
                return await self._heartbeat_item()

    async def _heartbeat_item(self) -> Heartbeat:
        """A heartbeat, while the stream's token lives; else the stream ends."""
        try:
            await self._check()
        except Unauthenticated:
            await self.aclose()
            raise StopAsyncIteration from None
        self._last_sent = self._clock.now()
        return HEARTBEAT

    async def _next_page(self) -> PageT:
        self._generation = self._waker.generation
        before = self._cursor
        page = await self._read(before)
        self._read_at_once = self._more(page, before)
        self._cursor = page.next_after
        return page

    async def aclose(self) -> None:
        """Close the stream and free its place (idempotent)."""
        if not self._closed:
            self._closed = True
            self._exits.close()

    async def __aenter__(self) -> LiveStream[PageT]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class LiveDelivery:
    """Long-polls and streams over the page use cases.

    Args:
        conversation: the shared feed's pages.
        runs: the agent feed's pages.
        identity: resolves the token of a long read again before its later reads.
        waker: the wake-up port of the store.
        clock: the time (deadlines).
        settings: ``stream.*`` and ``page.default_limit``.
    """

    def __init__(
        self,
        conversation: ConversationService,
        runs: RunsService,
        identity: IdentityService,
        waker: EventWaker,
        clock: Clock,
        settings: Settings,
    ) -> None:
        self._conversation = conversation
        self._runs = runs
        self._identity = identity
        self._waker = waker
        self._clock = clock
        self._settings = settings
        self._heartbeat = settings.stream_heartbeat
        self._lock = threading.Lock()
        self._streams: dict[uuid.UUID, int] = {}
        self._open = 0
        #: Called with the number of open streams whenever it changes (for example the
        #: gauge ``turnkeeper_event_stream_clients``).
        self.stream_count_hooks: list[StreamCountHook] = []

    @property
    def waker(self) -> EventWaker:
        """The wake-up port in use."""
        return self._waker

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
        caller = _Caller(actor, bearer, self._identity)

        async def read(cursor: int | None) -> EventPage:
            reader = await caller.current()
            return await self._conversation.list_events(reader, after=cursor or 0, limit=limit)

        return await self._long_poll(SHARED_FEED, waited, after, read)

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
            if not waited or _size(first.page):
                return first.page
            after = first.page.next_after
            bearer = actor

            async def read_by_token(cursor: int | None) -> AgentEventPage:
                # The token again in the read's own round trip: a revoked one is 401.
                return (await self._runs.poll_as(bearer, after=cursor, limit=limit)).page

            return await self._long_poll(agent.id, waited, after, read_by_token)

        async def read(cursor: int | None) -> AgentEventPage:
            return await self._runs.poll(agent, after=cursor, limit=limit)

        return await self._long_poll(agent.id, waited, after, read)

    async def _long_poll(
        self,
        feed: Feed,
        wait: timedelta,
        after: int | None,
        read: Callable[[int | None], Awaitable[PageT]],
    ) -> PageT:
        if not wait:
            return await read(after)
        deadline = self._clock.now() + wait
        # Timed-out waits are counted too, so that a clock standing still (a test's)
        # cannot make a long-poll wait for ever.
        budget = wait
        with self._waker.listen(feed) as listener:
            generation = self._waker.generation
            before, page = after, await read(after)
            while not _size(page) and not self._waker.closed:
                remaining = min(budget, deadline - self._clock.now())
                if remaining <= timedelta(0):
                    break
                if _moved(page, before):
                    # Only undeliverable events were read (invocations of runs that are
                    # no longer queued): more may follow at once.
                    before, page = page.next_after, await read(page.next_after)
                    continue
                step = min(remaining, self._heartbeat)
                woken = await listener.wait(step)
                if not woken:
                    budget -= step
                    if self._waker.generation == generation:
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
        size = self._settings.page_default_limit
        caller = _Caller(actor, bearer, self._identity)

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
        size = self._settings.page_default_limit
        caller = _Caller(agent, bearer, self._identity)

        async def read(cursor: int | None) -> AgentEventPage:
            token = caller.bearer
            if caller.take_resolved() or token is None:
                return await self._runs.poll(agent, after=cursor, limit=size)
            # The token again in the read's own round trip: a revoked one ends the stream.
            return (await self._runs.poll_as(token, after=cursor, limit=size)).page

        return await self._open_stream(agent, agent.id, after, read, _moved, caller)

    async def _open_stream(
        self,
        principal: Principal,
        feed: Feed,
        after: int | None,
        read: Callable[[int | None], Awaitable[PageT]],
        more: Callable[[PageT, int | None], bool],
        caller: _Caller,
    ) -> LiveStream[PageT]:
        exits = ExitStack()
        try:
            self._take_place(principal.id)
            exits.callback(self._free_place, principal.id)
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

    def _take_place(self, principal_id: uuid.UUID) -> None:
        with self._lock:
            held = self._streams.get(principal_id, 0)
            if held >= self._settings.stream_max_per_principal:
                raise RateLimited(retry_after=int(self._heartbeat.total_seconds()))
            self._streams[principal_id] = held + 1
            self._open += 1
            count = self._open
        self._counted(count)

    def _free_place(self, principal_id: uuid.UUID) -> None:
        with self._lock:
            held = self._streams.get(principal_id, 0) - 1
            if held > 0:
                self._streams[principal_id] = held
            else:
                self._streams.pop(principal_id, None)
            self._open -= 1
            count = self._open
        self._counted(count)

    def _counted(self, count: int) -> None:
        for hook in self.stream_count_hooks:
            hook(count)

    def close(self) -> None:
        """End every stream and long-poll of this process (it shuts down)."""
        self._waker.close()
