-- Agent runs and the agent feed's delivery cursors.
-- At most one active run per thread: a partial unique index decides between concurrent
-- acceptances (the loser's unit is rerun and then sees the winner's run).

CREATE TABLE runs (
    id                     uuid PRIMARY KEY,
    thread_id              uuid NOT NULL CONSTRAINT runs_thread_fk REFERENCES threads (id),
    agent_id               uuid NOT NULL CONSTRAINT runs_agent_fk REFERENCES principals (id),
    state                  text NOT NULL CONSTRAINT runs_state_check
        CHECK (state IN ('queued', 'running', 'waiting_input', 'completed', 'failed', 'cancelled')),
    state_reason           text NULL,
    trigger_kind           text NOT NULL DEFAULT 'message' CONSTRAINT runs_trigger_kind_check
        CHECK (trigger_kind IN ('message')),
    triggering_message_id  uuid NOT NULL CONSTRAINT runs_triggering_message_fk
        REFERENCES messages (id),
    triggered_by           uuid NOT NULL CONSTRAINT runs_triggered_by_fk REFERENCES principals (id),
    version                bigint NOT NULL DEFAULT 1 CONSTRAINT runs_version_check CHECK (version >= 1),
    cancel_requested       boolean NOT NULL DEFAULT false,
    cancel_requested_at    timestamptz NULL,
    invocation_jti         text NULL,
    created_at             timestamptz NOT NULL,
    updated_at             timestamptz NOT NULL,
    CONSTRAINT runs_cancel_time_check CHECK (cancel_requested = (cancel_requested_at IS NOT NULL))
);

CREATE UNIQUE INDEX runs_one_active_per_thread ON runs (thread_id)
    WHERE state IN ('queued', 'running', 'waiting_input');

-- The jobs take due rows through these partial indexes, whatever the table's size.
CREATE INDEX runs_queued_created_idx ON runs (created_at) WHERE state = 'queued';
CREATE INDEX runs_running_updated_idx ON runs (updated_at) WHERE state = 'running';
CREATE INDEX runs_cancel_requested_idx ON runs (cancel_requested_at)
    WHERE cancel_requested AND state IN ('running', 'waiting_input');
CREATE INDEX runs_agent_active_idx ON runs (agent_id)
    WHERE state IN ('queued', 'running', 'waiting_input');

-- A run anchor names its run; only one anchor per run.
ALTER TABLE messages ADD CONSTRAINT messages_run_fk FOREIGN KEY (run_id) REFERENCES runs (id);
CREATE UNIQUE INDEX messages_run_anchor_key ON messages (run_id) WHERE run_id IS NOT NULL;

CREATE TABLE agent_cursors (
    agent_id       uuid PRIMARY KEY CONSTRAINT agent_cursors_agent_fk REFERENCES principals (id),
    acked_seq      bigint NOT NULL DEFAULT 0 CONSTRAINT agent_cursors_acked_check CHECK (acked_seq >= 0),
    delivered_seq  bigint NOT NULL DEFAULT 0
        CONSTRAINT agent_cursors_delivered_check CHECK (delivered_seq >= acked_seq)
);
