-- name: InsertGrant :exec
INSERT INTO grants (id, principal_id, resource_kind, resource_id, level, created_at)
VALUES (
    sqlc.arg(id), sqlc.arg(principal_id), sqlc.arg(resource_kind), sqlc.arg(resource_id),
    sqlc.arg(level), sqlc.arg(created_at)
);

-- name: GetGrant :one
SELECT * FROM grants WHERE id = sqlc.arg(id);

-- name: DeleteGrant :execrows
DELETE FROM grants WHERE id = sqlc.arg(id);

-- name: ListGrantsForPrincipal :many
SELECT * FROM grants WHERE principal_id = sqlc.arg(principal_id) ORDER BY id;
