-- The rate-limit take as a function (issue 18, ADR 0024), so that a message post can take
-- its token in the statement that reads its facts, after the thread row lock, without a
-- second copy of the arithmetic: TakeBucketToken and GetPostFacts both call it.
--
-- Takes one token of a principal's bucket, refilling it for the time that passed: the
-- rule of domain.ratelimit.take_token, operation by operation in float8 so that both
-- round alike (proven equal by tests/integration/test_rate_limit_store.py). The upsert
-- takes the row lock, so concurrent takes of one principal serialize, and a principal's
-- first take creates the bucket without a race. A new bucket is full: `burst` tokens, one
-- taken.
--
-- The refill is min(burst, tokens + (max(0, elapsed seconds) * per_minute) / 60),
-- written three times below (ON CONFLICT DO UPDATE has no FROM to name it once).
-- Returns the tokens left: 0 or more when a token was taken; negative when the bucket
-- was short, minus the part of a token it lacks (the unit then rolls back, so the stored
-- value never survives a refusal). With `p_unless_client_msg_id` set, nothing is taken
-- (NULL is returned) when the principal already stored a message under that client id:
-- a replay costs no token.
--
-- PL/pgSQL keeps the plan of the upsert for the session (a SQL function's body would be
-- planned at every call on PostgreSQL 16).

CREATE FUNCTION turnkeeper_take_bucket_token(
    p_principal_id uuid,
    p_limit_class text,
    p_burst float8,
    p_now timestamptz,
    p_per_minute float8,
    p_seconds_per_minute float8,
    p_tolerance float8,
    p_unless_client_msg_id text
) RETURNS float8
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    left_tokens float8;
BEGIN
    INSERT INTO rate_buckets AS b (principal_id, limit_class, tokens, updated_at)
    SELECT p_principal_id, p_limit_class, p_burst - 1.0::float8, p_now
    WHERE NOT EXISTS (
        SELECT 1 FROM messages m
        WHERE m.author_id = p_principal_id AND m.client_msg_id = p_unless_client_msg_id
    )
    ON CONFLICT (principal_id, limit_class) DO UPDATE
    SET tokens = CASE
            WHEN least(
                p_burst,
                b.tokens + (greatest(
                    0.0::float8, extract(epoch FROM EXCLUDED.updated_at - b.updated_at)::float8
                ) * p_per_minute) / p_seconds_per_minute
            ) >= 1.0::float8 - p_tolerance
                THEN greatest(0.0::float8, least(
                    p_burst,
                    b.tokens + (greatest(
                        0.0::float8, extract(epoch FROM EXCLUDED.updated_at - b.updated_at)::float8
                    ) * p_per_minute) / p_seconds_per_minute
                ) - 1.0::float8)
            ELSE least(
                p_burst,
                b.tokens + (greatest(
                    0.0::float8, extract(epoch FROM EXCLUDED.updated_at - b.updated_at)::float8
                ) * p_per_minute) / p_seconds_per_minute
            ) - 1.0::float8
        END,
        updated_at = EXCLUDED.updated_at
    RETURNING b.tokens INTO left_tokens;
    RETURN left_tokens;
END;
$$;

COMMENT ON FUNCTION turnkeeper_take_bucket_token(
    uuid, text, float8, timestamptz, float8, float8, float8, text
) IS 'Take one rate-limit token (NULL: skipped for a stored client id); see migration 0010.';
