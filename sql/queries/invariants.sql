-- Invariants over the whole database (adapters/postgres/invariants.py, `turnkeeper check`).
-- Every query returns the violations it finds, one row each: the id of the offending
-- thread, run, message or event and a short description. An empty result is a pass.
-- They read only committed rows and take no locks, so they may run beside live traffic
-- (a check then sees one snapshot per statement).

-- thread_seq of a thread is exactly 1..latest_seq: no gap, no duplicate, nothing beyond.
-- name: ThreadSeqViolations :many
SELECT t.id AS subject_id,
       concat('latest_seq=', t.latest_seq, ' messages=', count(m.id),
              ' distinct_seqs=', count(DISTINCT m.thread_seq),
              ' max_seq=', coalesce(max(m.thread_seq), 0))::text AS detail
FROM threads t LEFT JOIN messages m ON m.thread_id = t.id
GROUP BY t.id, t.latest_seq
HAVING count(m.id) <> t.latest_seq
    OR count(DISTINCT m.thread_seq) <> t.latest_seq
    OR coalesce(max(m.thread_seq), 0) <> t.latest_seq
ORDER BY t.id;

-- name: ActiveRunViolations :many
SELECT thread_id AS subject_id, concat('active_runs=', count(*))::text AS detail
FROM runs
WHERE state IN ('queued', 'running', 'waiting_input')
GROUP BY thread_id
HAVING count(*) > 1
ORDER BY thread_id;

-- name: OpenFollowupOnEndedRunViolations :many
SELECT f.message_id AS subject_id,
       concat('followup ', f.state, ' on run ', r.id, ' ', r.state)::text AS detail
FROM run_followups f JOIN runs r ON r.id = f.run_id
WHERE f.state IN ('queued', 'delivered')
  AND r.state NOT IN ('queued', 'running', 'waiting_input')
ORDER BY f.message_id;

-- Every stored change of a run raises its version and writes one run.state_changed.
-- name: RunVersionViolations :many
SELECT r.id AS subject_id,
       concat('version=', r.version, ' state_changed_events=', count(e.seq))::text AS detail
FROM runs r
LEFT JOIN events e ON e.resource_id = r.id AND e.type = 'run.state_changed'
GROUP BY r.id, r.version
HAVING r.version <> 1 + count(e.seq)
ORDER BY r.id;

-- The trigger message follows its run: received, queued or working while the run is
-- active; done, failed or cancelled as the run ended. Deleted messages are left alone.
-- name: TriggerStateViolations :many
SELECT m.id AS subject_id,
       concat('trigger_state=', coalesce(m.trigger_state, '(none)'),
              ' run ', r.id, ' ', r.state)::text AS detail
FROM runs r JOIN messages m ON m.id = r.triggering_message_id
WHERE m.deleted_at IS NULL
  AND CASE r.state
        WHEN 'completed' THEN m.trigger_state IS DISTINCT FROM 'done'
        WHEN 'failed' THEN m.trigger_state IS DISTINCT FROM 'failed'
        WHEN 'cancelled' THEN m.trigger_state IS DISTINCT FROM 'cancelled'
        ELSE coalesce(m.trigger_state, '') NOT IN ('received', 'queued', 'working')
      END
ORDER BY m.id;

-- Only a failed or cancelled trigger says why: a reason beside any other trigger_state
-- (a completed run's reason on its done message) breaks the rule. The reason itself is
-- not shown: an agent's finish reason is its own text.
-- name: TriggerReasonViolations :many
SELECT m.id AS subject_id,
       concat('trigger_state=', m.trigger_state, ' with a trigger_state_reason')::text AS detail
FROM messages m
WHERE m.trigger_state_reason IS NOT NULL
  AND m.trigger_state NOT IN ('failed', 'cancelled')
ORDER BY m.id;

-- Only a person's human message ever carries a trigger_state.
-- name: NonHumanTriggerStateViolations :many
SELECT m.id AS subject_id,
       concat('origin=', m.origin, ' author_kind=', p.kind,
              ' trigger_state=', m.trigger_state)::text AS detail
FROM messages m JOIN principals p ON p.id = m.author_id
WHERE m.trigger_state IS NOT NULL AND (m.origin <> 'human' OR p.kind <> 'person')
ORDER BY m.id;

-- No payload holds JSON null at any depth.
-- name: NullPayloadViolations :many
SELECT e.resource_id AS subject_id, concat('event ', e.seq, ' ', e.type)::text AS detail
FROM events e
WHERE jsonb_path_exists(e.payload, 'lax $.** ? (@ == null)')
ORDER BY e.seq;

-- A personal event (its audience is an agent) never carries message content or a token.
-- name: PersonalContentViolations :many
SELECT e.resource_id AS subject_id, concat('event ', e.seq, ' ', e.type)::text AS detail
FROM events e
WHERE e.audience_id IS NOT NULL
  AND (jsonb_path_exists(e.payload, 'lax $.**.content')
       OR jsonb_path_exists(e.payload, 'lax $.**.message')
       OR jsonb_path_exists(e.payload, 'lax $.**.token')
       OR jsonb_path_exists(e.payload, 'lax $.**.invocation_token'))
ORDER BY e.seq;

-- No message after a done state without a reopen: the message right after a thread's
-- last close is the reopen system line (origin and kind system), and a thread still done
-- has no message after its close. Threads never closed since migration 0008 carry no
-- record (closed_at_seq NULL) and are not judged.
-- name: MessageAfterDoneViolations :many
SELECT t.id AS subject_id,
       concat('state=', t.state, ' closed_at_seq=', t.closed_at_seq,
              ' latest_seq=', t.latest_seq,
              ' next=', coalesce(m.origin || '/' || m.kind, '(none)'))::text AS detail
FROM threads t
LEFT JOIN messages m ON m.thread_id = t.id AND m.thread_seq = t.closed_at_seq + 1
WHERE t.closed_at_seq IS NOT NULL
  AND t.latest_seq > t.closed_at_seq
  AND (t.state = 'done' OR m.origin IS DISTINCT FROM 'system'
       OR m.kind IS DISTINCT FROM 'system')
ORDER BY t.id;
