-- Follow-ups: human messages accepted into an active run (seed followups-steer-and-queue).
-- A message is the follow-up of at most one run; moving it to a follow-on run updates
-- its row instead of adding a second one.

CREATE TABLE run_followups (
    run_id      uuid NOT NULL CONSTRAINT run_followups_run_fk
        REFERENCES runs (id) ON DELETE CASCADE,
    message_id  uuid NOT NULL CONSTRAINT run_followups_message_fk
        REFERENCES messages (id) ON DELETE CASCADE,
    state       text NOT NULL DEFAULT 'queued' CONSTRAINT run_followups_state_check
        CHECK (state IN ('queued', 'delivered', 'absorbed', 'deferred', 'discarded')),
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    CONSTRAINT run_followups_pkey PRIMARY KEY (run_id, message_id),
    CONSTRAINT run_followups_message_key UNIQUE (message_id)
);

CREATE INDEX run_followups_run_state_idx ON run_followups (run_id, state);
