-- Locks the bucket for the unit, so concurrent takes of one principal serialize.
-- name: LockBucket :one
SELECT * FROM rate_buckets
WHERE principal_id = sqlc.arg(principal_id) AND limit_class = sqlc.arg(limit_class)
FOR UPDATE;

-- A first bucket: a concurrent first take fails on the primary key and is retried, then
-- finds and locks this row.
-- name: InsertBucket :exec
INSERT INTO rate_buckets (principal_id, limit_class, tokens, updated_at)
VALUES (sqlc.arg(principal_id), sqlc.arg(limit_class), sqlc.arg(tokens), sqlc.arg(updated_at));

-- name: UpdateBucket :execrows
UPDATE rate_buckets
SET tokens = sqlc.arg(tokens), updated_at = sqlc.arg(updated_at)
WHERE principal_id = sqlc.arg(principal_id) AND limit_class = sqlc.arg(limit_class);
