"""Wake-ups across server processes: LISTEN/NOTIFY on one dedicated connection.

Migration 0004 makes every statement that appends events send a NOTIFY on
``turnkeeper_events`` inside its transaction; PostgreSQL delivers it to every listening
session once that transaction commits. Each process holds one connection that LISTENs
(`PostgresEventWaker`) and fans the notifications out to its waiting readers through a
`turnkeeper.adapters.wakeups.LocalWaker`. The payload is the highest seq and the feeds
of the events; no content and no token crosses it.

Nothing is lost when a notification is (the connection drops, the server restarts):

- after every (re)connect, once LISTEN is in force, every reader is woken, so commits
  made while nobody listened are read;
- once per ``check_interval`` (``stream.heartbeat_seconds``) the connection reads the
  event counter; when it moved past the highest notified seq, every reader is woken;
- while the connection is down, every reader is woken once per interval (they fall back
  to polling).

The connection is opened when the first reader listens and closed one interval after
the last one left, unless `start` keeps it for the life of the process (servers).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any

import attrs
import psycopg
import structlog

from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.wakeups import LocalWaker
from turnkeeper.application.settings import Settings
from turnkeeper.application.wakeup import SHARED_FEED, Feed, WakeListener

#: ``application_name`` of the listening connection (visible in pg_stat_activity).
LISTENER_APPLICATION_NAME = "turnkeeper-listen"
#: The feed word of the payload for shared events (see migration 0004).
_SHARED_WORD = "*"
#: The payload word that stands for every feed (too many to name).
_ALL_WORD = "all"
#: The default check interval: the default of ``stream.heartbeat_seconds``.
DEFAULT_CHECK_INTERVAL = Settings().stream_heartbeat

_log = structlog.get_logger("turnkeeper.wakeup")


@attrs.frozen(kw_only=True)
class Notification:
    """A parsed payload of ``turnkeeper_events``.

    Attributes:
        top_seq: the highest seq the committing statement appended.
        feeds: the feeds of its events; None when the payload says ``all`` or cannot be
            read (then every reader is woken).
    """

    top_seq: int
    feeds: frozenset[Feed] | None


def parse_payload(payload: str) -> Notification:
    """Read a notification payload of migration 0004.

    Args:
        payload: ``"<top seq> <feed> <feed> ..."`` with ``*`` for the shared feed, uuids
            for personal feeds, or ``all``.

    Returns:
        The notification; an unreadable payload wakes everyone (``feeds`` None).
    """
    words = payload.split()
    try:
        top = int(words[0])
        feeds: set[Feed] = set()
        for word in words[1:]:
            if word == _ALL_WORD:
                return Notification(top_seq=top, feeds=None)
            feeds.add(SHARED_FEED if word == _SHARED_WORD else uuid.UUID(word))
    except (IndexError, ValueError):
        return Notification(top_seq=0, feeds=None)
    return Notification(top_seq=top, feeds=frozenset(feeds))


class PostgresEventWaker:
    """Wakes the readers of this process on commits of any process; an `EventWaker`.

    Args:
        conninfo: the database (the pool's conninfo).
        check_interval: how often the listening connection checks the event counter,
            and how long it waits between two connection attempts.
    """

    def __init__(
        self, conninfo: str, *, check_interval: timedelta = DEFAULT_CHECK_INTERVAL
    ) -> None:
        self._conninfo = conninfo
        self._interval = check_interval
        self._hub = LocalWaker(on_count=self._listeners_changed)
        self._task: asyncio.Task[None] | None = None
        self._keep = False
        self._notified_seq = 0
        #: Completed (re)connections, each with LISTEN in force (for tests and logs).
        self.connections = 0
        self._listening = asyncio.Event()

    # -- the port --------------------------------------------------------------------------

    def listen(self, feed: Feed) -> AbstractContextManager[WakeListener]:
        """See `turnkeeper.application.wakeup.EventWaker.listen`."""
        return self._hub.listen(feed)

    @property
    def generation(self) -> int:
        """See `turnkeeper.application.wakeup.EventWaker.generation`."""
        return self._hub.generation

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self._hub.closed

    def close(self) -> None:
        """Wake every reader for good and stop listening."""
        self._hub.close()
        if self._task is not None and not self._task.done():
            with contextlib.suppress(RuntimeError):
                # The task's loop may be closed already (a finished test's).
                self._task.get_loop().call_soon_threadsafe(self._task.cancel)

    # -- the process's lifetime ------------------------------------------------------------

    async def start(self) -> None:
        """Listen from now on for the life of the process, and wait until LISTEN holds.

        A database that cannot be reached does not fail the start: the connection is
        retried once per interval, and readers poll meanwhile.
        """
        self._keep = True
        self._ensure_task()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._interval.total_seconds()):
                await self._listening.wait()

    async def aclose(self) -> None:
        """Close (see `close`) and wait until the connection is closed."""
        self.close()
        task = self._task
        if task is not None and task.get_loop() is asyncio.get_running_loop():
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @property
    def listeners(self) -> int:
        """Readers listening in this process now."""
        return self._hub.listeners

    @property
    def listening(self) -> bool:
        """True while the dedicated connection LISTENs."""
        return self._listening.is_set()

    # -- inside --------------------------------------------------------------------------

    def _listeners_changed(self, count: int) -> None:
        if count > 0:
            self._ensure_task()

    def _ensure_task(self) -> None:
        if self._hub.closed:
            return
        task = self._task
        if task is not None and not task.done() and not task.get_loop().is_closed():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            # Listening outside an event loop: nothing can wait either.
            return
        self._listening = asyncio.Event()
        self._task = loop.create_task(self._run(), name="turnkeeper-event-listener")

    async def _run(self) -> None:
        while not self._hub.closed:
            try:
                await self._listen_once()
                return
            except (psycopg.Error, OSError, TimeoutError) as exc:
                self._listening.clear()
                _log.warning("event_listener_lost", error_type=type(exc).__name__)
            # Readers fall back to polling until the connection is back.
            self._hub.signal_all()
            await asyncio.sleep(self._interval.total_seconds())
            if not self._keep and self._hub.listeners == 0:
                return

    async def _listen_once(self) -> None:
        """Hold one connection until it fails, the waker closes, or nobody listens."""
        seconds = self._interval.total_seconds()
        async with asyncio.timeout(seconds):
            conn = await psycopg.AsyncConnection.connect(
                self._conninfo,
                autocommit=True,
                application_name=LISTENER_APPLICATION_NAME,
            )
        async with conn:
            await q.listen_for_events(conn)
            self.connections += 1
            self._listening.set()
            # What committed before LISTEN held was never notified to this process.
            await self._check(conn, force=True)
            while not self._hub.closed:
                async for notify in conn.notifies(timeout=seconds):
                    self._deliver(notify.payload)
                await self._check(conn)
                if not self._keep and self._hub.listeners == 0:
                    self._listening.clear()
                    return

    async def _check(self, conn: psycopg.AsyncConnection[Any], *, force: bool = False) -> None:
        async with asyncio.timeout(self._interval.total_seconds()):
            counter = await q.read_event_counter(conn) or 0
        if force or counter > self._notified_seq:
            self._notified_seq = max(self._notified_seq, counter)
            self._hub.signal_all()

    def _deliver(self, payload: str) -> None:
        notification = parse_payload(payload)
        self._notified_seq = max(self._notified_seq, notification.top_seq)
        if notification.feeds is None:
            self._hub.signal_all()
        else:
            self._hub.signal(notification.feeds)
