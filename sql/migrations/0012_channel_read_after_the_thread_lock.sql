-- A post reads its channel as committed when its thread lock was granted (ADR 0044).
--
-- GetPostFacts locks the thread row (FOR UPDATE OF t) and read the channel in the same
-- statement. In READ COMMITTED a statement's rows come from the snapshot it took before it
-- waited for a lock; only the rows it locks are read again in their newest version. In a
-- busy thread the posts queue on the thread row, so a post that got the row decided on
-- the channel as it was before the wait: posts were stored in a channel whose archive had
-- answered, and accepted as follow-ups of a main thread's old operator after the change
-- had answered. Locking the channel row as well would refresh it, but a share lock that
-- refreshes (FOR SHARE) is one every change of the channel must wait for, and under a
-- stream of posts the change never got the row (share lockers do not queue behind a
-- waiting writer); FOR KEY SHARE is not refreshed by a change that keeps the key.
--
-- A VOLATILE PL/pgSQL function runs each of its queries in a snapshot of its own, taken
-- when the query starts. GetPostFacts calls this one on the locked thread row, so it runs
-- after the thread lock is granted and reads the channel as committed then; it takes no
-- lock, so no change of the channel waits for the posts.

CREATE FUNCTION turnkeeper_channel_now(p_id uuid) RETURNS SETOF channels
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN QUERY SELECT * FROM channels WHERE id = p_id;
END;
$$;

COMMENT ON FUNCTION turnkeeper_channel_now(uuid) IS
    'The channel row in a snapshot taken at the call (after a lock wait); see migration 0012.';
