-- Appends every event buffered by a unit in one statement, right before COMMIT: the
-- UPDATE of the counter row allocates the seqs and holds the row lock until COMMIT, so a
-- later allocation waits for this commit. Seq order is commit order, and no reader can
-- see seq n + 1 while seq n may still commit. One array per column, zipped by unnest in
-- FROM; restricted_to travels as the text form of a uuid[] ('{...}' or NULL) because an
-- array of arrays cannot be ragged; payloads travel as JSON text; `offsets` is 1..n.
-- name: AppendEvents :one
WITH counter AS (
    UPDATE event_counter
    SET last_seq = last_seq + cardinality(sqlc.arg(types)::text[])
    WHERE singleton
    RETURNING last_seq
), appended AS (
    INSERT INTO events (
        seq, type, actor_id, actor_kind, space_id, channel_id, thread_id, resource_kind,
        resource_id, resource_version, audience_id, restricted_to, payload, created_at
    )
    SELECT counter.last_seq - cardinality(sqlc.arg(types)::text[]) + e.ord,
           e.type, e.actor_id, e.actor_kind, e.space_id, e.channel_id, e.thread_id,
           e.resource_kind, e.resource_id, e.resource_version, e.audience_id,
           e.restricted_to::uuid[], e.payload::jsonb, e.created_at
    FROM counter, (
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
    RETURNING seq
)
SELECT last_seq FROM counter;

-- The shared feed: no personal events; only events of threads the reader may open
-- (everything for the owner; the channels its grants give read on; single threads, the
-- main threads of the channels an agent operates; the threads whose fixed operator the
-- reading agent is, looked up in this statement's snapshot, one hashed subplan over
-- threads_operator_agent_idx, so a thread created just before the read is in it);
-- restricted events only for their audience; in seq order.
-- name: ReadSharedEvents :many
SELECT * FROM events
WHERE seq > sqlc.arg(after_seq)
  AND audience_id IS NULL
  AND (sqlc.arg(everything)::boolean
       OR channel_id = ANY(sqlc.arg(channel_ids)::uuid[])
       OR thread_id = ANY(sqlc.arg(thread_ids)::uuid[])
       OR thread_id IN (SELECT t.id FROM threads t
                        WHERE t.operator_agent_id = sqlc.narg(fixed_operator_id)::uuid))
  AND (restricted_to IS NULL OR sqlc.arg(reader_id)::uuid = ANY(restricted_to))
ORDER BY seq
LIMIT sqlc.arg(max_events);

-- One principal's personal events (agent.invocation, agent.followup, run.cancel_requested).
-- name: ReadAudienceEvents :many
SELECT * FROM events
WHERE audience_id = sqlc.arg(audience_id) AND seq > sqlc.arg(after_seq)
ORDER BY seq
LIMIT sqlc.arg(max_events);

-- The highest seq allocated so far: the wake-up watchdog of each server process reads it
-- once per stream.heartbeat_seconds and wakes every reader when it moved past the
-- notifications the process got.
-- name: ReadEventCounter :one
SELECT last_seq FROM event_counter WHERE singleton;

-- Subscribes the process's dedicated connection to the commits that append events
-- (migration 0004 sends the notifications).
-- name: ListenForEvents :exec
LISTEN turnkeeper_events;
