"""``python -m bench --event-log``: what the event log's ordering rule costs (issue 22, ADR 0020).

Three measurements on a migrated, empty database:

1. **Appends.** The minimal append (one event, one statement in autocommit, one
   connection per worker) at concurrency 1, 8 and 32, in interleaved rounds, with:
   ``none``, no ordering rule (seq from a plain sequence); ``log``, the log's rule (seq
   from the writer's xid, ``turnkeeper_event_seq_base``); ``counter``, the rule of ADR
   0005 (one counter row locked until the commit); ``log+notify``, the log's rule plus one
   NOTIFY per commit (migration 0004's wake-up, which takes PostgreSQL's cluster-wide
   notification lock through the commit). The figure is the median round's appends/s;
   the ratio ``log / none`` is the issue's target (0.8 or more at 32).
2. **Reader lag.** While 32 writers append as fast as they can, a reader polls the log
   as the service reads it (``seq > cursor`` below the horizon) without pause, and a
   second one waits on the process's `PostgresEventWaker` between reads, as long-polls
   and streams do: the lag of an event is the time from its writer's commit returning
   to a reader holding it (p50, p99, max).
3. **Watch cost.** CPU of the server and of this process while the watching connection
   looks for readable events with one reader waiting and nothing written.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

import attrs
import psycopg
from psycopg.types.json import Jsonb

from bench.cpu import CpuProbe, postmaster_pid
from turnkeeper.adapters.postgres.wakeup import PostgresEventWaker
from turnkeeper.application.settings import Settings
from turnkeeper.application.wakeup import SHARED_FEED

#: Concurrency levels of the append measurement.
CONCURRENCY = (1, 8, 32)
#: Appends per worker and round, rounds per variant and concurrency.
APPENDS_PER_WORKER = 400
ROUNDS = 3
QUICK_APPENDS_PER_WORKER = 20
QUICK_ROUNDS = 1
#: Writers and duration of the lag measurement.
LAG_WRITERS = 32
LAG_SECONDS = 5.0
QUICK_LAG_SECONDS = 0.5
#: After the writers: steps of at most a millisecond until both readers hold everything.
LAG_DRAIN_STEPS = 10_000
LAG_DRAIN_STEP_SECONDS = 0.001
#: Seconds of the watch cost measurement.
WATCH_SECONDS = 5.0
QUICK_WATCH_SECONDS = 0.5
#: Events one reader page holds (the service's ``page.max_limit``).
READ_PAGE = Settings().page_max_limit
#: Offset of the counter variant's seqs: far below zero, where no reader looks.
COUNTER_SEQ_OFFSET = -(10**15)

_PLAIN_SEQUENCE = "bench_event_log_plain_seq"
_COUNTER_TABLE = "bench_event_log_counter"
_SET_UP = (
    f"CREATE SEQUENCE IF NOT EXISTS {_PLAIN_SEQUENCE} INCREMENT BY -1 MAXVALUE -1 START WITH -1",
    f"CREATE TABLE IF NOT EXISTS {_COUNTER_TABLE} (singleton boolean PRIMARY KEY, last bigint)",
    f"INSERT INTO {_COUNTER_TABLE} VALUES (true, 0) ON CONFLICT DO NOTHING",
)
_COLUMNS = (
    "seq, type, actor_id, actor_kind, space_id, channel_id, thread_id, resource_kind,"
    " resource_id, resource_version, payload, created_at"
)
_VALUES = (
    "'message.created', %(actor)s, 'person', %(space)s, %(channel)s, %(thread)s,"
    " 'message', %(resource)s, 1, %(payload)s, %(now)s"
)
#: The appends of the four variants; each answers the event's seq.
APPENDS = {
    "none": f"INSERT INTO events ({_COLUMNS}) SELECT nextval('{_PLAIN_SEQUENCE}'), {_VALUES}"
    " RETURNING seq",
    "log": f"INSERT INTO events ({_COLUMNS}) SELECT turnkeeper_event_seq_base() + 1, {_VALUES}"
    " RETURNING seq",
    "counter": f"WITH c AS (UPDATE {_COUNTER_TABLE} SET last = last + 1 WHERE singleton"
    f" RETURNING last) INSERT INTO events ({_COLUMNS})"
    f" SELECT {COUNTER_SEQ_OFFSET} - c.last, {_VALUES} FROM c RETURNING seq",
    "log+notify": f"WITH e AS (INSERT INTO events ({_COLUMNS})"
    f" SELECT turnkeeper_event_seq_base() + 1, {_VALUES} RETURNING seq)"
    " SELECT seq, pg_notify('bench_event_log', seq::text) FROM e",
}
_READ = (
    "SELECT seq FROM events WHERE seq > %s AND seq < turnkeeper_event_horizon()"
    " ORDER BY seq LIMIT %s"
)


def _params() -> dict[str, Any]:
    return {
        "actor": uuid.uuid4(),
        "space": uuid.uuid4(),
        "channel": uuid.uuid4(),
        "thread": uuid.uuid4(),
        "resource": uuid.uuid4(),
        "payload": Jsonb({"message": {"content": "bench"}}),
        "now": datetime.now(UTC),
    }


async def _connections(conninfo: str, count: int) -> list[psycopg.AsyncConnection[Any]]:
    return [
        await psycopg.AsyncConnection.connect(conninfo, autocommit=True, prepare_threshold=0)
        for _ in range(count)
    ]


async def _append(conn: psycopg.AsyncConnection[Any], variant: str) -> int:
    cur = await conn.execute(APPENDS[variant], _params())
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def _round(conns: list[psycopg.AsyncConnection[Any]], variant: str, each: int) -> float:
    async def worker(conn: psycopg.AsyncConnection[Any]) -> None:
        for _ in range(each):
            await _append(conn, variant)

    for conn in conns:  # warm: prepared statement and plan on every connection
        await _append(conn, variant)
    started = time.perf_counter()
    await asyncio.gather(*(worker(conn) for conn in conns))
    return len(conns) * each / (time.perf_counter() - started)


@attrs.frozen
class AppendRow:
    """Appends/s of every variant at one concurrency (median round)."""

    concurrency: int
    rates: dict[str, float]

    @property
    def ratio(self) -> float:
        """``log / none``: the share of the unordered append the log keeps."""
        return self.rates["log"] / self.rates["none"]


async def measure_appends(conninfo: str, *, each: int, rounds: int) -> list[AppendRow]:
    """Every variant at every concurrency, in interleaved rounds.

    Args:
        conninfo: a migrated database.
        each: appends per worker and round.
        rounds: rounds per variant and concurrency.

    Returns:
        One row per concurrency.
    """
    rows: list[AppendRow] = []
    for concurrency in CONCURRENCY:
        conns = await _connections(conninfo, concurrency)
        try:
            samples: dict[str, list[float]] = {v: [] for v in APPENDS}
            for _ in range(rounds):
                for variant in APPENDS:
                    samples[variant].append(await _round(conns, variant, each))
        finally:
            for conn in conns:
                await conn.close()
        rows.append(
            AppendRow(
                concurrency=concurrency,
                rates={v: statistics.median(s) for v, s in samples.items()},
            )
        )
    return rows


@attrs.frozen
class Lag:
    """Seconds from an event's commit to a reader holding it."""

    samples: int
    p50: float
    p99: float
    worst: float

    @classmethod
    def of(cls, lags: list[float]) -> Lag:
        """Summarize lags (at least one)."""
        ordered = sorted(lags)
        return cls(
            samples=len(ordered),
            p50=ordered[len(ordered) // 2],
            p99=ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
            worst=ordered[-1],
        )


async def _reader(
    conn: psycopg.AsyncConnection[Any],
    start: int,
    seen: dict[int, float],
    running: Callable[[], bool],
    pause: Callable[[], Awaitable[bool]] | None,
) -> None:
    cursor = start
    while running():
        cur = await conn.execute(_READ, (cursor, READ_PAGE))
        rows = await cur.fetchall()
        now = time.perf_counter()
        for (seq,) in rows:
            seen.setdefault(int(seq), now)
        if rows:
            cursor = int(rows[-1][0])
        elif pause is not None:
            await pause()
        else:
            await asyncio.sleep(0)


async def measure_lag(conninfo: str, *, seconds: float) -> tuple[Lag, Lag, float]:
    """Reader lag under load: a reader polling without pause and one woken by the watch.

    Args:
        conninfo: a migrated database.
        seconds: how long the writers write.

    Returns:
        The polling reader's lag, the woken reader's lag, and the appends/s meanwhile.
    """
    writers = await _connections(conninfo, LAG_WRITERS)
    readers = await _connections(conninfo, 2)
    committed: dict[int, float] = {}
    polled: dict[int, float] = {}
    woken: dict[int, float] = {}
    waker = PostgresEventWaker(conninfo)
    await waker.start()
    deadline = time.perf_counter() + seconds
    stop = False

    def running() -> bool:
        return not stop

    async def write(conn: psycopg.AsyncConnection[Any]) -> None:
        # At least one append each, so that a host that stalls past the deadline (a
        # short smoke run beside other work) still measures a lag.
        while True:
            seq = await _append(conn, "log")
            committed[seq] = time.perf_counter()
            if time.perf_counter() >= deadline:
                return

    with waker.listen(SHARED_FEED) as listener:

        async def wait() -> bool:
            return await listener.wait(timedelta(seconds=1))

        # Start at the end of the log: only this run's events count, and the readers do
        # not first page through the append measurement's events.
        cur = await readers[0].execute("SELECT coalesce(max(seq), 0) FROM events")
        row = await cur.fetchone()
        start = int(row[0]) if row else 0
        tasks = [
            asyncio.create_task(_reader(readers[0], start, polled, running, None)),
            asyncio.create_task(_reader(readers[1], start, woken, running, wait)),
        ]
        await asyncio.gather(*(write(c) for c in writers))
        # Every event committed: wait until both readers hold all of them.
        for _ in range(LAG_DRAIN_STEPS):
            if all(s in polled and s in woken for s in committed):
                break
            await asyncio.sleep(LAG_DRAIN_STEP_SECONDS)
        stop = True
        await asyncio.gather(*tasks)
    await waker.aclose()
    for conn in [*writers, *readers]:
        await conn.close()
    mine = [s for s in committed if s > start]

    def lags(seen: dict[int, float]) -> Lag:
        return Lag.of([max(0.0, seen[s] - committed[s]) for s in mine if s in seen])

    return lags(polled), lags(woken), len(mine) / seconds


async def measure_watch(conninfo: str, *, seconds: float) -> tuple[float, float, int]:
    """CPU of the watch while one reader waits and nothing is written.

    Args:
        conninfo: a migrated database.
        seconds: how long to measure.

    Returns:
        Server CPU in % of a core, this process's CPU in % of a core, looks made.
    """
    waker = PostgresEventWaker(conninfo)
    await waker.start()
    probe = CpuProbe(await postmaster_pid(conninfo))
    with waker.listen(SHARED_FEED) as listener:
        # The first wait returns at once (the watch wakes everyone when it connects).
        await listener.wait(timedelta(seconds=seconds))
        looks = waker.looks
        start = probe.read()
        await listener.wait(timedelta(seconds=seconds))
        cpu = probe.since(start)
        looks = waker.looks - looks
    await waker.aclose()
    return 100 * (cpu.postgres or 0.0) / seconds, 100 * (cpu.python or 0.0) / seconds, looks


def report(rows: list[AppendRow], lags: tuple[Lag, Lag, float], out: TextIO) -> None:
    """Print the tables.

    Args:
        rows: the append measurement.
        lags: the lag measurement.
        out: where to print.
    """
    print("\nevent log appends/s (median round; one event per autocommit statement)", file=out)
    header = "| workers | " + " | ".join(APPENDS) + " | log / none |"
    print(header, file=out)
    print("|---" * (len(APPENDS) + 2) + "|", file=out)
    for row in rows:
        rates = " | ".join(f"{row.rates[v]:,.0f}" for v in APPENDS)
        print(f"| {row.concurrency} | {rates} | {row.ratio:.2f} |", file=out)
    polled, woken, rate = lags
    print(
        f"\nreader lag with {LAG_WRITERS} writers ({rate:,.0f} appends/s), ms:"
        "\n| reader | samples | p50 | p99 | max |\n|---|---|---|---|---|",
        file=out,
    )
    for name, lag in (("polling", polled), ("woken by the watch", woken)):
        print(
            f"| {name} | {lag.samples} | {lag.p50 * 1000:.1f} | {lag.p99 * 1000:.1f}"
            f" | {lag.worst * 1000:.1f} |",
            file=out,
        )


async def run_event_log(conninfo: str, out: TextIO, *, quick: bool = False) -> None:
    """All three measurements, printed.

    Args:
        conninfo: a migrated, empty database.
        out: where to print.
        quick: a smoke run (few appends, short phases).
    """
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        for statement in _SET_UP:
            await conn.execute(statement)
    rows = await measure_appends(
        conninfo,
        each=QUICK_APPENDS_PER_WORKER if quick else APPENDS_PER_WORKER,
        rounds=QUICK_ROUNDS if quick else ROUNDS,
    )
    lags = await measure_lag(conninfo, seconds=QUICK_LAG_SECONDS if quick else LAG_SECONDS)
    report(rows, lags, out)
    server, client, looks = await measure_watch(
        conninfo, seconds=QUICK_WATCH_SECONDS if quick else WATCH_SECONDS
    )
    print(
        f"\nwatch with one waiting reader, nothing written: {looks} looks,"
        f" server {server:.2f} % and this process {client:.2f} % of a core",
        file=out,
        flush=True,
    )
