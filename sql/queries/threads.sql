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

-- Takes the thread row lock in the mode of the UPDATEs above (held until the transaction
-- ends) and reads the state under it: an append decides whether to reopen on this state,
-- so a close either waits for the append or has committed and is seen here. The
-- latest_seq and has_restricted come with it, so that the unit allocates the thread's
-- next seqs without another statement (AllocateThreadSeq would lock the row again).
-- name: LockThreadState :one
SELECT state, latest_seq, has_restricted FROM threads WHERE id = sqlc.arg(id) FOR NO KEY UPDATE;

-- Closing records the frontier it closed at (under the row lock the UPDATE takes), so
-- `turnkeeper check` can prove that no message followed a done state without a reopen.
-- The thread as the change left it: a post committed while the UPDATE waited for the
-- row moved its frontier, which the close's answer must show.
-- name: SetThreadState :one
UPDATE threads
SET state = sqlc.arg(state),
    closed_at_seq = CASE WHEN sqlc.arg(state) = 'done' THEN latest_seq ELSE closed_at_seq END
WHERE id = sqlc.arg(id)
RETURNING *;

-- Reopens a done thread. The UPDATE takes the row lock, so of two concurrent posts into
-- a done thread only the first changes a row (the second re-reads state = 'open' after
-- the first commits) and exactly one system line is written.
-- name: ReopenThread :execrows
UPDATE threads SET state = 'open' WHERE id = sqlc.arg(id) AND state = 'done';

-- Sent under the unit's thread row lock (the thread exists), so nothing waits for its
-- row count: it travels with the message's insert.
-- name: MarkThreadRestricted :exec
UPDATE threads SET has_restricted = true WHERE id = sqlc.arg(id);

-- name: ListThreadsOperatedBy :many
SELECT id FROM threads WHERE operator_agent_id = sqlc.arg(agent_id) ORDER BY id;

-- A thread with its channel and space in one round trip: the facts of every
-- authorization decision on a thread (no lock: rights are read, not changed).
-- name: GetThreadTarget :one
SELECT t.id AS t_id, t.channel_id AS t_channel_id, t.is_main AS t_is_main,
       t.title AS t_title, t.title_source AS t_title_source,
       t.operator_agent_id AS t_operator_agent_id, t.state AS t_state,
       t.latest_seq AS t_latest_seq, t.has_restricted AS t_has_restricted,
       t.created_by AS t_created_by, t.created_at AS t_created_at,
       t.closed_at_seq AS t_closed_at_seq,
       c.id AS c_id, c.space_id AS c_space_id, c.name AS c_name, c.type AS c_type,
       c.operator_mode AS c_operator_mode, c.operator_id AS c_operator_id,
       c.free_response AS c_free_response,
       c.allow_mentioned_agents AS c_allow_mentioned_agents,
       c.thread_require_mention AS c_thread_require_mention, c.archived AS c_archived,
       c.main_thread_id AS c_main_thread_id, c.created_at AS c_created_at,
       s.id AS s_id, s.name AS s_name, s.default_operator_id AS s_default_operator_id,
       s.created_by AS s_created_by, s.created_at AS s_created_at
FROM threads t
JOIN channels c ON c.id = t.channel_id
JOIN spaces s ON s.id = c.space_id
WHERE t.id = sqlc.arg(id);

-- GetThreadTarget under the thread row lock (FOR NO KEY UPDATE, the mode of the close's
-- UPDATE that follows, held until the unit ends), for a change of the thread decided on
-- its facts (a close): the channel is read after the lock is granted
-- (turnkeeper_channel_now, migration 0012), so a change that waited for the thread
-- behind posts decides on a change of the channel committed meanwhile (ADR 0044).
-- name: LockThreadTarget :one
WITH target AS (
    SELECT t.id AS t_id, t.channel_id AS t_channel_id, t.is_main AS t_is_main,
           t.title AS t_title, t.title_source AS t_title_source,
           t.operator_agent_id AS t_operator_agent_id, t.state AS t_state,
           t.latest_seq AS t_latest_seq, t.has_restricted AS t_has_restricted,
           t.created_by AS t_created_by, t.created_at AS t_created_at,
           t.closed_at_seq AS t_closed_at_seq,
           s.id AS s_id, s.name AS s_name, s.default_operator_id AS s_default_operator_id,
           s.created_by AS s_created_by, s.created_at AS s_created_at
    FROM threads t
    JOIN channels c ON c.id = t.channel_id
    JOIN spaces s ON s.id = c.space_id
    WHERE t.id = sqlc.arg(id)
    FOR NO KEY UPDATE OF t
)
SELECT target.t_id, target.t_channel_id, target.t_is_main, target.t_title,
       target.t_title_source, target.t_operator_agent_id, target.t_state,
       target.t_latest_seq, target.t_has_restricted, target.t_created_by,
       target.t_created_at, target.t_closed_at_seq,
       c.id AS c_id, c.space_id AS c_space_id, c.name AS c_name, c.type AS c_type,
       c.operator_mode AS c_operator_mode, c.operator_id AS c_operator_id,
       c.free_response AS c_free_response,
       c.allow_mentioned_agents AS c_allow_mentioned_agents,
       c.thread_require_mention AS c_thread_require_mention, c.archived AS c_archived,
       c.main_thread_id AS c_main_thread_id, c.created_at AS c_created_at,
       target.s_id, target.s_name, target.s_default_operator_id, target.s_created_by,
       target.s_created_at
FROM target, LATERAL turnkeeper_channel_now(target.t_channel_id) AS c;

-- Everything a message post decides on, in one statement: the author (`author_id`, or
-- the principal of the live token of `token_hash`: then the principal and the token in
-- one column, and no row at all for an unknown or revoked token, so the post is
-- authenticated in the round trip of its facts, ADR 0026); the thread with its channel
-- and space (NULL columns for an unknown thread), the thread row locked (FOR UPDATE OF
-- the thread: the lock AllocateThreadSeq takes, held until the unit ends) and the
-- channel read after the lock is granted, unlocked (`chan`: a post that waited for its
-- busy thread decides on a change of the channel committed meanwhile, and no change of
-- the channel waits for the posts; spaces never change); the author's grants, each as [id,
-- resource_kind, resource_id, level, created_at] in id order (a JSON array: one column
-- for any number of grants); the id of the message the author stored under the
-- request's client id (NULL when none); and, when `limit_class` is set, the take of one
-- token of the author's bucket (turnkeeper_take_bucket_token: the tokens left, NULL when
-- the client id is stored already or no take was asked for). The take reads the locked
-- row, so it runs after the thread lock is granted: the thread lock before the bucket
-- lock, the order every unit takes them in. No thread is locked and no token taken for
-- an unknown caller. The locked row is the thread's newest version and the channel is read
-- after it; the rest is read in the statement's snapshot (ADR 0024, ADR 0044).
-- name: GetPostFacts :one
WITH token AS (
    SELECT k.id, k.principal_id, k.label, k.origin, k.created_at, k.last_used_at
    FROM api_tokens k
    WHERE k.token_hash = sqlc.narg(token_hash)::bytea AND k.revoked_at IS NULL
),
caller AS (
    SELECT p.id, p.kind, p.handle, p.display_name, p.is_owner, p.billing_mode,
           p.holder_id, p.supports_followups, p.enabled, p.reported_followups,
           p.created_at
    FROM principals p
    WHERE p.id = coalesce(sqlc.narg(author_id)::uuid, (SELECT token.principal_id FROM token))
),
target AS (
    SELECT t.id AS t_id, t.channel_id AS t_channel_id, t.is_main AS t_is_main,
           t.title AS t_title, t.title_source AS t_title_source,
           t.operator_agent_id AS t_operator_agent_id, t.state AS t_state,
           t.latest_seq AS t_latest_seq, t.has_restricted AS t_has_restricted,
           t.created_by AS t_created_by, t.created_at AS t_created_at,
           t.closed_at_seq AS t_closed_at_seq,
           s.id AS s_id, s.name AS s_name, s.default_operator_id AS s_default_operator_id,
           s.created_by AS s_created_by, s.created_at AS s_created_at
    FROM threads t
    JOIN channels c ON c.id = t.channel_id
    JOIN spaces s ON s.id = c.space_id
    WHERE t.id = sqlc.arg(id) AND EXISTS (SELECT 1 FROM caller)
    FOR UPDATE OF t
),
-- The channel as committed when the thread lock was granted (turnkeeper_channel_now,
-- migration 0012: called on the locked row, it reads in a snapshot of its own).
chan AS (
    SELECT c.id AS c_id, c.space_id AS c_space_id, c.name AS c_name, c.type AS c_type,
           c.operator_mode AS c_operator_mode, c.operator_id AS c_operator_id,
           c.free_response AS c_free_response,
           c.allow_mentioned_agents AS c_allow_mentioned_agents,
           c.thread_require_mention AS c_thread_require_mention, c.archived AS c_archived,
           c.main_thread_id AS c_main_thread_id, c.created_at AS c_created_at
    FROM target, LATERAL turnkeeper_channel_now(target.t_channel_id) AS c
),
-- The caller of a token as one JSON array (no row when the author was given by id: the
-- unit knows it already, one NULL column then): [id, kind, handle, display_name,
-- is_owner, billing_mode, holder_id, supports_followups, enabled, reported_followups,
-- created_at, token id, label, origin, token created_at, last_used_at].
who AS (
    SELECT json_build_array(caller.id, caller.kind, caller.handle, caller.display_name,
                            caller.is_owner, caller.billing_mode, caller.holder_id,
                            caller.supports_followups, caller.enabled,
                            caller.reported_followups, caller.created_at, token.id,
                            token.label, token.origin, token.created_at,
                            token.last_used_at)::text AS doc
    FROM caller
    JOIN token ON true
),
take AS (
    SELECT turnkeeper_take_bucket_token(
               (SELECT caller.id FROM caller),
               sqlc.narg(limit_class)::text,
               sqlc.narg(burst)::float8,
               sqlc.narg(now)::timestamptz,
               sqlc.narg(per_minute)::float8,
               sqlc.narg(seconds_per_minute)::float8,
               sqlc.narg(tolerance)::float8,
               sqlc.arg(client_msg_id)::text
           ) AS tokens
    FROM target
    WHERE sqlc.narg(limit_class)::text IS NOT NULL
)
SELECT who.doc AS caller,
       target.t_id, target.t_channel_id, target.t_is_main, target.t_title,
       target.t_title_source, target.t_operator_agent_id, target.t_state,
       target.t_latest_seq, target.t_has_restricted, target.t_created_by,
       target.t_created_at, target.t_closed_at_seq,
       chan.c_id, chan.c_space_id, chan.c_name, chan.c_type,
       chan.c_operator_mode, chan.c_operator_id, chan.c_free_response,
       chan.c_allow_mentioned_agents, chan.c_thread_require_mention,
       chan.c_archived, chan.c_main_thread_id, chan.c_created_at,
       target.s_id, target.s_name, target.s_default_operator_id, target.s_created_by,
       target.s_created_at,
       (SELECT coalesce(
                   json_agg(json_build_array(g.id, g.resource_kind, g.resource_id, g.level,
                                             g.created_at) ORDER BY g.id),
                   '[]'::json)
        FROM grants g WHERE g.principal_id = caller.id)::text AS grants,
       m.id AS earlier_id,
       take.tokens AS bucket_tokens
FROM caller
LEFT JOIN who ON true
LEFT JOIN target ON true
LEFT JOIN chan ON true
LEFT JOIN take ON true
-- The author's id as the subquery's value, not a join column: the lookup stays an index
-- scan of messages_author_client_msg_id_key whatever the planner thinks of the CTE's rows.
LEFT JOIN messages m
       ON m.author_id = (SELECT author.id FROM caller author)
      AND m.client_msg_id = sqlc.arg(client_msg_id)::text;

-- Stores the latest_seq a unit allocated from the value it read under the thread row
-- lock (GetPostFacts); queued in the unit's pipeline, it costs no round trip.
-- name: SetThreadLatestSeq :exec
UPDATE threads SET latest_seq = sqlc.arg(latest_seq) WHERE id = sqlc.arg(id);
