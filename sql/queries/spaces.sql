-- name: InsertSpace :exec
INSERT INTO spaces (id, name, default_operator_id, created_by, created_at)
VALUES (
    sqlc.arg(id), sqlc.arg(name), sqlc.narg(default_operator_id), sqlc.arg(created_by),
    sqlc.arg(created_at)
);

-- name: GetSpace :one
SELECT * FROM spaces WHERE id = sqlc.arg(id);

-- name: ListSpaces :many
SELECT * FROM spaces ORDER BY id;
