-- Atomic count + 1: concurrent denials in one window land in one row.
-- name: RecordDenial :exec
INSERT INTO audit_denials (principal_id, action, reason, window_start, count)
VALUES (sqlc.arg(principal_id), sqlc.arg(action), sqlc.arg(reason), sqlc.arg(window_start), 1)
ON CONFLICT (principal_id, action, reason, window_start)
DO UPDATE SET count = audit_denials.count + 1;

-- name: ListDenials :many
SELECT * FROM audit_denials
WHERE principal_id = sqlc.arg(principal_id)
ORDER BY window_start, action, reason;

-- name: InsertAuditChange :exec
INSERT INTO audit_changes (id, actor_id, action, subject_id, before, after, at)
VALUES (
    sqlc.arg(id), sqlc.arg(actor_id), sqlc.arg(action), sqlc.arg(subject_id),
    sqlc.narg(before), sqlc.narg(after), sqlc.arg(at)
);

-- name: ListAuditChanges :many
SELECT * FROM audit_changes WHERE subject_id = sqlc.arg(subject_id) ORDER BY id;
