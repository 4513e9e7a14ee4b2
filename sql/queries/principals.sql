-- name: InsertPrincipal :exec
INSERT INTO principals (
    id, kind, handle, display_name, is_owner, billing_mode, holder_id,
    supports_followups, enabled, reported_followups, created_at
) VALUES (
    sqlc.arg(id), sqlc.arg(kind), sqlc.arg(handle), sqlc.arg(display_name),
    sqlc.arg(is_owner), sqlc.narg(billing_mode), sqlc.narg(holder_id),
    sqlc.narg(supports_followups), sqlc.arg(enabled), sqlc.narg(reported_followups),
    sqlc.arg(created_at)
);

-- name: GetPrincipal :one
SELECT * FROM principals WHERE id = sqlc.arg(id);

-- An agent configuration's read of the row it writes back whole: a heartbeat's
-- capability committed while it waited is read, not overwritten.
-- name: LockPrincipal :one
SELECT * FROM principals WHERE id = sqlc.arg(id) FOR UPDATE;

-- name: GetPrincipals :many
SELECT * FROM principals WHERE id = ANY(sqlc.arg(ids)::uuid[]) ORDER BY id;

-- name: UpdatePrincipal :execrows
UPDATE principals
SET kind = sqlc.arg(kind),
    handle = sqlc.arg(handle),
    display_name = sqlc.arg(display_name),
    is_owner = sqlc.arg(is_owner),
    billing_mode = sqlc.narg(billing_mode),
    holder_id = sqlc.narg(holder_id),
    supports_followups = sqlc.narg(supports_followups),
    enabled = sqlc.arg(enabled),
    reported_followups = sqlc.narg(reported_followups)
WHERE id = sqlc.arg(id);

-- The first owner by id (UUIDv7: the oldest), so the answer is stable should there ever be
-- more than one.
-- name: GetOwner :one
SELECT * FROM principals WHERE is_owner ORDER BY id LIMIT 1;
