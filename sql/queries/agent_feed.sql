-- Creates the cursor on first use and locks it in one statement: polls and acks of one
-- agent are serialized, so delivered_seq and acked_seq never move back.
-- name: LockAgentCursor :one
INSERT INTO agent_cursors (agent_id) VALUES (sqlc.arg(agent_id))
ON CONFLICT (agent_id) DO UPDATE SET agent_id = EXCLUDED.agent_id
RETURNING acked_seq, delivered_seq;

-- Queued in the unit's pipeline: LockAgentCursor locked the row first.
-- name: SaveAgentCursor :exec
UPDATE agent_cursors SET acked_seq = sqlc.arg(acked_seq), delivered_seq = sqlc.arg(delivered_seq)
WHERE agent_id = sqlc.arg(agent_id);

-- name: SetReportedFollowups :execrows
UPDATE principals SET reported_followups = sqlc.narg(followups) WHERE id = sqlc.arg(id);
