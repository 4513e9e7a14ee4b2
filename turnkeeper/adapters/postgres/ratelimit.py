"""PostgreSQL token buckets of the rate limits, refilled and taken in one statement."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime

from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.postgres.base import Conn, MissingRow, PostgresRepository
from turnkeeper.application.ports import BucketTake
from turnkeeper.domain.ratelimit import SECONDS_PER_MINUTE, TOLERANCE, retry_after


class PostgresRateLimitStore(PostgresRepository):
    """Token buckets; satisfies `RateLimitStore`.

    One statement per take (`TakeBucketToken`, an upsert that refills and takes in SQL
    under the row lock): the arithmetic of `turnkeeper.domain.ratelimit.take_token` is repeated
    there operation by operation in float8, and
    tests/integration/test_rate_limit_store.py proves both agree on every input
    Hypothesis finds. A principal's first take inserts a full bucket; two first takes
    at once meet on ``rate_buckets_pkey`` and the upsert turns the second into an
    update, so no retry is needed.
    """

    async def take_token(
        self,
        principal_id: uuid.UUID,
        limit_class: str,
        now: datetime,
        *,
        burst: int,
        per_minute: int,
    ) -> int | None:
        """Take one token, refilling the bucket for the time that passed.

        Args:
            principal_id: the principal.
            limit_class: the class, for example ``rl.message``.
            now: the time of the take.
            burst: the bucket's capacity.
            per_minute: its refill rate.

        Returns:
            None when a token was taken, else whole seconds until one is there.

        Raises:
            MissingRow: when the upsert returned nothing (it always returns its row).
        """
        left = await q.take_bucket_token(
            self._conn,
            principal_id=principal_id,
            limit_class=limit_class,
            burst=float(burst),
            now=now,
            unless_client_msg_id=None,
            per_minute=float(per_minute),
            seconds_per_minute=SECONDS_PER_MINUTE,
            tolerance=TOLERANCE,
        )
        if left is None:
            raise MissingRow(f"bucket of {principal_id}")
        return _refusal(left, per_minute)


async def start_take(
    conn: Conn, principal_id: uuid.UUID, take: BucketTake, unless_client_msg_id: str
) -> Callable[[], Awaitable[int | None]]:
    """Queue a take in the unit's pipeline, skipped when the client id is stored already.

    Args:
        conn: the unit's connection.
        principal_id: whose bucket.
        take: the class, time and rule of the take.
        unless_client_msg_id: nothing is taken when the principal stored a message under
            this client id (the post is a replay).

    Returns:
        What gives, once the result arrived, None (taken, or skipped) or the whole
        seconds until a token is there.
    """
    pending = await q.start_take_bucket_token(
        conn,
        principal_id=principal_id,
        limit_class=take.limit_class,
        burst=float(take.burst),
        now=take.now,
        unless_client_msg_id=unless_client_msg_id,
        per_minute=float(take.per_minute),
        seconds_per_minute=SECONDS_PER_MINUTE,
        tolerance=TOLERANCE,
    )

    async def outcome() -> int | None:
        left = await pending.result()
        return None if left is None else _refusal(left, take.per_minute)

    return outcome


def _refusal(left: float, per_minute: int) -> int | None:
    if left >= 0.0:
        return None
    # A refusal returns minus the missing part, exactly -(1 - tokens) (IEEE
    # subtraction rounds symmetrically), so the wait is the domain's to the bit.
    return retry_after(-left, per_minute=per_minute)
