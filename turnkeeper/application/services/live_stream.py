"""An open event stream, and the reader of a long read resolved again from its token.

`LiveStream` yields pages of new events and heartbeats until it is closed;
`Reader` gives a long-poll's or a stream's reads their principal, resolving the bearer
token again before every read after the first (ADR 0016: no cache window). Both are
built by `turnkeeper.application.services.live.LiveDelivery`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from datetime import timedelta
from typing import Final, Generic, TypeVar

import attrs

from turnkeeper.application.errors import Unauthenticated
from turnkeeper.application.ports import Clock
from turnkeeper.application.services.conversation import EventPage
from turnkeeper.application.services.identity import BearerToken, IdentityService
from turnkeeper.application.services.runs import AgentEventPage
from turnkeeper.application.wakeup import EventWaker, WakeListener
from turnkeeper.domain.world import Principal

PageT = TypeVar("PageT", bound=EventPage | AgentEventPage)


@attrs.frozen
class Heartbeat:
    """A stream item that carries no event: the stream is alive and waited in vain."""


#: The one heartbeat item.
HEARTBEAT: Final = Heartbeat()


def moved(page: EventPage | AgentEventPage, before: int | None) -> bool:
    """Whether a read may have left readable events behind (read again at once).

    The agent feed skips undeliverable events without a trace in the page, so any page
    that moved the cursor (or that started from the feed's default position) may have
    stopped at its size with more to come; an empty page of the shared feed never moves.
    """
    return before is None or page.next_after != before


def events_in(page: EventPage | AgentEventPage) -> int:
    """The events (or deliveries) a page holds."""
    if isinstance(page, EventPage):
        return len(page.events)
    return len(page.deliveries)


class Reader:
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
    principal's streams. A call cut short (a timeout or cancel around ``__anext__``)
    loses nothing: the next call reads at once.

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
        if pending is not None and events_in(pending):
            self._last_sent = self._clock.now()
            return pending
        try:
            return await self._next_item()
        except BaseException:
            # A call cut short (a caller's timeout or cancel) may have used up the
            # wake-up of an event it never read: the next call reads at once instead of
            # answering heartbeats until some other commit.
            self._read_at_once = True
            raise

    async def _next_item(self) -> PageT | Heartbeat:
        """The next page with events or a heartbeat, after the pending first page."""
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
            if events_in(page):
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


__all__ = ["HEARTBEAT", "Heartbeat", "LiveStream", "PageT", "Reader", "events_in", "moved"]
