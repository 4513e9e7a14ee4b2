-- The places of event streams (stream.max_per_principal across every server process,
-- ADR 0040): session advisory locks on each process's places connection, never rows, so
-- a process that dies gives its places back with its connection.

-- Takes the first free place among the keys given, in their order, and returns its
-- position (1-based); no row when every one is held. At most one is taken: each step of
-- the recursion tries the next key only while none was taken.
-- name: TakeStreamPlace :one
WITH RECURSIVE attempt (position, taken) AS (
    SELECT 1, pg_try_advisory_lock((sqlc.arg(place_keys)::bigint[])[1])
    UNION ALL
    SELECT position + 1, pg_try_advisory_lock((sqlc.arg(place_keys)::bigint[])[position + 1])
    FROM attempt
    WHERE NOT taken AND position < cardinality(sqlc.arg(place_keys)::bigint[])
)
SELECT position::int4 AS position FROM attempt WHERE taken;

-- Gives places back (each key once: a session lock taken once is released once).
-- name: FreeStreamPlaces :exec
SELECT pg_advisory_unlock(place_key) FROM unnest(sqlc.arg(place_keys)::bigint[]) AS place_key;
