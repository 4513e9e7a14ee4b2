-- What became of a message, reported on its create answer and every replay (API.md
-- Trigger), is derived from stored facts only (ADR 0026). A follow-up row keeps the run
-- it was accepted into (its run_id moves to a follow-on run) and the mode that applied
-- to it then (the agent's capability may change after). The run a message opened is
-- found through runs.triggering_message_id, indexed here.

ALTER TABLE run_followups
    ADD COLUMN accepted_run_id uuid NULL CONSTRAINT run_followups_accepted_run_fk
        REFERENCES runs (id) ON DELETE CASCADE,
    ADD COLUMN mode text NULL CONSTRAINT run_followups_mode_check
        CHECK (mode IN ('steer', 'queue', 'none'));

-- Rows accepted before this migration: the run they are on now, and the agent's
-- effective mode now (the mode of their acceptance was not stored).
UPDATE run_followups f
SET accepted_run_id = f.run_id,
    mode = CASE
        WHEN p.supports_followups IS FALSE THEN 'none'
        WHEN p.reported_followups IN ('steer', 'queue') THEN p.reported_followups
        ELSE 'none'
    END
FROM runs r JOIN principals p ON p.id = r.agent_id
WHERE r.id = f.run_id;

ALTER TABLE run_followups
    ALTER COLUMN accepted_run_id SET NOT NULL,
    ALTER COLUMN mode SET NOT NULL;

CREATE INDEX runs_triggering_message_idx ON runs (triggering_message_id);
