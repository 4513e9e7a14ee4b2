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
-- The run's thread row is locked first (FOR NO KEY UPDATE, the mode of an append), in the
-- order every unit takes the two: thread, then run. The acceptance of a message holds
-- the thread row and then locks the thread's active run, and the end of a run may open
-- a follow-on run, whose anchor is appended to the thread: a unit that held the run
-- before the thread deadlocked with it, and under a burst of follow-ups the reruns of
-- the deadlock ran out (500). The thread_id never changes, so the unlocked read that
-- finds the thread is exact; the EXISTS filter runs before the run row is locked.
-- name: LockRun :one
WITH thread AS (
    SELECT t.id FROM threads t
    WHERE t.id = (SELECT r.thread_id FROM runs r WHERE r.id = sqlc.arg(id))
    FOR NO KEY UPDATE
)
SELECT runs.* FROM runs
WHERE runs.id = sqlc.arg(id) AND EXISTS (SELECT 1 FROM thread)
FOR UPDATE OF runs;

-- LockRun for a run that has not ended. A run that ended never moves again, so an
-- unlocked look suffices to skip it: no row, and nothing locked (neither its thread nor
-- the run). The agent feed reads past many ended runs' events: locking each thread held
-- people's posts for the whole walk and deadlocked two agents' polls. An active run is
-- locked as LockRun locks it; one that ended while its lock was awaited comes back ended.
-- name: LockActiveRun :one
WITH thread AS (
    SELECT t.id FROM threads t
    WHERE t.id = (
        SELECT r.thread_id FROM runs r
        WHERE r.id = sqlc.arg(id) AND r.state IN ('queued', 'running', 'waiting_input')
    )
    FOR NO KEY UPDATE
)
SELECT runs.* FROM runs
WHERE runs.id = sqlc.arg(id) AND EXISTS (SELECT 1 FROM thread)
FOR UPDATE OF runs;

-- LockRun for the caller of a bearer token, read in the same round trip (ADR 0026): the
-- live token of the hash and its principal as one JSON column (as GetPostFacts reads
-- them: [id, kind, handle, display_name, is_owner, billing_mode, holder_id,
-- supports_followups, enabled, reported_followups, created_at, token id, label, origin,
-- token created_at, last_used_at]), then the run's columns, locked FOR UPDATE after its
-- thread row (as LockRun; NULL for an unknown run). No row at all for an unknown or
-- revoked token, and then nothing is locked.
-- name: LockRunForToken :one
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
thread AS (
    SELECT t.id FROM threads t
    WHERE t.id = (SELECT r.thread_id FROM runs r WHERE r.id = sqlc.arg(id))
      AND EXISTS (SELECT 1 FROM caller)
    FOR NO KEY UPDATE
),
locked AS (
    SELECT r.id, r.thread_id, r.agent_id, r.state, r.state_reason, r.trigger_kind,
           r.triggering_message_id, r.triggered_by, r.version, r.cancel_requested,
           r.cancel_requested_at, r.invocation_jti, r.created_at, r.updated_at
    FROM runs r
    WHERE r.id = sqlc.arg(id) AND EXISTS (SELECT 1 FROM thread)
    FOR UPDATE OF r
)
SELECT json_build_array(caller.id, caller.kind, caller.handle, caller.display_name,
                        caller.is_owner, caller.billing_mode, caller.holder_id,
                        caller.supports_followups, caller.enabled,
                        caller.reported_followups, caller.created_at, token.id,
                        token.label, token.origin, token.created_at,
                        token.last_used_at)::text AS caller,
       locked.id, locked.thread_id, locked.agent_id, locked.state, locked.state_reason,
       locked.trigger_kind, locked.triggering_message_id, locked.triggered_by,
       locked.version, locked.cancel_requested, locked.cancel_requested_at,
       locked.invocation_jti, locked.created_at, locked.updated_at
FROM caller
JOIN token ON true
LEFT JOIN locked ON true;

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

-- Jobs take due runs with SKIP LOCKED, so that several runners never end a run twice,
-- each after its thread row (the order of LockRun), also with SKIP LOCKED: a run whose
-- thread is busy (an append in flight) is left to the next pass, and a job never waits
-- for a lock, so it closes no cycle. The due runs are found in the statement's
-- snapshot; the locked rows are checked again on their newest version (the conditions
-- are repeated on the locking scan).
-- name: LockRunsCreatedBefore :many
WITH due AS (
    SELECT r.id, r.thread_id FROM runs r
    WHERE r.state = ANY(sqlc.arg(states)::text[]) AND r.created_at < sqlc.arg(before)
    ORDER BY r.created_at, r.id LIMIT sqlc.arg(max_runs)
),
thread AS (
    SELECT t.id FROM threads t WHERE t.id IN (SELECT due.thread_id FROM due)
    FOR NO KEY UPDATE SKIP LOCKED
)
SELECT runs.* FROM runs
WHERE runs.id IN (SELECT due.id FROM due) AND runs.thread_id IN (SELECT thread.id FROM thread)
  AND runs.state = ANY(sqlc.arg(states)::text[]) AND runs.created_at < sqlc.arg(before)
ORDER BY runs.created_at, runs.id FOR UPDATE OF runs SKIP LOCKED;

-- name: LockRunsUpdatedBefore :many
WITH due AS (
    SELECT r.id, r.thread_id FROM runs r
    WHERE r.state = ANY(sqlc.arg(states)::text[]) AND r.updated_at < sqlc.arg(before)
    ORDER BY r.updated_at, r.id LIMIT sqlc.arg(max_runs)
),
thread AS (
    SELECT t.id FROM threads t WHERE t.id IN (SELECT due.thread_id FROM due)
    FOR NO KEY UPDATE SKIP LOCKED
)
SELECT runs.* FROM runs
WHERE runs.id IN (SELECT due.id FROM due) AND runs.thread_id IN (SELECT thread.id FROM thread)
  AND runs.state = ANY(sqlc.arg(states)::text[]) AND runs.updated_at < sqlc.arg(before)
ORDER BY runs.updated_at, runs.id FOR UPDATE OF runs SKIP LOCKED;

-- name: LockRunsCancelRequestedBefore :many
WITH due AS (
    SELECT r.id, r.thread_id FROM runs r
    WHERE r.state = ANY(sqlc.arg(states)::text[]) AND r.cancel_requested
      AND r.cancel_requested_at < sqlc.arg(before)
    ORDER BY r.cancel_requested_at, r.id LIMIT sqlc.arg(max_runs)
),
thread AS (
    SELECT t.id FROM threads t WHERE t.id IN (SELECT due.thread_id FROM due)
    FOR NO KEY UPDATE SKIP LOCKED
)
SELECT runs.* FROM runs
WHERE runs.id IN (SELECT due.id FROM due) AND runs.thread_id IN (SELECT thread.id FROM thread)
  AND runs.state = ANY(sqlc.arg(states)::text[]) AND runs.cancel_requested
  AND runs.cancel_requested_at < sqlc.arg(before)
ORDER BY runs.cancel_requested_at, runs.id FOR UPDATE OF runs SKIP LOCKED;

-- name: LockActiveRunsOfAgent :many
WITH due AS (
    SELECT r.id, r.thread_id FROM runs r
    WHERE r.agent_id = sqlc.arg(agent_id) AND r.state IN ('queued', 'running', 'waiting_input')
    ORDER BY r.id LIMIT sqlc.arg(max_runs)
),
thread AS (
    SELECT t.id FROM threads t WHERE t.id IN (SELECT due.thread_id FROM due)
    FOR NO KEY UPDATE SKIP LOCKED
)
SELECT runs.* FROM runs
WHERE runs.id IN (SELECT due.id FROM due) AND runs.thread_id IN (SELECT thread.id FROM thread)
  AND runs.agent_id = sqlc.arg(agent_id) AND runs.state IN ('queued', 'running', 'waiting_input')
ORDER BY runs.id FOR UPDATE OF runs SKIP LOCKED;

-- name: LockActiveRunsOfDisabledAgents :many
WITH due AS (
    SELECT r.id, r.thread_id FROM runs r JOIN principals p ON p.id = r.agent_id
    WHERE NOT p.enabled AND r.state IN ('queued', 'running', 'waiting_input')
    ORDER BY r.id LIMIT sqlc.arg(max_runs)
),
thread AS (
    SELECT t.id FROM threads t WHERE t.id IN (SELECT due.thread_id FROM due)
    FOR NO KEY UPDATE SKIP LOCKED
)
SELECT runs.* FROM runs
WHERE runs.id IN (SELECT due.id FROM due) AND runs.thread_id IN (SELECT thread.id FROM thread)
  AND runs.state IN ('queued', 'running', 'waiting_input')
ORDER BY runs.id FOR UPDATE OF runs SKIP LOCKED;
