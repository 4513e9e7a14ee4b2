"""PostgreSQL token buckets of the rate limits, refilled and taken in one statement."""

from __future__ import annotations

import uuid
from datetime import datetime

from turnkeeper.adapters.postgres import queries as q
from turnkeeper.adapters.postgres.base import MissingRow, PostgresRepository
from turnkeeper.domain.ratelimit import SECONDS_PER_MINUTE, TOLERANCE, retry_after


class PostgresRateLimitStore(PostgresRepository):
    """Token buckets; satisfies `RateLimitStore`.

    One statement per take (`TakeBucketToken`, which calls the function
    ``turnkeeper_take_bucket_token`` of migration 0010, an upsert that refills and takes
    in SQL under the row lock; a post's facts call it too, ADR 0024). The arithmetic of
    `turnkeeper.domain.ratelimit.take_token` is repeated there operation by operation in
    float8, and tests/integration/test_rate_limit_store.py proves both agree on every
    input Hypothesis finds. A principal's first take inserts a full bucket; two first
    takes at once meet on ``rate_buckets_pkey`` and the upsert turns the second into an
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
            per_minute=float(per_minute),
            seconds_per_minute=SECONDS_PER_MINUTE,
            tolerance=TOLERANCE,
        )
        if left is None:
            raise MissingRow(f"bucket of {principal_id}")
        return refusal(left, per_minute)


def refusal(left: float, per_minute: int) -> int | None:
    """The answer of a take from the tokens it left.

    Args:
        left: the tokens left (negative: minus the part of a token the bucket lacked).
        per_minute: the bucket's refill rate.

    Returns:
        None when a token was taken, else whole seconds until one is there.
    """
    if left >= 0.0:
        return None
    # A refusal returns minus the missing part, exactly -(1 - tokens) (IEEE
    # subtraction rounds symmetrically), so the wait is the domain's to the bit.
    return retry_after(-left, per_minute=per_minute)
