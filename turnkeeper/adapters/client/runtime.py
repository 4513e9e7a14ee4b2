"""The agent runtime client: events, heartbeat, history and freshness-gated sends.

It speaks the Agent runtime routes of API.md over `httpx.AsyncClient` and keeps the
session's freshness frontiers (`turnkeeper.domain.freshness.SessionFreshnessState`):

- `read_history` surfaces a thread through its ``covers_through_seq``;
  `read_history_to_latest` pages until it covers the latest seq the thread and the
  session know of (what an agent reads before it answers);
- `send` carries ``seen_up_to_seq`` = the observed frontier, is held locally without a
  request while the session knows of messages the runtime has not surfaced, and applies
  the answer (sent / already_sent advance the observed frontier to the accepted seq,
  held records the latest-known seq);
- `send_logical` splits long content into chunks with client ids ``logical_id:index``
  and stops at a held chunk (partial_held); retrying the same logical id replays the
  stored chunks (also when the frontiers would hold it locally: the client remembers
  which chunks the server holds) and resumes.

The event feed's ``seq`` is the ack cursor only; it never enters the frontiers.

Example:
    >>> async def answer(client: AgentRuntimeClient, thread_id: str) -> None:
    ...     await client.read_history_to_latest(thread_id)
    ...     result = await client.send(thread_id, "Done, Alex.", "reply-1")
    ...     if result.guidance:
    ...         print(result.guidance)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Self

import httpx

from turnkeeper.adapters.client import wire
from turnkeeper.adapters.client.errors import AnswerInvalid
from turnkeeper.adapters.client.models import (
    Capabilities,
    EventPage,
    HistoryMessage,
    HistoryPage,
    Id,
    LogicalSendResult,
    SendResult,
    ThreadTarget,
)
from turnkeeper.adapters.client.runs import RunCalls
from turnkeeper.adapters.client.sends import SendGate, log_logical_send
from turnkeeper.adapters.client.session import ApiSession
from turnkeeper.adapters.client.stream import EventStreamCalls
from turnkeeper.adapters.client.targets import TargetKeys
from turnkeeper.adapters.observability.client import RuntimeMetrics
from turnkeeper.adapters.observability.metrics import TARGET_TYPE_THREAD
from turnkeeper.domain.freshness import SendState, SessionFreshnessState
from turnkeeper.domain.logical_sends import (
    AcceptedChunk,
    LogicalSendState,
    chunk_client_message_id,
    logical_state,
    next_chunk_seen,
    split_content,
)

#: The most history pages one `AgentRuntimeClient.read_history_to_latest` call reads; a
#: thread with more unread pages is caught up by calling it again from the answer's
#: ``covers_through_seq``.
HISTORY_MAX_PAGES = 20


class AgentRuntimeClient(RunCalls, EventStreamCalls):
    """An agent's client of the turnkeeper HTTP API, one per agent session.

    Args:
        base_url: the server, for example ``https://turnkeeper.example.com``.
        token: the agent's bearer token (sent in ``Authorization``, never logged).
        transport: an httpx transport, for example ``httpx.MockTransport`` in tests.
        timeout: httpx timeouts; httpx's default when None.
        freshness: the session's frontiers; a new, empty state when None.
        metrics: counts partial-held logical sends (`ClientMetrics`); none when None.
        sleep: the pause between two reconnects of `events`; `asyncio.sleep` when None
            (tests pass one that records the delays instead of waiting).

    Use it as an async context manager, or call `aclose`.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: httpx.Timeout | None = None,
        freshness: SessionFreshnessState | None = None,
        metrics: RuntimeMetrics | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        self._session = ApiSession(base_url, token, transport=transport, timeout=timeout)
        # The stream and long-poll calls need httpx's own streaming and timeouts.
        self._http = self._session.http
        self._freshness = freshness if freshness is not None else SessionFreshnessState()
        self._targets = TargetKeys(self._session)
        self._gate = SendGate(self._session, self._freshness, self._targets)
        self._metrics = metrics
        self._sleep = sleep if sleep is not None else asyncio.sleep

    def __repr__(self) -> str:
        return f"AgentRuntimeClient(base_url={self._session.base_url!r})"

    @property
    def freshness(self) -> SessionFreshnessState:
        """The session's freshness frontiers, by target key."""
        return self._freshness

    async def aclose(self) -> None:
        """Close the connections."""
        await self._session.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _request(
        self,
        method: str,
        path: str,
        *,
        json: Mapping[str, Any] | None = None,
        params: Mapping[str, int] | None = None,
    ) -> httpx.Response:
        return await self._session.request(method, path, json=json, params=params)

    # -- events and heartbeat -----------------------------------------------------------

    async def poll_events(self, after: int | None = None, limit: int | None = None) -> EventPage:
        """Read the agent's personal events after a cursor.

        Args:
            after: the cursor (``next_after`` of the previous page); when None, none is
                sent and the server reads from the agent's acknowledged position, so
                events acknowledged before are not delivered again.
            limit: the most events to return; the server's ``page.default_limit`` when
                None.

        Returns:
            The page with typed events (invocation tokens, redelivery flags).

        Raises:
            ClientProblem: on an error answer.
            ClientUnavailable: when the server cannot be reached.
            AnswerInvalid: when the answer breaks the contract.
        """
        params: dict[str, int] = {}
        if after is not None:
            params["after"] = after
        if limit is not None:
            params["limit"] = limit
        return wire.event_page(
            await self._session.request("GET", "/v1/agent/events", params=params)
        )

    async def ack(self, through_seq: int) -> None:
        """Acknowledge the events through a seq, so they are not delivered again.

        Args:
            through_seq: the event seq (feed cursor), never a thread seq.

        Raises:
            ClientProblem: on an error answer.
            ClientUnavailable: when the server cannot be reached.
        """
        await self._session.request(
            "POST", "/v1/agent/events/ack", json={"through_seq": through_seq}
        )

    async def heartbeat(self, capabilities: Capabilities) -> None:
        """Tell the server the runtime is alive and what it can do.

        Args:
            capabilities: the runtime's capabilities (follow-up mode).

        Raises:
            ClientProblem: on an error answer.
            ClientUnavailable: when the server cannot be reached.
        """
        caps: dict[str, str] = {}
        if capabilities.followups is not None:
            caps["followups"] = capabilities.followups.value
        await self._session.request("PUT", "/v1/agent/heartbeat", json={"capabilities": caps})

    # -- threads and history ------------------------------------------------------------

    async def get_thread(self, thread_id: Id) -> ThreadTarget:
        """Read a thread as a send target and remember its target key.

        The raw ``latest_seq`` is returned for the caller's information; it is not a
        surface and leaves the frontiers as they are.

        Args:
            thread_id: the thread.

        Returns:
            Its id, canonical target key and raw latest seq.

        Raises:
            ClientProblem: on an error answer (404 not_found for an unreadable thread).
            ClientUnavailable: when the server cannot be reached.
            AnswerInvalid: when the answer breaks the contract.
        """
        return await self._targets.read(str(thread_id))

    async def target_key(self, thread_id: Id) -> str:
        """The canonical target key of a thread, from memory or the server.

        Args:
            thread_id: the thread.

        Returns:
            The target key.

        Raises:
            ClientProblem: on an error answer.
            ClientUnavailable: when the server cannot be reached.
        """
        return await self._targets.key(str(thread_id))

    async def read_history(
        self, thread_id: Id, after_seq: int = 0, limit: int | None = None
    ) -> HistoryPage:
        """Read a thread's history and surface it through ``covers_through_seq``.

        Hand the returned messages to the runtime: the observed frontier already
        counts them as surfaced, when the page joins what was surfaced before
        (``after_seq`` at or below the observed frontier; after a gap nothing is, since
        the gap's messages were never shown). This is one page: in a thread longer than a page it
        does not reach the latest message, so before answering read with
        `read_history_to_latest`.

        Args:
            thread_id: the thread.
            after_seq: read messages after this thread seq.
            limit: the most messages; the server's ``page.default_limit`` when None.

        Returns:
            The page; the session's observed frontier of the target is at least
            ``covers_through_seq`` afterwards unless the page was read after a gap.

        Raises:
            ClientProblem: on an error answer.
            ClientUnavailable: when the server cannot be reached.
            AnswerInvalid: when the answer breaks the contract.
        """
        params = {"after_seq": after_seq}
        if limit is not None:
            params["limit"] = limit
        response = await self._session.request(
            "GET", f"/v1/threads/{thread_id}/messages", params=params
        )
        messages, covers_through, answered_key = wire.history(response)
        if answered_key is not None:
            self._targets.remember(str(thread_id), answered_key)
        target_key = answered_key or await self.target_key(thread_id)
        last = messages[-1] if messages else None
        message_id = last.id if last is not None and last.thread_seq == covers_through else None
        self._freshness.mark_page_read(target_key, after_seq, covers_through, message_id)
        return HistoryPage(
            thread_id=str(thread_id),
            target_key=target_key,
            messages=messages,
            covers_through_seq=covers_through,
        )

    async def read_history_to_latest(
        self,
        thread_id: Id,
        after_seq: int = 0,
        limit: int | None = None,
        *,
        max_pages: int = HISTORY_MAX_PAGES,
    ) -> HistoryPage:
        """Read a thread's history page by page until it covers the latest known seq.

        The latest known seq is the higher of the thread's ``latest_seq`` (read first)
        and the session's latest-known frontier (a held answer). Reading through it
        ends a freshness hold, which one page of a long thread would never do. Each
        page is surfaced as by `read_history`.

        Args:
            thread_id: the thread.
            after_seq: read messages after this thread seq (the ``covers_through_seq``
                of an earlier read, to read only what is new).
            limit: the most messages of one page; the server's ``page.default_limit``
                when None.
            max_pages: the most pages to read. When it is reached first, the answer's
                ``covers_through_seq`` is below the latest seq: call again from it.

        Returns:
            The messages of every page read, in seq order, with the last page's
            ``covers_through_seq``.

        Raises:
            ValueError: for max_pages below one.
            ClientProblem: on an error answer (404 not_found for an unreadable thread).
            ClientUnavailable: when the server cannot be reached.
            AnswerInvalid: when an answer breaks the contract.
        """
        if max_pages < 1:
            raise ValueError("max_pages must be at least 1")
        target = await self._targets.read(str(thread_id))
        cursor = after_seq
        page = await self.read_history(thread_id, cursor, limit)
        messages: list[HistoryMessage] = list(page.messages)
        for _ in range(max_pages - 1):
            latest = max(
                target.latest_seq, self._freshness.frontier(page.target_key).latest_known_seq
            )
            # A page that did not move past its cursor proves nothing more exists to read.
            if page.covers_through_seq >= latest or page.covers_through_seq <= cursor:
                break
            cursor = page.covers_through_seq
            page = await self.read_history(thread_id, cursor, limit)
            messages.extend(page.messages)
        return HistoryPage(
            thread_id=str(thread_id),
            target_key=page.target_key,
            messages=tuple(messages),
            covers_through_seq=page.covers_through_seq,
        )

    # -- sends --------------------------------------------------------------------------

    async def send(
        self,
        thread_id: Id,
        content: str,
        client_message_id: str,
        run_id: Id | None = None,
        source_message_ids: Iterable[Id] = (),
    ) -> SendResult:
        """Send one message through the freshness gate.

        The send carries ``seen_up_to_seq`` = the observed frontier of the target. When
        the session knows of messages after it (a held answer, a pending delivery), the
        send is held locally and no request is made, unless an earlier answer of this
        client stored the same client message id (a retry: the server answers it
        already_sent). The answer updates the frontier.

        Args:
            thread_id: the target thread.
            content: the text (never logged).
            client_message_id: the idempotency key; a retry with the same key and content
                answers already_sent.
            run_id: the run this answer belongs to, if any.
            source_message_ids: the messages the answer is based on; when empty, the
                message at the observed frontier, when known.

        Returns:
            sent, already_sent or held (`SendResult.held_locally` when no request was
            made); `SendResult.guidance` is the runtime's refresh instruction.

        Raises:
            ClientProblem: on an error answer (idempotency_conflict, validation_failed
                with freshness_required, target_key_mismatch ...).
            ClientUnavailable: when the server cannot be reached; the outcome is then
                unknown and a retry with the same client message id is safe.
            AnswerInvalid: when the answer breaks the contract.
        """
        if not client_message_id:
            raise ValueError("client_message_id must not be empty")
        target_key = await self.target_key(thread_id)
        return await self._gate.send_once(
            thread_id=str(thread_id),
            target_key=target_key,
            content=content,
            client_message_id=client_message_id,
            seen_up_to_seq=None,
            run_id=run_id,
            source_message_ids=tuple(str(s) for s in source_message_ids),
        )

    async def send_logical(
        self,
        thread_id: Id,
        logical_id: str,
        content: str,
        chunk_size: int,
        run_id: Id | None = None,
        source_message_ids: Iterable[Id] = (),
    ) -> LogicalSendResult:
        """Send long content as chunks that stop at the first held one.

        Chunk ``i`` has client id ``logical_id:i``. The first chunk carries the observed
        frontier, each later chunk the accepted seq of the chunk before, so a message
        written by someone else in between holds the rest (partial_held). A retry with
        the same logical id and content replays the stored chunks (already_sent) and
        resumes with ``max(refreshed observed frontier, last accepted seq)``. The client
        remembers the client message ids the server holds (the most recent
        `sends.REMEMBERED_SENDS`), so a retry before the refresh still replays the stored
        chunks and answers partial_held with them, not held with none.

        Args:
            thread_id: the target thread.
            logical_id: the id of the logical send, the same on every retry.
            content: the whole text (never logged).
            chunk_size: the most UTF-8 bytes of one chunk (at most the server's
                ``message.max_content_bytes``).
            run_id: the run this answer belongs to, if any.
            source_message_ids: as for `send`.

        Returns:
            sent, already_sent, held or partial_held with the stored chunks;
            `LogicalSendResult.guidance` is the runtime's refresh instruction.

        Raises:
            ValueError: for blank content or a chunk size too small for one of its
                visible characters.
            ClientProblem: on an error answer (idempotency_conflict when a retry changed
                the content of a stored chunk ...).
            ClientUnavailable: when the server cannot be reached; retry with the same
                logical id.
            AnswerInvalid: when the answer breaks the contract.
        """
        chunks = split_content(content, chunk_size)
        if not chunks:
            raise ValueError("content must not be empty")
        target_key = await self.target_key(thread_id)
        sources = tuple(str(s) for s in source_message_ids)
        accepted: list[AcceptedChunk] = []
        held: SendResult | None = None
        for index, chunk in enumerate(chunks):
            client_message_id = chunk_client_message_id(logical_id, index)
            seen = next_chunk_seen(
                observed_seq=self._freshness.frontier(target_key).observed_seq,
                previous=accepted[-1] if accepted else None,
            )
            outcome = await self._gate.send_once(
                thread_id=str(thread_id),
                target_key=target_key,
                content=chunk,
                client_message_id=client_message_id,
                seen_up_to_seq=seen,
                run_id=run_id,
                source_message_ids=sources,
            )
            target_key = outcome.target_key
            if outcome.state is SendState.HELD:
                held = outcome
                break
            if outcome.message_id is None or outcome.accepted_seq is None:
                # wire.send_answer refuses such answers already; this narrows the types.
                raise AnswerInvalid("an accepted chunk lacks message_id or accepted_seq")
            stored_chunk = AcceptedChunk(
                index=index,
                client_message_id=client_message_id,
                message_id=outcome.message_id,
                accepted_seq=outcome.accepted_seq,
                replayed=outcome.state is SendState.ALREADY_SENT,
            )
            accepted.append(stored_chunk)
        result = LogicalSendResult(
            state=logical_state(
                chunk_count=len(chunks), accepted=tuple(accepted), held=held is not None
            ),
            logical_id=logical_id,
            target_key=target_key,
            chunk_count=len(chunks),
            accepted=tuple(accepted),
            held_chunk_index=len(accepted) if held is not None else None,
            latest_seq=held.latest_seq if held is not None else None,
            held_locally=held.held_locally if held is not None else False,
        )
        if (
            result.state is LogicalSendState.PARTIAL_HELD
            and not result.held_locally
            and self._metrics is not None
        ):
            # A stop the server decided; a retry the session holds without a request is
            # the same stop again, not another logical send that stopped.
            self._metrics.partial_held(TARGET_TYPE_THREAD)
        log_logical_send(result)
        return result


__all__ = ["AgentRuntimeClient"]
