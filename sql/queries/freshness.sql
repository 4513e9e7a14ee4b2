-- The freshness gate's reads after a missed compare-and-set (CasThreadSeq, threads.sql):
-- the committed raw frontier after a missed compare-and-set, read without a lock: it
-- only has to be no older than the miss. has_restricted comes from the same row version,
-- so a restricted message counted in latest_seq is also counted in has_restricted.
-- name: ReadThreadFrontier :one
SELECT latest_seq, has_restricted FROM threads WHERE id = sqlc.arg(id);

-- One newest-first batch of the visibility check over (after_seq, through_seq]: how many
-- messages it looked at, the lowest seq among them (where the next batch ends) and the
-- newest one the viewer may see (not deleted; public, its own, or in its audience); 0
-- stands for none (thread_seq starts at 1).
-- A backward scan of messages_thread_seq_key, at most max_rows rows.
-- name: NewestVisibleInWindow :one
WITH candidates AS (
    SELECT thread_seq, author_id, restricted_to, deleted_at
    FROM messages
    WHERE thread_id = sqlc.arg(thread_id)
      AND thread_seq > sqlc.arg(after_seq)
      AND thread_seq <= sqlc.arg(through_seq)
    ORDER BY thread_seq DESC
    LIMIT sqlc.arg(max_rows)
)
SELECT
    count(*)::bigint AS examined,
    coalesce(min(thread_seq), 0)::bigint AS lowest_seq,
    coalesce(max(thread_seq) FILTER (
        WHERE deleted_at IS NULL
          AND (restricted_to IS NULL
               OR author_id = sqlc.arg(viewer_id)
               OR sqlc.arg(viewer_id) = ANY(restricted_to))
    ), 0)::bigint AS newest_visible_seq
FROM candidates;
