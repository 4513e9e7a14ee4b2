-- Takes one token of a principal's bucket (the rule and its proof: the function
-- turnkeeper_take_bucket_token of migration 0010). Returns the tokens left: 0 or more when
-- a token was taken; negative when the bucket was short, minus the part of a token it
-- lacks (the unit then rolls back). It always takes (no client id to skip for): a post
-- takes its token in GetPostFacts instead, skipped there for a replay (ADR 0024).
-- name: TakeBucketToken :one
SELECT turnkeeper_take_bucket_token(
    sqlc.arg(principal_id)::uuid,
    sqlc.arg(limit_class)::text,
    sqlc.arg(burst)::float8,
    sqlc.arg(now)::timestamptz,
    sqlc.arg(per_minute)::float8,
    sqlc.arg(seconds_per_minute)::float8,
    sqlc.arg(tolerance)::float8,
    NULL::text
) AS tokens;
