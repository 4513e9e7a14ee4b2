"""Wake-ups across server processes: one watching connection per process.

Events become readable when they fall below the visibility horizon (ADR 0020), not when
their transaction commits: an event committed while an older transaction still runs is
not readable yet, and becomes readable when that transaction ends, which may append
nothing and notify nobody. So the wake-up follows the readers' own rule instead of the
commits: each process holds one connection (`PostgresEventWaker`, ``application_name``
`LISTENER_APPLICATION_NAME`) that asks, once per ``watch_interval``
(``stream.watch_interval_ms``) while readers wait, which events became readable since
the last look (``ReadReadableSince``), and wakes the readers of their feeds through a
`turnkeeper.adapters.wakeups.LocalWaker`. A woken reader finds the event; a reader that
finds nothing waits again and is woken at the latest one interval after the horizon
passes. Writers send nothing (a NOTIFY would take PostgreSQL's cluster-wide notification
lock through every commit, the serialization point ADR 0020 removes), and no content or
token leaves the database.

Nothing is lost when the connection is:

- after every (re)connect every reader is woken, so events that became readable while
  nobody watched are read;
- while the connection is down, every reader is woken once per ``check_interval``
  (``stream.heartbeat_seconds``): they fall back to polling.

The connection is opened when the first reader listens and closed one check interval
after the last one left, unless `start` keeps it for the life of the process (servers).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any

import attrs
import psycopg

from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.wakeups import LocalWaker
from turnkeeper.application.logs import get_logger
from turnkeeper.application.settings import Settings
from turnkeeper.application.wakeup import SHARED_FEED, Feed, WakeListener

#: ``application_name`` of the watching connection (visible in pg_stat_activity).
LISTENER_APPLICATION_NAME = "turnkeeper-listen"
#: The feed word of the payload for shared events (see ``ReadReadableSince``).
_SHARED_WORD = "*"
#: The payload word that stands for every feed (too many to name).
_ALL_WORD = "all"
#: The default check interval: the default of ``stream.heartbeat_seconds``.
DEFAULT_CHECK_INTERVAL = Settings().stream_heartbeat
#: The default watch interval: the default of ``stream.watch_interval_ms``.
DEFAULT_WATCH_INTERVAL = timedelta(milliseconds=Settings().stream_watch_interval_ms)
#: Events one look of the watch reads at most; a full batch is followed by another look
#: at once, so a watch that fell behind catches up in steps of bounded cost.
WATCH_BATCH = 1000

_log = get_logger("turnkeeper.wakeup")

#: A conninfo, or a function (sync or async) that returns one.
ConnInfo = str | Callable[[], str] | Callable[[], Awaitable[str]]


async def resolve_conninfo(conninfo: ConnInfo) -> str:
    """The conninfo itself, or what the function returns (as a pool resolves it).

    Args:
        conninfo: a conninfo, or a function (sync or async) returning one.

    Returns:
        The conninfo.
    """
    if not callable(conninfo):
        return conninfo
    found = conninfo()
    return await found if inspect.isawaitable(found) else found


@attrs.frozen(kw_only=True)
class Notification:
    """What one look of the watch found (the text form ``"<top seq> <feed> ..."``).

    Attributes:
        top_seq: the highest seq that became readable.
        feeds: the feeds of its events; None when the payload says ``all`` or cannot be
            read (then every reader is woken).
    """

    top_seq: int
    feeds: frozenset[Feed] | None


def parse_payload(payload: str) -> Notification:
    """Read the text form of a `Notification`.

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
    """Wakes the readers of this process when events of any process become readable.

    Satisfies `turnkeeper.application.wakeup.EventWaker`.

    Args:
        conninfo: the database: a conninfo, or a function (sync or async) returning one,
            as `psycopg_pool.AsyncConnectionPool.conninfo` may be.
        check_interval: how long the connection waits between two connection attempts
            (readers poll once per interval meanwhile), the bound of each of its
            statements, and how long it stays open after the last reader left.
        watch_interval: how often the connection looks for newly readable events while
            readers wait.
    """

    def __init__(
        self,
        conninfo: ConnInfo,
        *,
        check_interval: timedelta = DEFAULT_CHECK_INTERVAL,
        watch_interval: timedelta = DEFAULT_WATCH_INTERVAL,
    ) -> None:
        self._conninfo = conninfo
        self._interval = check_interval
        self._watch = watch_interval
        self._hub = LocalWaker(on_count=self._listeners_changed)
        self._task: asyncio.Task[None] | None = None
        self._keep = False
        self._notified_seq = 0
        #: Looks for newly readable events so far (for tests and measurements).
        self.looks = 0
        #: Completed (re)connections, each watching (for tests and logs).
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
        """Watch from now on for the life of the process, and wait until the watch runs.

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
        """True while the dedicated connection watches."""
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
                await resolve_conninfo(self._conninfo),
                autocommit=True,
                application_name=LISTENER_APPLICATION_NAME,
            )
        async with conn:
            self.connections += 1
            self._listening.set()
            # What became readable while nobody watched was never signalled.
            await self._jump(conn)
            idle_since: float | None = None
            loop = asyncio.get_running_loop()
            while not self._hub.closed:
                if self._hub.listeners == 0:
                    idle_since = loop.time() if idle_since is None else idle_since
                    if not self._keep and loop.time() - idle_since >= seconds:
                        self._listening.clear()
                        return
                    await asyncio.sleep(self._watch.total_seconds())
                    continue
                if idle_since is not None:
                    # Readers came back after a pause: start from the end instead of
                    # looking through everything the pause left behind, and wake them all.
                    idle_since = None
                    await self._jump(conn)
                elif not await self._look(conn):
                    await asyncio.sleep(self._watch.total_seconds())

    async def _jump(self, conn: psycopg.AsyncConnection[Any]) -> None:
        async with asyncio.timeout(self._interval.total_seconds()):
            top = await q.read_readable_top(conn) or 0
        self._notified_seq = max(self._notified_seq, top)
        self._hub.signal_all()

    async def _look(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        """Wake the readers of the events that became readable; True when a batch was full."""
        self.looks += 1
        async with asyncio.timeout(self._interval.total_seconds()):
            row = await q.read_readable_since(
                conn, after_seq=self._notified_seq, max_events=WATCH_BATCH
            )
        if row is None or row.top_seq <= self._notified_seq:
            return False
        self._deliver(f"{row.top_seq} {row.feeds}")
        return row.found >= WATCH_BATCH

    def _deliver(self, payload: str) -> None:
        notification = parse_payload(payload)
        self._notified_seq = max(self._notified_seq, notification.top_seq)
        if notification.feeds is None:
            self._hub.signal_all()
        else:
            self._hub.signal(notification.feeds)
