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
