-- name: InsertMessage :exec
INSERT INTO messages (
    id, thread_id, thread_seq, author_id, origin, kind, content, mentions, reply_to_id,
    restricted_to, client_msg_id, digest, trigger_state, trigger_state_reason, run_id,
    created_at, deleted_at, version
) VALUES (
    sqlc.arg(id), sqlc.arg(thread_id), sqlc.arg(thread_seq), sqlc.arg(author_id),
    sqlc.arg(origin), sqlc.arg(kind), sqlc.arg(content), sqlc.arg(mentions)::uuid[],
    sqlc.narg(reply_to_id), sqlc.narg(restricted_to)::uuid[], sqlc.narg(client_msg_id),
    sqlc.narg(digest), sqlc.narg(trigger_state), sqlc.narg(trigger_state_reason),
    sqlc.narg(run_id), sqlc.arg(created_at), sqlc.narg(deleted_at), sqlc.arg(version)
);

-- InsertMessage, the thread's latest_seq and the message's message.created event in one
-- statement (ADR 0024): the message takes the seq the unit allocated under the thread row
-- lock (LockedThreads in the PostgreSQL adapter), and the thread row learns it here
-- instead of in a SetThreadLatestSeq of its own; the event, for a unit that has no other
-- event waiting to be numbered before it, is numbered `ord` in the transaction and seq'd
-- as AppendEvent seqs it. The id arrays travel as their text form ('{...}').
-- name: InsertMessageWithEvent :exec
WITH seq AS (
    UPDATE threads SET latest_seq = sqlc.arg(thread_seq)::bigint
    WHERE id = sqlc.arg(thread_id)::uuid
),
created AS (
    INSERT INTO events (
        seq, type, actor_id, actor_kind, space_id, channel_id, thread_id, resource_kind,
        resource_id, resource_version, audience_id, restricted_to, payload, created_at
    ) VALUES (
        turnkeeper_event_seq_base() + sqlc.arg(ord)::bigint,
        sqlc.arg(event_type)::text, sqlc.arg(actor_id)::uuid, sqlc.arg(actor_kind)::text,
        sqlc.arg(space_id)::uuid, sqlc.arg(channel_id)::uuid, sqlc.narg(event_thread_id)::uuid,
        sqlc.arg(resource_kind)::text, sqlc.arg(resource_id)::uuid,
        sqlc.narg(resource_version)::bigint, sqlc.narg(audience_id)::uuid,
        sqlc.narg(event_restricted_to)::text::uuid[], sqlc.arg(payload)::text::jsonb,
        sqlc.arg(event_created_at)::timestamptz
    )
)
INSERT INTO messages (
    id, thread_id, thread_seq, author_id, origin, kind, content, mentions, reply_to_id,
    restricted_to, client_msg_id, digest, trigger_state, trigger_state_reason, run_id,
    created_at, deleted_at, version
) VALUES (
    sqlc.arg(id), sqlc.arg(thread_id)::uuid, sqlc.arg(thread_seq)::bigint, sqlc.arg(author_id),
    sqlc.arg(origin), sqlc.arg(kind), sqlc.arg(content), sqlc.arg(mentions)::text::uuid[],
    sqlc.narg(reply_to_id), sqlc.narg(restricted_to)::text::uuid[], sqlc.narg(client_msg_id),
    sqlc.narg(digest), sqlc.narg(trigger_state), sqlc.narg(trigger_state_reason),
    sqlc.narg(run_id), sqlc.arg(created_at), sqlc.narg(deleted_at), sqlc.arg(version)
);

-- name: GetMessage :one
SELECT * FROM messages WHERE id = sqlc.arg(id);

-- name: GetMessageByClientId :one
SELECT * FROM messages
WHERE author_id = sqlc.arg(author_id) AND client_msg_id = sqlc.arg(client_msg_id);

-- What a reader may see of a thread after a seq: messages not deleted that are
-- unrestricted, its own, or restricted to an audience it belongs to.
-- name: ListVisibleMessages :many
SELECT * FROM messages
WHERE thread_id = sqlc.arg(thread_id)
  AND thread_seq > sqlc.arg(after_seq)
  AND deleted_at IS NULL
  AND (restricted_to IS NULL
       OR author_id = sqlc.arg(reader_id)
       OR sqlc.arg(reader_id) = ANY(restricted_to))
ORDER BY thread_seq
LIMIT sqlc.arg(max_rows);

-- name: SetMessageTriggerState :one
UPDATE messages
SET trigger_state = sqlc.narg(trigger_state),
    trigger_state_reason = sqlc.narg(trigger_state_reason),
    version = version + 1
WHERE id = sqlc.arg(id)
RETURNING *;

-- Sets the trigger_state of several messages in one statement (settlement of a run end
-- costs the same whatever the number of follow-ups); messages already in that state
-- with that reason are left alone, so no version step and no event is written for them.
-- name: SetTriggerStates :many
UPDATE messages
SET trigger_state = sqlc.arg(trigger_state),
    trigger_state_reason = sqlc.narg(trigger_state_reason),
    version = version + 1
WHERE id = ANY(sqlc.arg(ids)::uuid[])
  AND (trigger_state IS DISTINCT FROM sqlc.arg(trigger_state)
       OR trigger_state_reason IS DISTINCT FROM sqlc.narg(trigger_state_reason))
RETURNING *;
