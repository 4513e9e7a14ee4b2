"""The PostgreSQL rate-limit store against the domain rule, example by example.

The store refills and takes a token in one SQL statement (`TakeBucketToken`), repeating
`turnkeeper.domain.ratelimit.take_token`'s float arithmetic. Hypothesis looks for a stored bucket,
an elapsed time, a capacity and a rate where the two disagree, on the decision (taken,
or the Retry-After seconds) and on the stored bucket, to the bit. The memory store
calls the domain function itself; the service scenarios run on both.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg_pool import AsyncConnectionPool

from turnkeeper.adapters.postgres.ratelimit import PostgresRateLimitStore
from turnkeeper.adapters.postgres.uow import Conn
from turnkeeper.domain.ratelimit import Bucket, take_token

AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
#: Examples of the differential test (each one is three statements).
EXAMPLES = 300
#: The widest refill rate and capacity drawn (beyond any sensible configuration).
MAX_RATE = 100_000
MAX_BURST = 1_000
#: The widest gap between the stored bucket and the take, in microseconds (about 12 days
#: either way: a clock that went back means no refill).
MAX_GAP_US = 10**12
#: Concurrent takes of one principal's new bucket in the race test, its capacity, and
#: how often the race is repeated.
TAKERS = 12
RACE_BURST = 5
RACE_ROUNDS = 20

buckets = st.one_of(
    st.none(),
    st.builds(
        Bucket,
        tokens=st.one_of(
            st.floats(min_value=0.0, max_value=float(MAX_BURST), allow_nan=False),
            # Around one token: where the tolerance decides.
            st.sampled_from([0.0, 0.5, 1.0 - 2e-9, 1.0 - 1e-9, 1.0 - 5e-10, 1.0]),
        ),
        updated_at=st.just(AT),
    ),
)


async def _principal(pool: AsyncConnectionPool[Conn]) -> uuid.UUID:
    principal_id = uuid.uuid4()
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO principals (id, kind, handle, display_name, is_owner, enabled,"
            " created_at) VALUES (%s, 'person', %s, 'Sam', false, true, %s)",
            (principal_id, f"sam-{principal_id}", AT),
        )
    return principal_id


async def _read(conn: Conn, principal_id: uuid.UUID, limit: str) -> Bucket | None:
    cur = await conn.execute(
        "SELECT tokens, updated_at FROM rate_buckets WHERE principal_id = %s AND limit_class = %s",
        (principal_id, limit),
    )
    row = await cur.fetchone()
    return None if row is None else Bucket(tokens=row[0], updated_at=row[1])


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    bucket=buckets,
    gap_us=st.one_of(
        st.integers(min_value=-MAX_GAP_US, max_value=MAX_GAP_US),
        st.integers(min_value=-1, max_value=1_000_000),
    ),
    burst=st.integers(min_value=1, max_value=MAX_BURST),
    per_minute=st.one_of(st.integers(min_value=0, max_value=MAX_RATE), st.sampled_from([0, 1, 7])),
)
async def test_the_store_takes_exactly_as_the_domain_rule(
    pg_pool: AsyncConnectionPool[Conn],
    bucket: Bucket | None,
    gap_us: int,
    burst: int,
    per_minute: int,
) -> None:
    principal_id = await _principal(pg_pool)
    limit = "rl.message"
    now = AT + timedelta(microseconds=gap_us)
    expected = take_token(bucket, now, burst=burst, per_minute=per_minute)
    async with pg_pool.connection() as conn:
        if bucket is not None:
            await conn.execute(
                "INSERT INTO rate_buckets (principal_id, limit_class, tokens, updated_at)"
                " VALUES (%s, %s, %s, %s)",
                (principal_id, limit, bucket.tokens, bucket.updated_at),
            )
        store = PostgresRateLimitStore(conn)
        retry = await store.take_token(principal_id, limit, now, burst=burst, per_minute=per_minute)
        stored = await _read(conn, principal_id, limit)
        await conn.rollback()
    assert retry == expected.retry_after
    if retry is None:
        assert stored == expected.bucket


async def test_concurrent_takes_of_a_new_bucket_take_exactly_its_tokens(
    pg_pool: AsyncConnectionPool[Conn],
) -> None:
    # Every taker starts before any commits: the first inserts the bucket, the others
    # meet its key and update it in turn under the row lock, none needs a retry.
    for _ in range(RACE_ROUNDS):
        principal_id = await _principal(pg_pool)
        start = asyncio.Event()

        async def take(pid: uuid.UUID = principal_id, go: asyncio.Event = start) -> int | None:
            async with pg_pool.connection() as conn:
                await go.wait()
                retry = await PostgresRateLimitStore(conn).take_token(
                    pid, "rl.message", AT, burst=RACE_BURST, per_minute=0
                )
                if retry is None:
                    await conn.commit()
                else:
                    await conn.rollback()
                return retry

        tasks = [asyncio.create_task(take()) for _ in range(TAKERS)]
        await asyncio.sleep(0)
        start.set()
        results = await asyncio.gather(*tasks)
        assert sum(r is None for r in results) == RACE_BURST
        async with pg_pool.connection() as conn:
            left = await _read(conn, principal_id, "rl.message")
        assert left == Bucket(tokens=0.0, updated_at=AT)


@pytest.mark.parametrize("burst", [1, 3])
async def test_a_new_bucket_starts_full(pg_pool: AsyncConnectionPool[Conn], burst: int) -> None:
    principal_id = await _principal(pg_pool)
    async with pg_pool.connection() as conn:
        store = PostgresRateLimitStore(conn)
        assert (
            await store.take_token(principal_id, "rl.message", AT, burst=burst, per_minute=60)
            is None
        )
        assert await _read(conn, principal_id, "rl.message") == Bucket(
            tokens=float(burst - 1), updated_at=AT
        )
