-- name: InsertThread :exec
INSERT INTO threads (
    id, channel_id, is_main, title, title_source, operator_agent_id, state, latest_seq,
    has_restricted, created_by, created_at
) VALUES (
    sqlc.arg(id), sqlc.arg(channel_id), sqlc.arg(is_main), sqlc.narg(title),
    sqlc.arg(title_source), sqlc.narg(operator_agent_id), sqlc.arg(state),
    sqlc.arg(latest_seq), sqlc.arg(has_restricted), sqlc.arg(created_by), sqlc.arg(created_at)
);

-- name: GetThread :one
SELECT * FROM threads WHERE id = sqlc.arg(id);

-- Takes the thread row lock, held until the transaction ends: appends to one thread are
-- serialized, so thread_seq has no gaps and no duplicates.
-- name: AllocateThreadSeq :one
UPDATE threads SET latest_seq = latest_seq + 1 WHERE id = $1 RETURNING latest_seq;

-- The freshness gate's compare-and-set: allocates the next seq only when the sender saw
-- the current frontier (zero rows otherwise). Takes the same row lock as AllocateThreadSeq.
-- name: CasThreadSeq :one
UPDATE threads SET latest_seq = latest_seq + 1
WHERE id = sqlc.arg(id) AND latest_seq = sqlc.arg(seen_seq)
RETURNING latest_seq;

-- name: SetThreadState :execrows
UPDATE threads SET state = sqlc.arg(state) WHERE id = sqlc.arg(id);

-- Reopens a done thread. The UPDATE takes the row lock, so of two concurrent posts into
-- a done thread only the first changes a row (the second re-reads state = 'open' after
-- the first commits) and exactly one system line is written.
-- name: ReopenThread :execrows
UPDATE threads SET state = 'open' WHERE id = sqlc.arg(id) AND state = 'done';

-- name: MarkThreadRestricted :execrows
UPDATE threads SET has_restricted = true WHERE id = sqlc.arg(id);

-- name: ListThreadsOperatedBy :many
SELECT id FROM threads WHERE operator_agent_id = sqlc.arg(agent_id) ORDER BY id;
