-- Takes one token of a principal's bucket in one statement, refilling it for the time
-- that passed: the rule of domain.ratelimit.take_token, operation by operation in
-- float8 so that both round alike (proven equal by
-- tests/integration/test_rate_limit_store.py). The upsert takes the row lock, so
-- concurrent takes of one principal serialize, and a principal's first take creates
-- the bucket without a race. A new bucket is full: `burst` tokens, one taken.
--
-- The refill is min(burst, tokens + (max(0, elapsed seconds) * per_minute) / 60),
-- written three times below (ON CONFLICT DO UPDATE has no FROM to name it once).
-- Returns the tokens left: 0 or more when a token was taken; negative when the bucket
-- was short, minus the part of a token it lacks (the unit then rolls back, so the
-- stored value never survives a refusal).
-- name: TakeBucketToken :one
INSERT INTO rate_buckets AS b (principal_id, limit_class, tokens, updated_at)
VALUES (
    sqlc.arg(principal_id),
    sqlc.arg(limit_class),
    sqlc.arg(burst)::float8 - 1.0::float8,
    sqlc.arg(now)
)
ON CONFLICT (principal_id, limit_class) DO UPDATE
SET tokens = CASE
        WHEN least(
            sqlc.arg(burst)::float8,
            b.tokens + (greatest(
                0.0::float8, extract(epoch FROM EXCLUDED.updated_at - b.updated_at)::float8
            ) * sqlc.arg(per_minute)::float8) / sqlc.arg(seconds_per_minute)::float8
        ) >= 1.0::float8 - sqlc.arg(tolerance)::float8
            THEN greatest(0.0::float8, least(
                sqlc.arg(burst)::float8,
                b.tokens + (greatest(
                    0.0::float8, extract(epoch FROM EXCLUDED.updated_at - b.updated_at)::float8
                ) * sqlc.arg(per_minute)::float8) / sqlc.arg(seconds_per_minute)::float8
            ) - 1.0::float8)
        ELSE least(
            sqlc.arg(burst)::float8,
            b.tokens + (greatest(
                0.0::float8, extract(epoch FROM EXCLUDED.updated_at - b.updated_at)::float8
            ) * sqlc.arg(per_minute)::float8) / sqlc.arg(seconds_per_minute)::float8
        ) - 1.0::float8
    END,
    updated_at = EXCLUDED.updated_at
RETURNING b.tokens;
