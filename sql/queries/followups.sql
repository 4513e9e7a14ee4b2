-- Queued: it travels with the unit's next statement (a duplicate is raised there).
-- name: InsertFollowup :exec
INSERT INTO run_followups (run_id, message_id, state, accepted_run_id, mode, created_at, updated_at)
VALUES (sqlc.arg(run_id), sqlc.arg(message_id), 'queued', sqlc.arg(run_id), sqlc.arg(mode),
        sqlc.arg(at), sqlc.arg(at));

-- name: ListFollowups :many
SELECT message_id, state FROM run_followups WHERE run_id = sqlc.arg(run_id) ORDER BY message_id;

-- The end of a run locks its open follow-ups in message_id order (after the run row), so
-- two settlements, or a settlement and an acknowledgement, take them in the same order.
-- name: LockOpenFollowups :many
SELECT f.message_id, m.thread_seq, m.author_id, m.deleted_at
FROM run_followups f JOIN messages m ON m.id = f.message_id
WHERE f.run_id = sqlc.arg(run_id) AND f.state IN ('queued', 'delivered')
ORDER BY f.message_id
FOR UPDATE OF f;

-- A run patch locks the follow-ups its ops name in one statement, in message_id order as
-- the end of a run does (the run row is locked before either), whatever the ops' order.
-- name: LockFollowups :many
SELECT message_id, state FROM run_followups
WHERE run_id = sqlc.arg(run_id) AND message_id = ANY(sqlc.arg(message_ids)::uuid[])
ORDER BY message_id
FOR UPDATE;

-- name: LockFollowup :one
SELECT state FROM run_followups
WHERE run_id = sqlc.arg(run_id) AND message_id = sqlc.arg(message_id)
FOR UPDATE;

-- One statement for any number of follow-ups (settlement stays constant in statements).
-- Queued in the unit's pipeline: its rows were locked by LockOpenFollowups or
-- LockFollowup(s) before, so it waits for nothing and costs no round trip.
-- name: SetFollowupStates :exec
UPDATE run_followups SET state = sqlc.arg(state), updated_at = sqlc.arg(at)
WHERE run_id = sqlc.arg(run_id) AND message_id = ANY(sqlc.arg(message_ids)::uuid[]);

-- The rest of the candidates become follow-ups of the follow-on run (queued in the
-- pipeline, as SetFollowupStates).
-- name: MoveFollowups :exec
UPDATE run_followups SET run_id = sqlc.arg(new_run_id), state = 'queued', updated_at = sqlc.arg(at)
WHERE run_id = sqlc.arg(run_id) AND message_id = ANY(sqlc.arg(message_ids)::uuid[]);

-- What the store links to a message for its trigger report: its follow-up row (the run
-- of its acceptance and the mode recorded then) and the run it triggered, if any.
-- name: TriggerLinksOfMessage :many
SELECT 'followup'::text AS link, f.accepted_run_id AS run_id, f.mode
FROM run_followups f WHERE f.message_id = sqlc.arg(message_id)
UNION ALL
SELECT 'run'::text AS link, r.id AS run_id, 'none'::text AS mode
FROM runs r WHERE r.triggering_message_id = sqlc.arg(message_id);
