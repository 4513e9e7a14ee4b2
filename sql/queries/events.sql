-- Appends every event buffered by a unit in one statement, right before COMMIT. The seqs
-- derive from the writer's transaction id (turnkeeper_event_seq_base, migration 0009):
-- no row, lock or sequence is shared with other writers, so their commits do not wait
-- for each other. Readers serve an event only once every transaction below its writer's
-- has ended (turnkeeper_event_horizon), so the order is final when it is served. One
-- array per column, zipped by unnest in FROM; restricted_to travels as the text form of
-- a uuid[] ('{...}' or NULL) because an array of arrays cannot be ragged; payloads travel
-- as JSON text; `offsets` are the events' numbers in the transaction (1, 2, ...).
-- name: AppendEvents :many
INSERT INTO events (
    seq, type, actor_id, actor_kind, space_id, channel_id, thread_id, resource_kind,
    resource_id, resource_version, audience_id, restricted_to, payload, created_at
)
SELECT turnkeeper_event_seq_base() + e.ord,
       e.type, e.actor_id, e.actor_kind, e.space_id, e.channel_id, e.thread_id,
       e.resource_kind, e.resource_id, e.resource_version, e.audience_id,
       e.restricted_to::uuid[], e.payload::jsonb, e.created_at
FROM (
    SELECT unnest(sqlc.arg(offsets)::bigint[]) AS ord,
           unnest(sqlc.arg(types)::text[]) AS type,
           unnest(sqlc.arg(actor_ids)::uuid[]) AS actor_id,
           unnest(sqlc.arg(actor_kinds)::text[]) AS actor_kind,
           unnest(sqlc.arg(space_ids)::uuid[]) AS space_id,
           unnest(sqlc.arg(channel_ids)::uuid[]) AS channel_id,
           unnest(sqlc.arg(thread_ids)::uuid[]) AS thread_id,
           unnest(sqlc.arg(resource_kinds)::text[]) AS resource_kind,
           unnest(sqlc.arg(resource_ids)::uuid[]) AS resource_id,
           unnest(sqlc.arg(resource_versions)::bigint[]) AS resource_version,
           unnest(sqlc.arg(audience_ids)::uuid[]) AS audience_id,
           unnest(sqlc.arg(restricted_tos)::text[]) AS restricted_to,
           unnest(sqlc.arg(payloads)::text[]) AS payload,
           unnest(sqlc.arg(created_ats)::timestamptz[]) AS created_at
) AS e
RETURNING seq;

-- The append of a unit's only event (the common case: one message, one event), with one
-- parameter per column instead of one-element arrays (issue 18: building and dumping
-- fourteen arrays for one row cost more than the rest of the statement). Numbered and
-- ordered like AppendEvents; `ord` is the event's number in the transaction; restricted_to
-- and the payload travel as text, as there.
-- name: AppendEvent :one
INSERT INTO events (
    seq, type, actor_id, actor_kind, space_id, channel_id, thread_id, resource_kind,
    resource_id, resource_version, audience_id, restricted_to, payload, created_at
) VALUES (
    turnkeeper_event_seq_base() + sqlc.arg(ord)::bigint,
    sqlc.arg(type), sqlc.arg(actor_id), sqlc.arg(actor_kind), sqlc.arg(space_id),
    sqlc.arg(channel_id), sqlc.narg(thread_id), sqlc.arg(resource_kind),
    sqlc.arg(resource_id), sqlc.narg(resource_version), sqlc.narg(audience_id),
    sqlc.narg(restricted_to)::text::uuid[], sqlc.arg(payload)::text::jsonb,
    sqlc.arg(created_at)
)
RETURNING seq;

-- The shared feed: no personal events; only events of threads the reader may open
-- (everything for the owner; the channels its grants give read on; single threads, the
-- main threads of the channels an agent operates; the threads whose fixed operator the
-- reading agent is, looked up in this statement's snapshot, one hashed subplan over
-- threads_operator_agent_idx, so a thread created just before the read is in it);
-- restricted events only for their audience; in seq order. Only events below the horizon
-- (migration 0009): their order is final, no later commit lands between them.
-- name: ReadSharedEvents :many
SELECT * FROM events
WHERE seq > sqlc.arg(after_seq)
  AND seq < turnkeeper_event_horizon()
  AND audience_id IS NULL
  AND (sqlc.arg(everything)::boolean
       OR channel_id = ANY(sqlc.arg(channel_ids)::uuid[])
       OR thread_id = ANY(sqlc.arg(thread_ids)::uuid[])
       OR thread_id IN (SELECT t.id FROM threads t
                        WHERE t.operator_agent_id = sqlc.narg(fixed_operator_id)::uuid))
  AND (restricted_to IS NULL OR sqlc.arg(reader_id)::uuid = ANY(restricted_to))
ORDER BY seq
LIMIT sqlc.arg(max_events);

-- One principal's personal events (agent.invocation, agent.followup, run.cancel_requested)
-- after a seq, or, when none is given, after the acknowledged seq of the principal's
-- agent cursor: a poll queues it right after LockAgentCursor (or
-- LockAgentCursorForToken), in the same round trip, so the cursor row it reads is the one
-- that statement locked (or created) in this unit. The principal is given by id, or by
-- the hash of its live token (a poll by bearer token, ADR 0026).
-- name: ReadAudienceEvents :many
WITH audience AS (
    SELECT coalesce(
        sqlc.narg(audience_id)::uuid,
        (SELECT k.principal_id FROM api_tokens k
         WHERE k.token_hash = sqlc.narg(token_hash)::bytea AND k.revoked_at IS NULL)) AS id
)
SELECT * FROM events
WHERE audience_id = (SELECT audience.id FROM audience)
  AND seq > coalesce(
      sqlc.narg(after_seq)::bigint,
      (SELECT c.acked_seq FROM agent_cursors c
       WHERE c.agent_id = (SELECT audience.id FROM audience)),
      0)
  AND seq < turnkeeper_event_horizon()
ORDER BY seq
LIMIT sqlc.arg(max_events);

-- The events that became readable after a seq, as the wake-up watch of each server
-- process sees them: the highest readable seq and the feeds of those events ('*' for
-- the shared feed, the audience's uuid for a personal event); 0 and '' when none. Bounded
-- by max_events (found says how many were looked at) so that a watch that fell far
-- behind reads in steps.
-- name: ReadReadableSince :one
SELECT coalesce(max(r.seq), 0)::bigint AS top_seq,
       coalesce(string_agg(DISTINCT coalesce(r.audience_id::text, '*'), ' '), '')::text AS feeds,
       count(*)::bigint AS found
FROM (
    SELECT seq, audience_id FROM events
    WHERE seq > sqlc.arg(after_seq) AND seq < turnkeeper_event_horizon()
    ORDER BY seq
    LIMIT sqlc.arg(max_events)
) AS r;

-- The highest readable seq (0 when none): where the watch of a process starts.
-- name: ReadReadableTop :one
SELECT coalesce(max(seq), 0)::bigint AS top_seq FROM events
WHERE seq < turnkeeper_event_horizon();
