"""The agent's live feed in the runtime client: the event stream and long-polls.

`EventStreamCalls` gives `turnkeeper.adapters.client.AgentRuntimeClient`:

- `events`: an async iterator over the agent's stream (GET /v1/agent/events/stream)
  that acknowledges each event once the caller's loop body has handled it, and
  reconnects (after a server shutdown, a lost connection, a 429 or a 503, of the stream
  or of an ack) with ``Last-Event-ID``, so nothing is skipped and nothing delivered
  twice within a session;
- `wait_events`: one long-poll of the page route (``wait=<seconds>``).

Example:
    >>> async with AgentRuntimeClient(url, token) as client:  # doctest: +SKIP
    ...     async for event in client.events():
    ...         if event.type == "agent.invocation":
    ...             await handle(client, event)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx

from turnkeeper.adapters.client import wire
from turnkeeper.adapters.client.errors import ClientProblem, ClientUnavailable
from turnkeeper.adapters.client.models import AgentEvent, EventPage
from turnkeeper.application.logs import get_logger

#: The agent's stream route.
STREAM_PATH = "/v1/agent/events/stream"
#: Seconds before the first reconnect; doubled per failed attempt up to the maximum.
RECONNECT_DELAY_SECONDS = 0.5
#: The longest pause between two reconnects.
RECONNECT_MAX_DELAY_SECONDS = 30.0
#: Seconds without a byte (not even a heartbeat) after which the stream counts as lost;
#: well above the server's default ``stream.heartbeat_seconds`` (15).
STREAM_IDLE_TIMEOUT_SECONDS = 60.0
#: Seconds a long-poll's answer may take beyond its ``wait``.
LONG_POLL_MARGIN_SECONDS = 10.0
#: Statuses after which the stream (or an ack of it) is tried again rather than given
#: up: rate limited, and a server or proxy that is briefly unavailable.
RETRIED_STATUSES = frozenset({429, 502, 503, 504})

_LOGGER_NAME = "turnkeeper.client"


def _log() -> Any:
    return get_logger(_LOGGER_NAME)


async def sse_data(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """The ``data`` of each Server-Sent Events message (comments and ids skipped).

    Args:
        lines: the lines of a ``text/event-stream`` body.

    Yields:
        Each message's data, its ``data:`` lines joined by newlines.
    """
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
            data = []
        elif line.startswith("data:"):
            data.append(line[len("data:") :].removeprefix(" "))


class EventStreamCalls:
    """The live feed of an agent's client (mixed into `AgentRuntimeClient`)."""

    _http: httpx.AsyncClient
    #: The pause between reconnects (`asyncio.sleep` unless the client was given another).
    _sleep: Callable[[float], Awaitable[None]]

    async def ack(self, through_seq: int) -> None:
        """See `AgentRuntimeClient.ack`."""
        raise NotImplementedError  # pragma: no cover (the client's own wins)

    async def wait_events(
        self, after: int | None = None, *, wait: float, limit: int | None = None
    ) -> EventPage:
        """One long-poll of the agent feed: answers as soon as one event is readable.

        Args:
            after: the cursor; the acknowledged position when None.
            wait: seconds to wait at most (``stream.max_wait_seconds`` of the server).
            limit: the most events of the page.

        Returns:
            The page (empty when the wait ended without an event).

        Raises:
            ClientProblem: on an error answer (400 for a wait out of bounds).
            ClientUnavailable: when the server cannot be reached.
        """
        params: dict[str, float] = {"wait": wait}
        if after is not None:
            params["after"] = after
        if limit is not None:
            params["limit"] = limit
        try:
            response = await self._http.get(
                "/v1/agent/events",
                params=params,
                timeout=httpx.Timeout(wait + LONG_POLL_MARGIN_SECONDS),
            )
        except httpx.TransportError as exc:
            raise ClientUnavailable(f"GET /v1/agent/events: {type(exc).__name__}") from exc
        if not response.is_success:
            raise wire.problem(response)
        return wire.event_page(response)

    async def events(
        self,
        after: int | None = None,
        *,
        ack: bool = True,
        idle_timeout: float = STREAM_IDLE_TIMEOUT_SECONDS,
    ) -> AsyncIterator[AgentEvent]:
        """The agent's events as they come, for ever (stop by leaving the loop).

        Each event is acknowledged (POST /v1/agent/events/ack) when the loop asks for
        the next one, that is after the loop body handled it; an event whose body
        raised or broke out of the loop stays unacknowledged and is delivered again in
        a later session. The stream is reopened with ``Last-Event-ID`` whenever it ends
        or fails. A stream that ended after delivering events is reopened at once; one
        that ended without an event (a server shutting down), failed, or was answered
        (or had its ack answered) with a retriable status (`RETRIED_STATUSES`) is
        reopened after a pause that doubles per attempt without an event, and is at
        least the answer's ``Retry-After``. An ack refused that way is sent again
        before the stream is reopened.

        Args:
            after: the cursor to start from; the acknowledged position when None.
            ack: acknowledge each handled event.
            idle_timeout: seconds without any byte after which the stream is reopened.

        Yields:
            The events, in seq order, each with its fresh invocation token.

        Raises:
            ClientProblem: on an error answer that a retry cannot cure (401, 403, 400),
                of the stream or of an ack.
            AnswerInvalid: when an event breaks the contract.
        """
        cursor = after
        delay = RECONNECT_DELAY_SECONDS
        # A handled event whose ack failed: acknowledged before the stream is reopened,
        # so that a later session does not get it again.
        unacked: int | None = None
        while True:
            delivered = False
            try:
                if unacked is not None:
                    await self.ack(unacked)
                    unacked = None
                headers = {} if cursor is None else {"Last-Event-ID": str(cursor)}
                async with self._http.stream(
                    "GET", STREAM_PATH, headers=headers, timeout=httpx.Timeout(idle_timeout)
                ) as response:
                    if not response.is_success:
                        await response.aread()
                        raise wire.problem(response)
                    async for data in sse_data(response.aiter_lines()):
                        event = wire.agent_event(data)
                        cursor = event.seq
                        # Only an event proves the server healthy again: a 200 that ends
                        # at once (a shutdown) must not reset the backoff.
                        delivered = True
                        delay = RECONNECT_DELAY_SECONDS
                        yield event
                        if ack:
                            unacked = event.seq
                            await self.ack(event.seq)
                            unacked = None
                _log().info("agent_stream_ended", cursor=cursor, delivered=delivered)
                if delivered:
                    # The stream made progress: reopen at once, as a restart ends it.
                    continue
            except ClientProblem as problem:
                if problem.status not in RETRIED_STATUSES:
                    raise
                delay = max(delay, float(problem.retry_after or 0))
                _log().info(
                    "agent_stream_lost", cause=problem.code, status=problem.status, cursor=cursor
                )
            except (httpx.TransportError, ClientUnavailable) as exc:
                _log().info("agent_stream_lost", cause=type(exc).__name__, cursor=cursor)
            await self._sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX_DELAY_SECONDS)
