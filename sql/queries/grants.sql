-- name: InsertGrant :exec
INSERT INTO grants (id, principal_id, resource_kind, resource_id, level, created_at)
VALUES (
    sqlc.arg(id), sqlc.arg(principal_id), sqlc.arg(resource_kind), sqlc.arg(resource_id),
    sqlc.arg(level), sqlc.arg(created_at)
);

-- name: GetGrant :one
SELECT * FROM grants WHERE id = sqlc.arg(id);

-- A revocation's read of its grant: of two revocations of one grant, the second finds none.
-- name: LockGrant :one
SELECT * FROM grants WHERE id = sqlc.arg(id) FOR UPDATE;

-- name: DeleteGrant :execrows
DELETE FROM grants WHERE id = sqlc.arg(id);

-- name: ListGrantsForPrincipal :many
SELECT * FROM grants WHERE principal_id = sqlc.arg(principal_id) ORDER BY id;

-- The grants of several principals in one statement (the people a draft mentions, the
-- authors of a run's follow-ups): each principal's in the order of its own read.
-- name: ListGrantsForPrincipals :many
SELECT * FROM grants
WHERE principal_id = ANY(sqlc.arg(principal_ids)::uuid[])
ORDER BY principal_id, id;

-- The grant of a principal on a resource, locked until the unit ends: a second grant of
-- the same pair changes this row, and concurrent changes of it serialize here.
-- name: LockGrantOfPair :one
SELECT * FROM grants
WHERE principal_id = sqlc.arg(principal_id)
  AND resource_kind = sqlc.arg(resource_kind)
  AND resource_id = sqlc.arg(resource_id)
FOR UPDATE;

-- name: UpdateGrantLevel :execrows
UPDATE grants SET level = sqlc.arg(level) WHERE id = sqlc.arg(id);

-- Both filters are optional (NULL: any).
-- name: ListGrants :many
SELECT * FROM grants
WHERE (sqlc.narg(principal_id)::uuid IS NULL OR principal_id = sqlc.narg(principal_id))
  AND (sqlc.narg(resource_id)::uuid IS NULL OR resource_id = sqlc.narg(resource_id))
ORDER BY id;
