"""The sessions of one ``turnkeeper mcp`` process: dropped when the SDK closes them, never evicted.

A session with an id is dropped (and its connections closed) when the exit stack the
SDK unwinds at the end of its connection is unwound; an open session is never closed to
make room, so a new session beyond ``mcp.max_sessions`` open ones is refused with an
error that names the limit. The default session is the process's own: it does not
count, and a request's connection ending does not drop it. The same against the SDK
itself: tests/integration/test_mcp_sessions.py.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from types import SimpleNamespace

import httpx
import pytest

from turnkeeper.adapters.client import AgentRuntimeClient
from turnkeeper.adapters.client.session import ApiSession
from turnkeeper.adapters.mcp.session import (
    McpSession,
    SessionLimitReached,
    SessionRegistry,
    connection_teardown,
)

BASE_URL = "https://turnkeeper.example.com"


class RecordedSession(McpSession):
    """A session that notes when it was closed."""

    def __init__(self) -> None:
        def refuse(request: httpx.Request) -> httpx.Response:
            raise AssertionError("no request expected")

        transport = httpx.MockTransport(refuse)
        super().__init__(
            AgentRuntimeClient(BASE_URL, "tk_example", transport=transport),
            ApiSession(BASE_URL, "tk_example", transport=transport),
        )
        self.closed = False

    async def aclose(self) -> None:
        self.closed = True
        await super().aclose()


def registry(max_sessions: int) -> SessionRegistry:
    return SessionRegistry(RecordedSession, max_sessions)


async def recorded(
    sessions: SessionRegistry, key: str | None, teardown: AsyncExitStack
) -> RecordedSession:
    made = await sessions.session(key, teardown=teardown)
    assert isinstance(made, RecordedSession)
    return made


async def test_a_session_the_sdk_closed_is_dropped_and_closed() -> None:
    sessions = registry(max_sessions=2)
    connection = AsyncExitStack()
    alex = await recorded(sessions, "alex", connection)

    await connection.aclose()

    assert alex.closed
    assert len(sessions) == 0


async def test_open_sessions_are_never_evicted_and_one_more_is_refused() -> None:
    sessions = registry(max_sessions=2)
    alex = await recorded(sessions, "alex", AsyncExitStack())
    sam = await recorded(sessions, "sam", AsyncExitStack())

    with pytest.raises(SessionLimitReached, match=r"2 open sessions \(mcp.max_sessions\)"):
        await sessions.session("robin", teardown=AsyncExitStack())

    assert await sessions.session("alex") is alex
    assert await sessions.session("sam") is sam
    assert not alex.closed
    assert not sam.closed
    assert len(sessions) == 2


async def test_a_closed_session_makes_room_for_a_new_one_and_the_others_stay() -> None:
    # The closed one was used last: a least-recently-used rule would drop an open one.
    sessions = registry(max_sessions=2)
    alex_connection = AsyncExitStack()
    sam = await recorded(sessions, "sam", AsyncExitStack())
    alex = await recorded(sessions, "alex", alex_connection)
    assert await sessions.session("alex") is alex
    await alex_connection.aclose()

    robin = await recorded(sessions, "robin", AsyncExitStack())

    assert await sessions.session("sam") is sam
    assert await sessions.session("robin") is robin
    assert not sam.closed
    assert alex.closed


async def test_the_default_session_does_not_count_and_outlives_a_requests_connection() -> None:
    sessions = registry(max_sessions=1)
    request_connection = AsyncExitStack()
    default = await recorded(sessions, None, request_connection)
    alex = await recorded(sessions, "alex", AsyncExitStack())

    # A stateless request has a connection of its own, unwound when it is answered.
    await request_connection.aclose()

    assert await sessions.session(None) is default
    assert not default.closed
    assert await sessions.session("alex") is alex
    with pytest.raises(SessionLimitReached):
        await sessions.session("sam")


async def test_closing_an_unknown_or_closed_session_does_nothing() -> None:
    sessions = registry(max_sessions=1)
    connection = AsyncExitStack()
    alex = await recorded(sessions, "alex", connection)
    await sessions.close("alex")
    await connection.aclose()  # the SDK's teardown comes after the registry's own close
    await sessions.close("sam")
    assert alex.closed
    assert len(sessions) == 0


def test_the_teardown_is_the_connections_exit_stack() -> None:
    stack = AsyncExitStack()
    # SDK 2.x: the low-level context reaches the connection through its session.
    lowlevel = SimpleNamespace(
        session=SimpleNamespace(_connection=SimpleNamespace(exit_stack=stack))
    )
    # The context the SDK plans for handlers names it.
    planned = SimpleNamespace(connection=SimpleNamespace(exit_stack=stack))
    assert connection_teardown(lowlevel) is stack
    assert connection_teardown(planned) is stack
    assert connection_teardown(SimpleNamespace(session=None)) is None
