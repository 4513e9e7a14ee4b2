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
--
-- With `unless_client_msg_id` set, nothing is taken (no row is returned) when the
-- principal already stored a message under that client id: a post queues this take
-- right behind its facts read in one round trip, before it knows whether the request is
-- a replay, and a replay costs no token (ADR 0024).
-- name: TakeBucketToken :one
INSERT INTO rate_buckets AS b (principal_id, limit_class, tokens, updated_at)
SELECT sqlc.arg(principal_id)::uuid,
       sqlc.arg(limit_class)::text,
       sqlc.arg(burst)::float8 - 1.0::float8,
       sqlc.arg(now)::timestamptz
WHERE NOT EXISTS (
    SELECT 1 FROM messages m
    WHERE m.author_id = sqlc.arg(principal_id)::uuid
      AND m.client_msg_id = sqlc.narg(unless_client_msg_id)::text
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
