"""The state of one MCP session of ``turnkeeper mcp``, and the sessions of one process.

An `McpSession` is what one agent runtime session needs between tool calls: its own
`AgentRuntimeClient` with its own `SessionFreshnessState` (the observed frontier per
target, seed section 4.3), the runs it works on (by thread, so that ``send_message``
carries the run id of the target's run), the follow-ups handed to the model in each run
and not yet acknowledged absorbed, the logical sends still waiting to be
completed (so that resending the same content reuses its logical id and the server
replays the parts it holds) and the titles of threads named in guidance.

`SessionRegistry` holds the sessions of one process: over stdio there is one; over
streamable HTTP one per ``Mcp-Session-Id``, and requests without one (stateless
protocol revisions) share the process's default session. A session with an id lives
until the MCP SDK closes its connection (the client's DELETE, the SDK's idle timeout, a
crash): `connection_teardown` finds the exit stack the SDK unwinds then, and the
registry drops the session from it. An open session is never closed to make room: at
``mcp.max_sessions`` open sessions a new one is refused (`SessionLimitReached`).
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Callable
from contextlib import AsyncExitStack

import msgspec

from turnkeeper.adapters.client import AgentEvent, AgentRuntimeClient, ClientError
from turnkeeper.adapters.client.session import ApiSession
from turnkeeper.application.settings import Settings
from turnkeeper.domain.freshness import SessionFreshnessState

#: The key of the session of requests that name none (stdio, stateless HTTP).
DEFAULT_SESSION = "default"


def content_digest(content: str) -> str:
    """The digest that tells whether a resend carries the same content.

    Args:
        content: the text of a send (never stored itself).

    Returns:
        Its SHA-256, hex.
    """
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


class _Thread(msgspec.Struct):
    title: str | None = None


class McpSession:
    """One agent runtime session: its client, frontiers, runs and pending sends.

    Args:
        client: the session's own runtime client (its freshness state is the session's).
        api: an HTTP session with the same token, for reads the client has no call for.
        max_pending: ``mcp.max_pending_sends``, incomplete sends remembered at most.
    """

    def __init__(
        self, client: AgentRuntimeClient, api: ApiSession, *, max_pending: int | None = None
    ) -> None:
        self.client = client
        self._api = api
        #: thread id -> the run this session works on there.
        self.runs: dict[str, str] = {}
        #: run id -> the follow-ups (message ids) wait_for_work handed to the model in
        #: that run, acknowledged delivered and not yet absorbed, oldest first.
        self.handed: dict[str, list[str]] = {}
        #: (thread id, content digest) -> the logical id of an incomplete send of that
        #: content there (several per thread: an agent may send other words between),
        #: oldest first.
        self.pending: dict[tuple[str, str], str] = {}
        self._max_pending = (
            max_pending if max_pending is not None else Settings().mcp_max_pending_sends
        )
        self._titles: dict[str, str | None] = {}
        #: The invocation whose start could not be settled (its answer lost): the server
        #: skips the invocation of a run no longer queued, so the session hands it over.
        self.unsettled_invocation: AgentEvent | None = None
        #: Sends and reads of one session take turns: each moves the frontiers.
        self.lock = asyncio.Lock()

    @property
    def freshness(self) -> SessionFreshnessState:
        """The session's frontiers, by target key."""
        return self.client.freshness

    def logical_id_for(self, thread_id: str, content: str) -> str:
        """The logical id of a send: the pending one's for the same content, else new.

        Args:
            thread_id: the target thread.
            content: the content to send.

        Returns:
            The id to send the parts with.
        """
        found = self.pending.get((thread_id, content_digest(content)))
        return found if found is not None else uuid.uuid4().hex

    def keep_pending(self, thread_id: str, logical_id: str, content: str) -> None:
        """Remember a send that must be completed with the same logical id.

        Beyond ``mcp.max_pending_sends`` the oldest pending send is forgotten (its
        resend would be a new message).

        Args:
            thread_id: the target thread.
            logical_id: the send's logical id.
            content: its content (only its digest is kept).
        """
        key = (thread_id, content_digest(content))
        # Kept again as the newest: the oldest is the one forgotten first.
        self.pending.pop(key, None)
        self.pending[key] = logical_id
        while len(self.pending) > self._max_pending:
            del self.pending[next(iter(self.pending))]

    def forget_pending(self, thread_id: str, content: str) -> None:
        """Forget a send that completed (or can never complete with its logical id).

        Args:
            thread_id: the target thread.
            content: its content.
        """
        self.pending.pop((thread_id, content_digest(content)), None)

    def take_run(self, thread_id: str, run_id: str) -> None:
        """Note a run this session works on: sends to its thread carry its id.

        Args:
            thread_id: the run's thread.
            run_id: the run.
        """
        self.runs[thread_id] = run_id

    def drop_run(self, run_id: str) -> None:
        """Forget a run that ended, with the follow-ups handed over in it.

        Args:
            run_id: the run.
        """
        for thread_id in [t for t, r in self.runs.items() if r == run_id]:
            del self.runs[thread_id]
        self.handed.pop(run_id, None)

    def hand_over(self, run_id: str, message_id: str) -> None:
        """Note a follow-up handed to the model: its next act in the run absorbs it.

        Args:
            run_id: the run the follow-up belongs to.
            message_id: the follow-up message.
        """
        handed = self.handed.setdefault(run_id, [])
        if message_id not in handed:
            handed.append(message_id)

    def handed_over(self, run_id: str) -> tuple[str, ...]:
        """The follow-ups handed to the model in a run and not yet absorbed.

        Args:
            run_id: the run.

        Returns:
            Their message ids, oldest first.
        """
        return tuple(self.handed.get(run_id, ()))

    def forget_handed(self, run_id: str, message_id: str) -> None:
        """Forget a handed follow-up once it is absorbed (or can never be).

        Args:
            run_id: the run.
            message_id: the follow-up message.
        """
        handed = self.handed.get(run_id)
        if handed is not None and message_id in handed:
            handed.remove(message_id)
            if not handed:
                del self.handed[run_id]

    async def thread_title(self, thread_id: str) -> str | None:
        """The title of a thread, read once per session (None when it has none).

        Args:
            thread_id: the thread.

        Returns:
            The title, or None also when the thread cannot be read.
        """
        if thread_id not in self._titles:
            try:
                response = await self._api.request("GET", f"/v1/threads/{thread_id}")
                title = msgspec.json.decode(response.content, type=_Thread).title
            except (ClientError, msgspec.DecodeError):
                # Guidance still works without the title ("this thread").
                title = None
            self._titles[thread_id] = title
        return self._titles[thread_id]

    async def aclose(self) -> None:
        """Close the session's connections."""
        await self.client.aclose()
        await self._api.aclose()


SessionFactory = Callable[[], McpSession]


class SessionLimitReached(Exception):
    """A new session was refused: the process holds ``mcp.max_sessions`` open sessions.

    ``str()`` is the text for the client (a tool error): it names the limit and what to
    do, nothing of the other sessions.

    Args:
        max_sessions: the limit (``mcp.max_sessions``).
    """

    def __init__(self, max_sessions: int) -> None:
        super().__init__(
            f"This turnkeeper mcp process already serves {max_sessions} open sessions "
            "(mcp.max_sessions), so it cannot start another one. End a session you no "
            "longer use, or try again later."
        )
        self.max_sessions = max_sessions


def connection_teardown(ctx: object) -> AsyncExitStack | None:
    """The exit stack the MCP SDK unwinds when a request's connection closes.

    The SDK keeps one connection per session and unwinds its ``exit_stack`` once the
    session ends, whichever way (the client's DELETE, the idle timeout, a crash, the
    end of stdio). The low-level request context of SDK 2.x reaches the connection only
    through its session; the context the SDK plans for handlers names it
    ``connection``, which is tried first. Nothing here imports the SDK.

    Args:
        ctx: the request context the SDK handed to a handler.

    Returns:
        The connection's exit stack; None when the context carries none.
    """
    connection = getattr(ctx, "connection", None)
    if connection is None:
        connection = getattr(getattr(ctx, "session", None), "_connection", None)
    stack = getattr(connection, "exit_stack", None)
    return stack if isinstance(stack, AsyncExitStack) else None


class SessionRegistry:
    """The MCP sessions of one process: the default one and at most ``max_sessions`` more.

    The default session (stdio, and HTTP requests without a session id) is the
    process's own and does not count against the limit, as the SDK's own limit of open
    HTTP sessions does not count it either. Sessions with an id are dropped when the SDK
    closes them (see `session`), never to make room for a new one.

    Args:
        factory: makes the state of a new session.
        max_sessions: open sessions with an id kept at most (``mcp.max_sessions``).
    """

    def __init__(self, factory: SessionFactory, max_sessions: int) -> None:
        self._factory = factory
        self._max = max_sessions
        self._sessions: dict[str, McpSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    async def session(
        self, key: str | None, *, teardown: AsyncExitStack | None = None
    ) -> McpSession:
        """The session of a key, made on first use.

        Args:
            key: the transport's session id; None for the default session.
            teardown: the exit stack the SDK unwinds when the key's connection closes
                (`connection_teardown`); a new session with an id is dropped from it.
                Ignored for the default session, whose requests may each come on a
                connection of their own (the stateless protocol revision).

        Returns:
            The session's state.

        Raises:
            SessionLimitReached: for a new id while ``max_sessions`` sessions with an id
                are open.
        """
        name = key or DEFAULT_SESSION
        found = self._sessions.get(name)
        if found is not None:
            return found
        if name != DEFAULT_SESSION:
            open_with_id = sum(1 for other in self._sessions if other != DEFAULT_SESSION)
            if open_with_id >= self._max:
                # Closing an open session would lose its frontiers and pending sends
                # while its client still works with them.
                raise SessionLimitReached(self._max)
        made = self._factory()
        self._sessions[name] = made
        if teardown is not None and name != DEFAULT_SESSION:
            teardown.push_async_callback(self.close, name)
        return made

    async def close(self, key: str | None) -> None:
        """Drop and close the session of a key; nothing when there is none.

        Args:
            key: the transport's session id; None for the default session.
        """
        session = self._sessions.pop(key or DEFAULT_SESSION, None)
        if session is not None:
            await session.aclose()

    async def aclose(self) -> None:
        """Close every session."""
        while self._sessions:
            _, session = self._sessions.popitem()
            await session.aclose()


__all__ = [
    "DEFAULT_SESSION",
    "McpSession",
    "SessionFactory",
    "SessionLimitReached",
    "SessionRegistry",
    "connection_teardown",
    "content_digest",
]
