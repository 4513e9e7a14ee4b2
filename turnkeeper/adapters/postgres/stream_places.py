"""Stream places shared by every server process: session advisory locks (ADR 0040).

``stream.max_per_principal`` bounds a principal's event streams on the whole server, not
on each of its worker processes. A principal's places are `place_keys`: one bigint per
place, derived from the principal id and the place's number. A stream takes the first
free one as a session advisory lock (``TakeStreamPlace``) on its process's places
connection (``application_name`` `PLACES_APPLICATION_NAME`), and the lock is released
when the stream ends (``FreeStreamPlaces``). No row is written: a process that dies, or
whose connection is cut, gives its places back with the connection, so nothing stale
can refuse a principal later.

A lock taken twice on one session is held twice, so the process never tries a key it
holds: it keeps the keys of its own places. After the connection is lost, a new one is
opened at the next take; the places of the lost one are gone from the database, so
their releases do nothing (until the streams that held them end, the principal may hold
more streams than the bound: at most those that lived through the loss).

A release comes from a stream's end, which is synchronous: it queues the key, and the
places connection gives the queued keys back before its next take, or at once in a
task when the event loop runs. The connection is opened by the first stream and closed
when the last one has given its place back, so a process without streams holds none.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import uuid
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.postgres.pool import PoolPolicy
from turnkeeper.adapters.postgres.wakeup import ConnInfo, resolve_conninfo
from turnkeeper.application.errors import StoreUnavailable
from turnkeeper.application.logs import get_logger
from turnkeeper.application.stream_places import Release

#: ``application_name`` of the places connection (visible in pg_stat_activity).
PLACES_APPLICATION_NAME = "turnkeeper-stream-places"
#: Keys one statement tries at most: a principal holding more streams than this (a
#: ``stream.max_per_principal`` that large) costs one more round trip per batch.
PLACE_BATCH = 64
#: Sets the keys of stream places apart from every other advisory lock key.
_KEY_PERSON = b"tk-stream-place"

_log = get_logger("turnkeeper.stream_places")


def place_key(principal_id: uuid.UUID, place: int) -> int:
    """The advisory lock key of one of a principal's stream places.

    Args:
        principal_id: the principal.
        place: the place's number, from 0.

    Returns:
        A signed 64-bit key (PostgreSQL's bigint).
    """
    digest = hashlib.blake2b(
        principal_id.bytes + place.to_bytes(8, "big"), digest_size=8, person=_KEY_PERSON
    ).digest()
    return int.from_bytes(digest, "big", signed=True)


def _give_back_unused(taking: asyncio.Future[Release | None]) -> None:
    """Give back the place of a take whose caller left before it ended."""
    if taking.cancelled() or taking.exception() is not None:
        return
    release = taking.result()
    if release is not None:
        release()


class PostgresStreamPlaces:
    """Stream places held as session advisory locks (satisfies `StreamPlaces`).

    Args:
        conninfo: the database: a conninfo, or a function (sync or async) returning one,
            as a pool's may be.
        policy: ``database.request_timeout`` bounds the connection and each take; the
            ``Retry-After`` of the `StoreUnavailable` they raise.
    """

    def __init__(self, conninfo: ConnInfo, policy: PoolPolicy) -> None:
        self._conninfo = conninfo
        self._policy = policy
        self._lock = asyncio.Lock()
        self._conn: psycopg.AsyncConnection[Any] | None = None
        #: Counts the places connections dropped; a place taken on an earlier one is gone.
        self._session = 0
        self._held: set[int] = set()
        self._freed: list[int] = []
        self._flush: asyncio.Task[None] | None = None

    @property
    def held(self) -> int:
        """Places this process holds now (for tests and measurements)."""
        return len(self._held) - len(self._freed)

    async def take(self, principal_id: uuid.UUID, limit: int) -> Release | None:
        """See `turnkeeper.application.stream_places.StreamPlaces.take`."""
        taking = asyncio.ensure_future(self._take_locked(principal_id, limit))
        try:
            return await asyncio.shield(taking)
        except asyncio.CancelledError:
            # The caller left (a client gone while its stream opened). Cut mid-statement,
            # the take would leave a lock the process does not know it holds: it runs
            # to its end instead, and its place goes back.
            taking.add_done_callback(_give_back_unused)
            raise

    async def _take_locked(self, principal_id: uuid.UUID, limit: int) -> Release | None:
        async with self._lock:
            # A connection that was open may have been cut meanwhile (a restart of the
            # database, a proxy's idle timeout): a new one is tried once before a 503.
            for last in (self._conn is None, True):
                try:
                    async with asyncio.timeout(self._policy.request_timeout):
                        key = await self._take(principal_id, limit)
                        session = self._session
                    break
                except (psycopg.Error, OSError, TimeoutError) as exc:
                    await self._lose(exc)
                    if last or isinstance(exc, TimeoutError):
                        raise StoreUnavailable(
                            "the places connection failed", retry_after=self._policy.retry_after
                        ) from exc
            if key is None and not self._held:
                await self._drop()
        if key is None:
            return None
        return self._release(key, session)

    async def given_back(self) -> None:
        """Wait until the places released so far are given back in the database.

        A release is given back by a task; other processes can take the place from then.
        """
        flush = self._flush
        if flush is not None and not flush.done():
            await flush
        elif self._freed:
            await self._give_back_now()

    async def aclose(self) -> None:
        """Close the places connection: every place of this process is given back."""
        async with self._lock:
            flush, self._flush = self._flush, None
            if flush is not None and flush is not asyncio.current_task():
                flush.cancel()
            await self._drop()

    # -- inside ----------------------------------------------------------------------------

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is not None and self._conn.closed:
            await self._drop()
        if self._conn is None:
            conninfo = await resolve_conninfo(self._conninfo)
            self._conn = await psycopg.AsyncConnection.connect(
                make_conninfo(
                    conninfo,
                    application_name=PLACES_APPLICATION_NAME,
                    **self._policy.connection_kwargs(conninfo),
                ),
                autocommit=True,
            )
        return self._conn

    async def _take(self, principal_id: uuid.UUID, limit: int) -> int | None:
        """Take the first free place the principal has, in batches of `PLACE_BATCH`."""
        conn = await self._connection()
        await self._give_back(conn)
        start = 0
        while start < limit:
            stop = min(limit, start + PLACE_BATCH)
            keys = [
                key
                for key in (place_key(principal_id, place) for place in range(start, stop))
                if key not in self._held
            ]
            if keys:
                position = await q.take_stream_place(conn, place_keys=keys)
                if position is not None:
                    key = keys[position - 1]
                    self._held.add(key)
                    return key
            start = stop
        return None

    async def _give_back(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if not self._freed:
            return
        freed = list(self._freed)
        await q.free_stream_places(conn, place_keys=freed)
        del self._freed[: len(freed)]
        self._held.difference_update(freed)

    def _release(self, key: int, session: int) -> Release:
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            if session != self._session:
                return  # its connection is gone, and the lock with it
            self._freed.append(key)
            self._schedule_give_back()

        return release

    def _schedule_give_back(self) -> None:
        if self._flush is not None and not self._flush.done():
            return
        with contextlib.suppress(RuntimeError):
            # Without a running loop (a stream closed at shutdown) the next take, or
            # the connection's close, gives the place back.
            self._flush = asyncio.get_running_loop().create_task(
                self._give_back_now(), name="turnkeeper-stream-places"
            )

    async def _give_back_now(self) -> None:
        async with self._lock:
            conn = self._conn
            if conn is None or conn.closed:
                return
            try:
                async with asyncio.timeout(self._policy.request_timeout):
                    # A stream that ends while this one gives back queues its key
                    # behind the batch, with this task still running: it goes too.
                    while self._freed:
                        await self._give_back(conn)
            except (psycopg.Error, OSError, TimeoutError) as exc:
                await self._lose(exc)
                return
            if not self._held:
                # No stream left: the connection closes, the next stream opens one.
                await self._drop()

    async def _lose(self, exc: BaseException) -> None:
        """Drop a connection that failed: its places are gone with it."""
        _log.warning("stream_places_lost", error_type=type(exc).__name__)
        await self._drop()

    async def _drop(self) -> None:
        """Close the connection; the places held on it are gone with it.

        The session count moves on, so that the releases of those places do nothing.
        """
        conn, self._conn = self._conn, None
        self._session += 1
        self._held.clear()
        self._freed.clear()
        if conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()
