-- Creates the cursor on first use and locks it in one statement: polls and acks of one
-- agent are serialized, so delivered_seq and acked_seq never move back.
-- name: LockAgentCursor :one
INSERT INTO agent_cursors (agent_id) VALUES (sqlc.arg(agent_id))
ON CONFLICT (agent_id) DO UPDATE SET agent_id = EXCLUDED.agent_id
RETURNING acked_seq, delivered_seq;

-- LockAgentCursor for the caller of a bearer token, read in the same round trip (ADR
-- 0026): the live token of the hash and its principal as one JSON column (as
-- GetPostFacts reads them), then the cursor, created and locked only for an agent (NULL
-- columns for a person or an app, whose poll is refused). No row at all for an unknown or
-- revoked token, and then nothing is written.
-- name: LockAgentCursorForToken :one
WITH token AS (
    SELECT k.id, k.principal_id, k.label, k.origin, k.created_at, k.last_used_at
    FROM api_tokens k
    WHERE k.token_hash = sqlc.arg(token_hash)::bytea AND k.revoked_at IS NULL
),
caller AS (
    SELECT p.id, p.kind, p.handle, p.display_name, p.is_owner, p.billing_mode,
           p.holder_id, p.supports_followups, p.enabled, p.reported_followups,
           p.created_at
    FROM principals p
    WHERE p.id = (SELECT token.principal_id FROM token)
),
locked AS (
    INSERT INTO agent_cursors (agent_id)
    SELECT caller.id FROM caller WHERE caller.kind = 'agent'
    ON CONFLICT (agent_id) DO UPDATE SET agent_id = EXCLUDED.agent_id
    RETURNING acked_seq, delivered_seq
)
SELECT json_build_array(caller.id, caller.kind, caller.handle, caller.display_name,
                        caller.is_owner, caller.billing_mode, caller.holder_id,
                        caller.supports_followups, caller.enabled,
                        caller.reported_followups, caller.created_at, token.id,
                        token.label, token.origin, token.created_at,
                        token.last_used_at)::text AS caller,
       locked.acked_seq, locked.delivered_seq
FROM caller
JOIN token ON true
LEFT JOIN locked ON true;

-- Queued in the unit's pipeline: LockAgentCursor locked the row first.
-- name: SaveAgentCursor :exec
UPDATE agent_cursors SET acked_seq = sqlc.arg(acked_seq), delivered_seq = sqlc.arg(delivered_seq)
WHERE agent_id = sqlc.arg(agent_id);

-- name: SetReportedFollowups :execrows
UPDATE principals SET reported_followups = sqlc.narg(followups) WHERE id = sqlc.arg(id);
