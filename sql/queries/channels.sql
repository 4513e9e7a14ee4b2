-- name: InsertChannel :exec
INSERT INTO channels (
    id, space_id, name, type, operator_mode, operator_id, free_response,
    allow_mentioned_agents, thread_require_mention, archived, main_thread_id, created_at
) VALUES (
    sqlc.arg(id), sqlc.arg(space_id), sqlc.arg(name), sqlc.arg(type), sqlc.arg(operator_mode),
    sqlc.narg(operator_id), sqlc.arg(free_response), sqlc.arg(allow_mentioned_agents),
    sqlc.arg(thread_require_mention), sqlc.arg(archived), sqlc.narg(main_thread_id),
    sqlc.arg(created_at)
);

-- name: GetChannel :one
SELECT * FROM channels WHERE id = sqlc.arg(id);

-- An administrative change's read of the row it writes back whole: a change committed
-- while it waited is read, not overwritten. FOR NO KEY UPDATE, the mode of the UPDATE
-- that follows: two changes serialize, and neither waits for a thread being created in
-- the channel (its foreign key holds the row FOR KEY SHARE; ADR 0044).
-- name: LockChannel :one
SELECT * FROM channels WHERE id = sqlc.arg(id) FOR NO KEY UPDATE;

-- name: UpdateChannel :execrows
UPDATE channels
SET name = sqlc.arg(name),
    operator_mode = sqlc.arg(operator_mode),
    operator_id = sqlc.narg(operator_id),
    free_response = sqlc.arg(free_response),
    allow_mentioned_agents = sqlc.arg(allow_mentioned_agents),
    thread_require_mention = sqlc.arg(thread_require_mention),
    archived = sqlc.arg(archived),
    main_thread_id = sqlc.narg(main_thread_id)
WHERE id = sqlc.arg(id);

-- name: ListChannels :many
SELECT * FROM channels ORDER BY id;
