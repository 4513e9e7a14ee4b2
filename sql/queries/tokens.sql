-- name: InsertApiToken :exec
INSERT INTO api_tokens (id, token_hash, principal_id, label, origin, created_at)
VALUES (
    sqlc.arg(id), sqlc.arg(token_hash), sqlc.arg(principal_id), sqlc.narg(label),
    sqlc.arg(origin), sqlc.arg(created_at)
);

-- The live token of a hash with its principal, in one statement (every request runs it).
-- name: ResolveApiToken :one
SELECT t.id AS token_id, t.label, t.origin, t.created_at AS token_created_at,
       t.last_used_at, p.*
FROM api_tokens t
JOIN principals p ON p.id = t.principal_id
WHERE t.token_hash = sqlc.arg(token_hash) AND t.revoked_at IS NULL;

-- A token of a hash, live or revoked (the owner token of the environment is checked
-- against both).
-- name: GetApiTokenByHash :one
SELECT id, principal_id, label, origin, created_at, last_used_at, revoked_at
FROM api_tokens
WHERE token_hash = sqlc.arg(token_hash);

-- name: GetApiToken :one
SELECT id, principal_id, label, origin, created_at, last_used_at, revoked_at
FROM api_tokens
WHERE id = sqlc.arg(id);

-- name: ListLiveApiTokens :many
SELECT id, principal_id, label, origin, created_at, last_used_at, revoked_at
FROM api_tokens
WHERE principal_id = sqlc.arg(principal_id) AND revoked_at IS NULL
ORDER BY id;

-- Only when the last recorded use is older than the interval: concurrent requests of one
-- token write it once, and a token in steady use is written once per interval.
-- name: TouchApiToken :execrows
UPDATE api_tokens
SET last_used_at = sqlc.arg(at)
WHERE id = sqlc.arg(id)
  AND revoked_at IS NULL
  AND (last_used_at IS NULL OR last_used_at <= sqlc.arg(stale_before));

-- name: RevokeApiTokens :execrows
UPDATE api_tokens
SET revoked_at = sqlc.arg(at)
WHERE id = ANY(sqlc.arg(ids)::uuid[]) AND revoked_at IS NULL;

-- name: SetApiTokenOrigin :execrows
UPDATE api_tokens
SET origin = sqlc.arg(origin), label = sqlc.narg(label)
WHERE id = sqlc.arg(id);
