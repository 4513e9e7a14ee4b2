"""A write unit's statements on libpq's pipeline mode, without psycopg's cursors.

psycopg's cursors and its pipeline object cost about 0.17 ms of Python per message on
the benchmark machine (ADR 0030, docs/performance.md): cursor objects, the query's
conversion at every execute, the pipeline's command and result queues, a generator and
a wait per statement. `PipelineLink` runs the same
generated statement functions (`turnkeeper.adapters.postgres.queries`) through libpq's
pipeline mode with psycopg's wrapper of libpq (`psycopg.pq`) directly: each generated
statement is converted once per process and prepared once per connection (in the
pipeline, at its first use; any other statement runs unnamed), its parameters dumped and
its rows loaded by psycopg's `Transformer`, and psycopg's own error classes raised from
the results.

The link sends each statement as it is queued and waits only when a result is read (or
at `sync`): the unit's round trips stay those of ADR 0022. A batch
that fails raises the first error of it, as psycopg's pipeline does. A wait that does
not end normally (cancelled, timed out, the connection lost) leaves the protocol state
unknown: the link closes the connection, and the pool replaces it.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq
from psycopg.adapt import PyFormat, Transformer

from turnkeeper.adapters.postgres.base import Conn
from turnkeeper.adapters.postgres.observers import OBSERVERS, StatementDone
from turnkeeper.adapters.postgres.sockets import socket_ready
from turnkeeper.adapters.postgres.statements import Params, converted

#: Statement names by query and parameter types (a NULL parameter has no type).
_NAMES: dict[tuple[str, tuple[int, ...]], bytes] = {}
#: The names prepared on each connection.
_PREPARED: weakref.WeakKeyDictionary[Conn, set[bytes]] = weakref.WeakKeyDictionary()


class PipelineCursor:
    """The cursor the generated statement functions use, over a `PipelineLink`.

    Only what those functions call: ``execute``, ``fetchone``, ``fetchall``,
    ``rowcount`` and closing (a no-op). Row factories get this cursor, which has a
    ``pgresult`` but no ``description``: `psycopg.rows.args_row`, `scalar_row` and
    tuples (the generated functions' own) work, ``dict_row`` and ``namedtuple_row`` do not.
    """

    def __init__(self, link: PipelineLink, row_factory: Callable[[Any], Any] | None) -> None:
        self._link = link
        self._row_factory = row_factory
        self._waiting = False
        self._error: psycopg.Error | None = None
        self.pgresult: pq.abc.PGresult | None = None
        self.rowcount = -1
        self._done: list[StatementDone] | None = None

    @property
    def connection(self) -> PipelineLink:
        """The link the cursor runs on."""
        return self._link

    async def __aenter__(self) -> PipelineCursor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Nothing to release: the result stays with the cursor until it is dropped."""

    async def execute(
        self, query: str, params: Params = None, *, prepare: bool | None = None
    ) -> PipelineCursor:
        """Queue `query` (prepared unless `prepare` is False); nothing is awaited here.

        Args:
            query: a generated statement (``%(pN)s`` placeholders), or a plain one.
            params: its parameters by name.
            prepare: False for a statement sent as it is, unnamed and without
                parameters (BEGIN, COMMIT); it leaves with the next statement or wait.

        Returns:
            This cursor.
        """
        self._link.send(self, query, params, prepare=prepare is not False)
        return self

    async def settle(self) -> None:
        """Wait until this statement's result is in.

        Raises:
            psycopg.Error: the statement's error, or the first error of its batch.
        """
        if self._waiting:
            await self._link.sync()
        if self._error is not None:
            raise self._error

    async def fetchone(self) -> Any:
        """The first row of the result, or None."""
        rows = await self._rows(first_only=True)
        return rows[0] if rows else None

    async def fetchall(self) -> list[Any]:
        """Every row of the result."""
        return await self._rows(first_only=False)

    async def _rows(self, *, first_only: bool) -> list[Any]:
        await self.settle()
        result = self.pgresult
        if result is None or result.status != pq.ExecStatus.TUPLES_OK:
            raise psycopg.ProgrammingError("the last statement returned no rows")
        count = min(result.ntuples, 1) if first_only else result.ntuples
        transformer = self._link.transformer
        transformer.set_pgresult(result)
        make_row = (self._row_factory or _tuple_row)(self)
        return [transformer.load_row(i, make_row) for i in range(count)]

    def _arrived(self, result: pq.abc.PGresult) -> None:
        self._waiting = False
        self.pgresult = result
        self.rowcount = result.command_tuples if result.command_tuples is not None else -1
        if self._done is not None:
            self._ended(None)

    def _failed(self, error: psycopg.Error) -> None:
        self._waiting = False
        self._error = error
        if self._done is not None:
            self._ended(error)

    def _ended(self, error: BaseException | None) -> None:
        done, self._done = self._done or [], None
        for call in done:
            call(error)


class _Prepare:
    """The queue's place of a statement's Parse."""

    __slots__ = ("name",)

    def __init__(self, name: bytes) -> None:
        self.name = name


def _tuple_row(cursor: PipelineCursor) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    return tuple


class PipelineLink:
    """One pooled connection in libpq's pipeline mode, for the time of one write unit.

    Args:
        conn: an idle connection (autocommit: the unit sends its own BEGIN and COMMIT).
        settle_on_cancel: when a wait for results is cancelled, collect the results
            still due before the cancellation goes on, and keep the connection; only
            for a connection whose use has a deadline that severs it (`connection_within`),
            which then bounds that collection. Otherwise a cancelled wait closes the
            connection.
    """

    def __init__(self, conn: Conn, *, settle_on_cancel: bool = False) -> None:
        self._conn = conn
        self._settle_on_cancel = settle_on_cancel
        self._pg = conn.pgconn
        self.transformer = Transformer(conn)
        self._queue: deque[PipelineCursor | _Prepare | None] = deque()
        self._prepared = _PREPARED.setdefault(conn, set())
        self._preparing: set[bytes] = set()
        self._entered = False
        self._flush_due = False
        self.broken = False

    @property
    def info(self) -> psycopg.ConnectionInfo:
        """The connection's information (its time zone, its transaction status)."""
        return self._conn.info

    def enter(self) -> None:
        """Put the connection in pipeline mode."""
        self._pg.nonblocking = 1
        self._pg.enter_pipeline_mode()
        self._entered = True

    def cursor(self, row_factory: Callable[[Any], Any] | None = None) -> PipelineCursor:
        """A cursor for one statement (`PipelineCursor`)."""
        return PipelineCursor(self, row_factory)

    async def execute(
        self, query: str, params: Params = None, *, prepare: bool | None = None
    ) -> PipelineCursor:
        """Queue one statement on a new cursor (see `PipelineCursor.execute`)."""
        return await self.cursor().execute(query, params, prepare=prepare)

    def send(
        self,
        cursor: PipelineCursor,
        text: str,
        params: Params,
        *,
        prepare: bool,
    ) -> None:
        """Queue a statement whose result goes to `cursor` (see `PipelineCursor.execute`)."""
        pg = self._pg
        if not prepare:
            # BEGIN, COMMIT, ROLLBACK: not sent on their own. BEGIN leaves with the
            # unit's first statement, COMMIT and ROLLBACK with the Sync that follows them.
            pg.send_query_params(text.encode(), None)
            self._sent(cursor, text, flush=False)
            return
        query, kept = converted(text)
        values = query.values(params)
        tx = self.transformer
        dumped = tx.dump_sequence(values, [PyFormat.AUTO] * len(values))
        types = tuple(tx.types or ())
        if not kept:
            # Unnamed: parsed and planned for this execution only.
            pg.send_query_params(query.native, dumped, param_types=types, param_formats=tx.formats)
            self._sent(cursor, text, flush=True)
            return
        key = (text, types)
        name = _NAMES.get(key)
        if name is None:
            name = _NAMES[key] = f"_tk_{len(_NAMES)}".encode()
        if name not in self._prepared and name not in self._preparing:
            # Prepared in the pipeline; known as prepared once the server said so
            # (a Parse in an aborted batch never ran).
            pg.send_prepare(name, query.native, param_types=types)
            self._queue.append(_Prepare(name))
            self._preparing.add(name)
        pg.send_query_prepared(name, dumped, param_formats=tx.formats)
        self._sent(cursor, text, flush=True)

    def _sent(self, cursor: PipelineCursor, text: str, *, flush: bool) -> None:
        cursor._waiting = True
        self._queue.append(cursor)
        if OBSERVERS:
            told = (observer(self._conn, text) for observer in OBSERVERS)
            cursor._done = [done for done in told if done is not None]
        if flush and not self._flush_due:
            # Sent when the unit first yields to the loop, before anything it awaits: the
            # statement runs (and takes its locks and its transaction id) while the unit
            # goes on, and the statements queued in one stretch of the unit's code leave
            # in one send (a send per statement cost the server a system call and
            # PostgreSQL a wake-up each). A wait that comes first sends them with its Sync.
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_due = False
        if self.broken or self._conn.closed:
            return
        with contextlib.suppress(psycopg.Error):
            # What the socket does not take now leaves with the Sync; a connection
            # lost here is found, and reported, by the unit's next wait.
            self._pg.flush()

    async def sync(self) -> None:
        """Send a Sync and wait for every queued result.

        Raises:
            psycopg.Error: the first error of the batch (after every result is in).
            psycopg.OperationalError: the connection was lost (the link is broken).
        """
        try:
            first = await self._sync()
        except asyncio.CancelledError:
            # The unit's caller went away (a reader whose client left, a stopping
            # server) while the server answers: collect the answers, as a new
            # connection would cost the pool far more, unless nothing bounds that wait.
            if not (self._settle_on_cancel and await self._settled()):
                await self._break()
            raise
        except BaseException:
            # Timed out or disconnected mid-batch: the protocol state is unknown.
            await self._break()
            raise
        if first is not None:
            raise first

    async def _settled(self) -> bool:
        """Collect the results of a batch whose wait was cancelled; False if that failed.

        The collection runs in a task of its own and is waited for through further
        cancellations: a cancel scope of anyio (Litestar's streamed answers run in one)
        cancels its tasks again at every wait until they end, and the connection must
        not go back to the pool with answers still due. The deadline of the unit's
        connection (`connection_within`) bounds the wait: it severs the connection.
        """
        collecting = asyncio.ensure_future(self._collect())
        while not collecting.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait((collecting,))
        return not collecting.cancelled() and collecting.exception() is None

    async def leave(self) -> None:
        """Wait for what is queued and leave pipeline mode (a broken link is closed)."""
        if not self._entered:
            return
        try:
            if self._queue:
                await self.sync()
        finally:
            if not self.broken:
                self._pg.exit_pipeline_mode()
            self._entered = False

    async def rollback(self) -> None:
        """Roll back outside a unit's pipeline, through libpq (see `abandon` for why).

        A connection that cannot even roll back is broken: the failure is not raised
        (the pool discards the connection when it comes back).
        """
        if self.broken or self._conn.closed:
            return
        try:
            self.enter()
        except psycopg.Error:
            return
        await self.abandon()

    async def abandon(self) -> None:
        """Leave after a failure: roll back in the pipeline, drain it, and leave.

        The ROLLBACK goes through libpq, not psycopg: psycopg answers a ROLLBACK it runs
        with DEALLOCATE ALL (its prepared-statement cache), which would drop the link's
        statements of the connection too.
        """
        if not self._entered:
            return
        try:
            self.send(PipelineCursor(self, None), "ROLLBACK", None, prepare=False)
            await self.leave()
        except psycopg.Error:
            return

    async def _sync(self) -> psycopg.Error | None:
        self._pg.pipeline_sync()
        self._queue.append(None)  # the Sync's own result
        return await self._collect()

    async def _collect(self) -> psycopg.Error | None:
        """Send what is buffered and take results until the queue is empty.

        It may be called again after a cancellation: it waits only at its two
        ``socket_ready`` calls, where nothing is half taken.
        """
        pg = self._pg
        loop = asyncio.get_running_loop()
        while pg.flush():
            await socket_ready(loop.add_writer, loop.remove_writer, pg.socket)
        first: psycopg.Error | None = None
        encoding = self._conn.info.encoding
        while self._queue:
            pg.consume_input()
            while self._queue and not pg.is_busy():
                result = pg.get_result()
                if result is None:
                    continue  # the end of one statement's results
                slot = self._queue.popleft()
                status = result.status
                if status == pq.ExecStatus.PIPELINE_SYNC:
                    continue
                if status == pq.ExecStatus.FATAL_ERROR:
                    error = pg_errors.error_from_result(result, encoding)
                    if isinstance(error, pg_errors.InvalidSqlStatementName):
                        # Someone ran DEALLOCATE ALL on this connection: every name is
                        # gone. The unit fails as a retriable conflict; its rerun (and
                        # any later unit) prepares again.
                        self._prepared.clear()
                    first = first or error
                elif status == pq.ExecStatus.PIPELINE_ABORTED:
                    error = first or pg_errors.PipelineAborted("pipeline aborted")
                elif isinstance(slot, _Prepare):
                    self._preparing.discard(slot.name)
                    self._prepared.add(slot.name)
                    continue
                elif slot is not None:
                    slot._arrived(result)
                    continue
                else:
                    continue
                if isinstance(slot, _Prepare):
                    self._preparing.discard(slot.name)
                elif slot is not None:
                    slot._failed(error)
            if self._queue and pg.is_busy():
                await socket_ready(loop.add_reader, loop.remove_reader, pg.socket)
        return first

    async def _break(self) -> None:
        self.broken = True
        self._entered = False
        for slot in self._queue:
            if isinstance(slot, PipelineCursor):
                slot._failed(psycopg.OperationalError("the connection was closed mid-batch"))
        self._queue.clear()
        await self._conn.close()


def forget_prepared(conn: Conn) -> None:
    """Forget what the link prepared on `conn`: psycopg is about to deallocate it all.

    psycopg answers a rollback it runs itself (the pool's reset of a connection given
    back in a transaction) with DEALLOCATE ALL once it prepared statements of its own.

    Args:
        conn: the connection.
    """
    _PREPARED.pop(conn, None)


__all__ = [
    "PipelineCursor",
    "PipelineLink",
    "forget_prepared",
]
