"""The state of one MCP session of ``turnkeeper mcp``, and the sessions of one process.

An `McpSession` is what one agent runtime session needs between tool calls: its own
`AgentRuntimeClient` with its own `SessionFreshnessState` (the observed frontier per
target, seed section 4.3), the runs it works on (by thread, so that ``send_message``
carries the run id of the target's run), the logical sends still waiting to be
completed (so that resending the same content reuses its logical id and the server
replays the parts it holds) and the titles of threads named in guidance.

`SessionRegistry` holds the sessions of one process: over stdio there is one; over
streamable HTTP one per ``Mcp-Session-Id``, and requests without one (stateless
protocol revisions) share the process's default session. The least recently used
session beyond ``mcp.max_sessions`` is closed.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections import OrderedDict
from collections.abc import Callable

import attrs
import msgspec

from turnkeeper.adapters.client import AgentRuntimeClient, ClientError
from turnkeeper.adapters.client.session import ApiSession
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


@attrs.frozen(kw_only=True)
class PendingSend:
    """A logical send to a thread that is not complete yet (held, partly held, unknown).

    Attributes:
        logical_id: the id its parts' client message ids start with.
        digest: the digest of its content.
    """

    logical_id: str
    digest: str


class _Thread(msgspec.Struct):
    title: str | None = None


class McpSession:
    """One agent runtime session: its client, frontiers, runs and pending sends.

    Args:
        client: the session's own runtime client (its freshness state is the session's).
        api: an HTTP session with the same token, for reads the client has no call for.
    """

    def __init__(self, client: AgentRuntimeClient, api: ApiSession) -> None:
        self.client = client
        self._api = api
        #: thread id -> the run this session works on there.
        self.runs: dict[str, str] = {}
        #: thread id -> the logical send to complete there.
        self.pending: dict[str, PendingSend] = {}
        self._titles: dict[str, str | None] = {}
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
        pending = self.pending.get(thread_id)
        if pending is not None and pending.digest == content_digest(content):
            return pending.logical_id
        return uuid.uuid4().hex

    def keep_pending(self, thread_id: str, logical_id: str, content: str) -> None:
        """Remember a send that must be completed with the same logical id.

        Args:
            thread_id: the target thread.
            logical_id: the send's logical id.
            content: its content (only its digest is kept).
        """
        self.pending[thread_id] = PendingSend(logical_id=logical_id, digest=content_digest(content))

    def take_run(self, thread_id: str, run_id: str) -> None:
        """Note a run this session works on: sends to its thread carry its id.

        Args:
            thread_id: the run's thread.
            run_id: the run.
        """
        self.runs[thread_id] = run_id

    def drop_run(self, run_id: str) -> None:
        """Forget a run that ended.

        Args:
            run_id: the run.
        """
        for thread_id in [t for t, r in self.runs.items() if r == run_id]:
            del self.runs[thread_id]

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


class SessionRegistry:
    """The MCP sessions of one process, at most ``max_sessions`` of them.

    Args:
        factory: makes the state of a new session.
        max_sessions: sessions kept; the least recently used beyond it is closed.
    """

    def __init__(self, factory: SessionFactory, max_sessions: int) -> None:
        self._factory = factory
        self._max = max_sessions
        self._sessions: OrderedDict[str, McpSession] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    async def session(self, key: str | None) -> McpSession:
        """The session of a key, made on first use.

        Args:
            key: the transport's session id; None for the default session.

        Returns:
            The session's state.
        """
        name = key or DEFAULT_SESSION
        found = self._sessions.get(name)
        if found is not None:
            self._sessions.move_to_end(name)
            return found
        made = self._factory()
        self._sessions[name] = made
        while len(self._sessions) > self._max:
            _, oldest = self._sessions.popitem(last=False)
            await oldest.aclose()
        return made

    async def aclose(self) -> None:
        """Close every session."""
        while self._sessions:
            _, session = self._sessions.popitem()
            await session.aclose()


__all__ = [
    "DEFAULT_SESSION",
    "McpSession",
    "PendingSend",
    "SessionFactory",
    "SessionRegistry",
    "content_digest",
]
