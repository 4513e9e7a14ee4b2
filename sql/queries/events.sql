-- Allocates `n` seqs at commit time. The row lock is held until COMMIT, so a later
-- allocation waits for this transaction's commit: seq order is commit order, and no
-- reader can see seq n + 1 while seq n may still commit.
-- name: AdvanceEventCounter :one
UPDATE event_counter SET last_seq = last_seq + sqlc.arg(n)::bigint
WHERE singleton
RETURNING last_seq;

-- One multi-row insert of every event buffered by a unit: one array per column, zipped
-- by the set-returning unnest calls of the select list (they run in lockstep). The
-- restricted_to of each event travels as the text form of a uuid[] ('{...}' or NULL)
-- because an array of arrays cannot be ragged; payloads travel as JSON text.
-- name: InsertEvents :exec
INSERT INTO events (
    seq, type, actor_id, actor_kind, space_id, channel_id, thread_id, resource_kind,
    resource_id, resource_version, audience_id, restricted_to, payload, created_at
)
SELECT unnest(sqlc.arg(seqs)::bigint[]),
       unnest(sqlc.arg(types)::text[]),
       unnest(sqlc.arg(actor_ids)::uuid[]),
       unnest(sqlc.arg(actor_kinds)::text[]),
       unnest(sqlc.arg(space_ids)::uuid[]),
       unnest(sqlc.arg(channel_ids)::uuid[]),
       unnest(sqlc.arg(thread_ids)::uuid[]),
       unnest(sqlc.arg(resource_kinds)::text[]),
       unnest(sqlc.arg(resource_ids)::uuid[]),
       unnest(sqlc.arg(resource_versions)::bigint[]),
       unnest(sqlc.arg(audience_ids)::uuid[]),
       unnest(sqlc.arg(restricted_tos)::text[])::uuid[],
       unnest(sqlc.arg(payloads)::text[])::jsonb,
       unnest(sqlc.arg(created_ats)::timestamptz[]);

-- The shared feed: no personal events; the scope's channels or single threads (or
-- everything); restricted events only for their audience; in seq order.
-- name: ReadSharedEvents :many
SELECT * FROM events
WHERE seq > sqlc.arg(after_seq)
  AND audience_id IS NULL
  AND (sqlc.arg(everything)::boolean
       OR channel_id = ANY(sqlc.arg(channel_ids)::uuid[])
       OR thread_id = ANY(sqlc.arg(thread_ids)::uuid[]))
  AND (restricted_to IS NULL OR sqlc.arg(reader_id)::uuid = ANY(restricted_to))
ORDER BY seq
LIMIT sqlc.arg(max_events);

-- One principal's personal events (agent.invocation, agent.followup, run.cancel_requested).
-- name: ReadAudienceEvents :many
SELECT * FROM events
WHERE audience_id = sqlc.arg(audience_id) AND seq > sqlc.arg(after_seq)
ORDER BY seq
LIMIT sqlc.arg(max_events);
