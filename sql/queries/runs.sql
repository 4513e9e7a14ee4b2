-- name: InsertRun :exec
INSERT INTO runs (
    id, thread_id, agent_id, state, state_reason, trigger_kind, triggering_message_id,
    triggered_by, version, cancel_requested, cancel_requested_at, invocation_jti,
    created_at, updated_at
) VALUES (
    sqlc.arg(id), sqlc.arg(thread_id), sqlc.arg(agent_id), sqlc.arg(state),
    sqlc.narg(state_reason), sqlc.arg(trigger_kind), sqlc.arg(triggering_message_id),
    sqlc.arg(triggered_by), sqlc.arg(version), sqlc.arg(cancel_requested),
    sqlc.narg(cancel_requested_at), sqlc.narg(invocation_jti), sqlc.arg(created_at),
    sqlc.arg(updated_at)
);

-- name: GetRun :one
SELECT * FROM runs WHERE id = sqlc.arg(id);

-- The run row lock: every change of a run and the end of a run hold it until commit.
-- name: LockRun :one
SELECT * FROM runs WHERE id = sqlc.arg(id) FOR UPDATE;

-- Taken by the acceptance after the thread row lock (lock order: thread, then run), so
-- the active run stays a fact until the message commits, also against its end.
-- name: LockActiveRunInThread :one
SELECT * FROM runs
WHERE thread_id = sqlc.arg(thread_id) AND state IN ('queued', 'running', 'waiting_input')
FOR UPDATE;

-- An agent's answer naming a run: FOR SHARE after the thread row lock. The end of a run
-- updates the row and so waits for the answer's commit, or the answer waits for the end
-- and then sees the end state: no answer with run_id commits after its run's end.
-- name: LockRunForAnswer :one
SELECT id, thread_id, agent_id, state FROM runs WHERE id = sqlc.arg(id) FOR SHARE;

-- Sent under the unit's lock of the run row (runs are never deleted, so the row is
-- there): nothing waits for its row count, it travels with the unit's next statement.
-- name: UpdateRun :exec
UPDATE runs SET
    state = sqlc.arg(state),
    state_reason = sqlc.narg(state_reason),
    version = sqlc.arg(version),
    cancel_requested = sqlc.arg(cancel_requested),
    cancel_requested_at = sqlc.narg(cancel_requested_at),
    invocation_jti = sqlc.narg(invocation_jti),
    updated_at = sqlc.arg(updated_at)
WHERE id = sqlc.arg(id);

-- Jobs take due runs with SKIP LOCKED, so that several runners never end a run twice.
-- name: LockRunsCreatedBefore :many
SELECT * FROM runs
WHERE state = ANY(sqlc.arg(states)::text[]) AND created_at < sqlc.arg(before)
ORDER BY created_at LIMIT sqlc.arg(max_runs) FOR UPDATE SKIP LOCKED;

-- name: LockRunsUpdatedBefore :many
SELECT * FROM runs
WHERE state = ANY(sqlc.arg(states)::text[]) AND updated_at < sqlc.arg(before)
ORDER BY updated_at LIMIT sqlc.arg(max_runs) FOR UPDATE SKIP LOCKED;

-- name: LockRunsCancelRequestedBefore :many
SELECT * FROM runs
WHERE state = ANY(sqlc.arg(states)::text[]) AND cancel_requested
  AND cancel_requested_at < sqlc.arg(before)
ORDER BY cancel_requested_at LIMIT sqlc.arg(max_runs) FOR UPDATE SKIP LOCKED;

-- name: LockActiveRunsOfAgent :many
SELECT * FROM runs
WHERE agent_id = sqlc.arg(agent_id) AND state IN ('queued', 'running', 'waiting_input')
ORDER BY id LIMIT sqlc.arg(max_runs) FOR UPDATE SKIP LOCKED;

-- name: LockActiveRunsOfDisabledAgents :many
SELECT runs.* FROM runs JOIN principals ON principals.id = runs.agent_id
WHERE NOT principals.enabled AND runs.state IN ('queued', 'running', 'waiting_input')
ORDER BY runs.id LIMIT sqlc.arg(max_runs) FOR UPDATE OF runs SKIP LOCKED;
