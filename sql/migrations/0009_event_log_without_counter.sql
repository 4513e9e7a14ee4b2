-- The event log without a global serialization point (issue 22, ADR 0020).
--
-- Until now every unit that appended events took the row lock of the one event_counter
-- row right before COMMIT and held it through the commit, and the NOTIFY of migration
-- 0004 took PostgreSQL's cluster-wide notification lock through the commit as well: every
-- writing transaction of the deployment waited for the previous one's commit.
--
-- From now on the seq of an event is derived from its writer's transaction id, with no
-- shared row, lock or sequence:
--
--     seq = (pg_current_xact_id() << 16) + n    (n = 1, 2, ... 65535 in one transaction)
--
-- and a reader serves only events below the visibility horizon, the oldest transaction
-- id still running in its snapshot (pg_snapshot_xmin(pg_current_snapshot())): every
-- transaction below it has ended, so the set of events below `horizon << 16` can no
-- longer change, and an event that becomes visible later always has a higher seq than
-- everything served. Seq order is (xid, n) order: stable and final once served, not
-- commit order. The two functions below are the only places that know the encoding.
--
-- Existing events keep their seqs (so the cursors clients hold stay valid); they are all
-- below the first derived seq, which the block below checks.

CREATE FUNCTION turnkeeper_event_seq_base() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT pg_current_xact_id()::text::bigint << 16
$$;

COMMENT ON FUNCTION turnkeeper_event_seq_base() IS
    'Seq of the first event of the current transaction, minus one (assigns an xid).';

CREATE FUNCTION turnkeeper_event_horizon() RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint << 16
$$;

COMMENT ON FUNCTION turnkeeper_event_horizon() IS
    'Events with a seq below this value are final in the current snapshot.';

DO $$
BEGIN
    IF (SELECT coalesce(max(seq), 0) FROM events) >= turnkeeper_event_seq_base() THEN
        RAISE EXCEPTION 'existing event seqs reach the derived seqs; see ADR 0020';
    END IF;
END;
$$;

DROP TRIGGER events_notify ON events;
DROP FUNCTION turnkeeper_notify_events();
DROP TABLE event_counter;
