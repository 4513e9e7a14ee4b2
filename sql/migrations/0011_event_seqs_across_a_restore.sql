-- Event seqs stay above every restored event when the database moves to another cluster
-- (ADR 0038).
--
-- Since migration 0009 a seq is derived from its writer's transaction id. pg_dump and
-- pg_restore carry the events but not the transaction id counter: a restored cluster
-- starts counting again from a low id, so its new events got seqs below the cursors
-- clients held (a resuming reader never saw them), events above the new horizon were
-- served to no reader, and once the counter reached the old range an append collided
-- with an existing seq.
--
-- The derived seq now adds a fixed offset to the transaction id:
--
--     seq = ((xid + turnkeeper_event_xid_offset()) << 16) + n
--
-- The offset is 0 until a database is found behind its own events; then
-- turnkeeper_align_event_seqs (called by every migrate, under the migration lock) raises
-- it just enough that every transaction id still to come derives seqs above the last
-- event. The offset is a constant in a SQL function, so the planner folds it into the
-- statements that use it: it costs the hot paths nothing.

CREATE FUNCTION turnkeeper_event_xid_offset() RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT 0::bigint
$$;

COMMENT ON FUNCTION turnkeeper_event_xid_offset() IS
    'Added to transaction ids to derive event seqs; raised by turnkeeper_align_event_seqs.';

CREATE OR REPLACE FUNCTION turnkeeper_event_seq_base() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT (pg_current_xact_id()::text::bigint + turnkeeper_event_xid_offset()) << 16
$$;

CREATE OR REPLACE FUNCTION turnkeeper_event_horizon() RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT (pg_snapshot_xmin(pg_current_snapshot())::text::bigint
            + turnkeeper_event_xid_offset()) << 16
$$;

-- How many transaction ids the offset falls short of putting every transaction id still
-- to come (from the snapshot's xmax on) above the last event; 0 or less: none. Assigns no
-- transaction id, so a read-only check may call it.
CREATE FUNCTION turnkeeper_event_xid_shortfall() RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT (coalesce(max(seq), 0) >> 16) + 1
           - (pg_snapshot_xmax(pg_current_snapshot())::text::bigint
              + turnkeeper_event_xid_offset())
    FROM events
$$;

COMMENT ON FUNCTION turnkeeper_event_xid_shortfall() IS
    'Positive when the transaction id counter is behind the events (a restored database).';

-- Raises the offset by the shortfall, if any; returns the raise (0: nothing to do).
CREATE FUNCTION turnkeeper_align_event_seqs() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    shortfall bigint := turnkeeper_event_xid_shortfall();
BEGIN
    IF shortfall <= 0 THEN
        RETURN 0;
    END IF;
    EXECUTE format(
        'CREATE OR REPLACE FUNCTION turnkeeper_event_xid_offset() RETURNS bigint'
        ' LANGUAGE sql STABLE AS %L',
        format('SELECT %s::bigint', turnkeeper_event_xid_offset() + shortfall)
    );
    RETURN shortfall;
END;
$$;
