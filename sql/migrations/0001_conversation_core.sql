-- 0001: the conversation core: principals and tokens, spaces, channels, threads, grants,
-- messages, the event log, the audit of denials and rate-limit buckets.
--
-- Enumerations are text columns with CHECK constraints holding exactly the values of the
-- enums in domain/*.py (not PostgreSQL enum types: adding a value is then a plain
-- constraint swap inside one migration transaction).

CREATE TABLE principals (
    id                 uuid PRIMARY KEY,
    -- domain.world.PrincipalKind
    kind               text NOT NULL CONSTRAINT principals_kind_check
                           CHECK (kind IN ('person', 'agent', 'app')),
    handle             text NOT NULL CONSTRAINT principals_handle_key UNIQUE,
    display_name       text NOT NULL DEFAULT '',
    is_owner           boolean NOT NULL DEFAULT false,
    -- domain.world.BillingMode; agents only
    billing_mode       text NULL CONSTRAINT principals_billing_mode_check
                           CHECK (billing_mode IN ('organization', 'personal')),
    holder_id          uuid NULL REFERENCES principals (id),
    -- owner configuration of an agent: NULL means allowed
    supports_followups boolean NULL,
    enabled            boolean NOT NULL DEFAULT true,
    -- capability reported by the agent's heartbeat; unknown values are kept as sent
    -- (domain.followups fails closed on them), so no CHECK here
    reported_followups text NULL,
    created_at         timestamptz NOT NULL,
    CONSTRAINT principals_billing_agents_only_check
        CHECK (billing_mode IS NULL OR kind = 'agent'),
    CONSTRAINT principals_holder_personal_only_check
        CHECK (holder_id IS NULL OR billing_mode = 'personal')
);

-- API tokens are stored only as hashes; the hash is the lookup key of authentication.
CREATE TABLE api_tokens (
    token_hash   bytea PRIMARY KEY,
    principal_id uuid NOT NULL REFERENCES principals (id),
    created_at   timestamptz NOT NULL
);

CREATE INDEX api_tokens_principal_idx ON api_tokens (principal_id);

CREATE TABLE spaces (
    id                  uuid PRIMARY KEY,
    name                text NOT NULL,
    default_operator_id uuid NULL REFERENCES principals (id),
    created_by          uuid NOT NULL REFERENCES principals (id),
    created_at          timestamptz NOT NULL
);

CREATE TABLE channels (
    id                     uuid PRIMARY KEY,
    space_id               uuid NOT NULL REFERENCES spaces (id),
    name                   text NOT NULL,
    -- domain.world.ChannelType
    type                   text NOT NULL CONSTRAINT channels_type_check
                               CHECK (type IN ('text', 'forum')),
    -- domain.world.OperatorMode
    operator_mode          text NOT NULL DEFAULT 'inherit' CONSTRAINT channels_operator_mode_check
                               CHECK (operator_mode IN ('inherit', 'agent', 'none')),
    operator_id            uuid NULL REFERENCES principals (id),
    free_response          boolean NOT NULL DEFAULT false,
    allow_mentioned_agents boolean NOT NULL DEFAULT false,
    thread_require_mention boolean NOT NULL DEFAULT false,
    archived               boolean NOT NULL DEFAULT false,
    -- text channels only; the foreign key is added below, once threads exist
    main_thread_id         uuid NULL,
    created_at             timestamptz NOT NULL,
    CONSTRAINT channels_agent_mode_has_operator_check
        CHECK (operator_mode <> 'agent' OR operator_id IS NOT NULL),
    CONSTRAINT channels_main_thread_text_only_check
        CHECK (main_thread_id IS NULL OR type = 'text')
);

CREATE INDEX channels_space_idx ON channels (space_id);

CREATE TABLE threads (
    id                uuid PRIMARY KEY,
    channel_id        uuid NOT NULL REFERENCES channels (id),
    is_main           boolean NOT NULL DEFAULT false,
    title             text NULL,
    -- domain.world.TitleSource
    title_source      text NOT NULL DEFAULT 'human' CONSTRAINT threads_title_source_check
                          CHECK (title_source IN ('human', 'auto')),
    -- fixed at creation; a main thread follows its channel's operator instead
    operator_agent_id uuid NULL REFERENCES principals (id),
    -- domain.world.ThreadState
    state             text NOT NULL DEFAULT 'open' CONSTRAINT threads_state_check
                          CHECK (state IN ('open', 'done')),
    -- the raw frontier: thread_seq of the newest message; its row lock serializes appends
    latest_seq        bigint NOT NULL DEFAULT 0 CONSTRAINT threads_latest_seq_check
                          CHECK (latest_seq >= 0),
    has_restricted    boolean NOT NULL DEFAULT false,
    created_by        uuid NOT NULL REFERENCES principals (id),
    created_at        timestamptz NOT NULL,
    CONSTRAINT threads_main_has_no_fixed_operator_check
        CHECK (NOT is_main OR operator_agent_id IS NULL)
);

CREATE INDEX threads_channel_idx ON threads (channel_id);

-- A text channel has exactly one main thread.
CREATE UNIQUE INDEX threads_one_main_per_channel ON threads (channel_id) WHERE is_main;

-- ThreadRepository.operated_by (agent disabled job).
CREATE INDEX threads_operator_agent_idx ON threads (operator_agent_id)
    WHERE operator_agent_id IS NOT NULL;

-- Deferred: a channel and its main thread are created in one transaction, in either order.
ALTER TABLE channels
    ADD CONSTRAINT channels_main_thread_id_fkey FOREIGN KEY (main_thread_id)
        REFERENCES threads (id) DEFERRABLE INITIALLY DEFERRED;

CREATE TABLE grants (
    id            uuid PRIMARY KEY,
    principal_id  uuid NOT NULL REFERENCES principals (id),
    -- domain.world.ResourceKind; resource_id points at a space or a channel, so it has no
    -- foreign key
    resource_kind text NOT NULL CONSTRAINT grants_resource_kind_check
                      CHECK (resource_kind IN ('space', 'channel')),
    resource_id   uuid NOT NULL,
    -- domain.world.Level labels (none is never stored: no grant means none)
    level         text NOT NULL CONSTRAINT grants_level_check
                      CHECK (level IN ('read', 'write', 'trigger')),
    created_at    timestamptz NOT NULL,
    CONSTRAINT grants_principal_resource_key UNIQUE (principal_id, resource_kind, resource_id)
);

CREATE TABLE messages (
    id                   uuid PRIMARY KEY,
    thread_id            uuid NOT NULL REFERENCES threads (id),
    thread_seq           bigint NOT NULL CONSTRAINT messages_thread_seq_check
                             CHECK (thread_seq > 0),
    author_id            uuid NOT NULL REFERENCES principals (id),
    -- domain.messaging.Origin
    origin               text NOT NULL CONSTRAINT messages_origin_check
                             CHECK (origin IN ('human', 'agent', 'app', 'system')),
    -- domain.messaging.MessageKind
    kind                 text NOT NULL CONSTRAINT messages_kind_check
                             CHECK (kind IN ('text', 'system', 'run')),
    content              text NOT NULL,
    mentions             uuid[] NOT NULL DEFAULT '{}',
    reply_to_id          uuid NULL REFERENCES messages (id),
    -- NULL: everyone with read on the thread sees it
    restricted_to        uuid[] NULL,
    client_msg_id        text NULL,
    digest               text NULL,
    -- domain.messaging.TriggerState
    trigger_state        text NULL CONSTRAINT messages_trigger_state_check
                             CHECK (trigger_state IN ('received', 'queued', 'working', 'done',
                                                      'failed', 'cancelled',
                                                      'followup_delivered')),
    trigger_state_reason text NULL,
    -- the anchor of a run; the runs table comes with a later migration, which adds the key
    run_id               uuid NULL,
    created_at           timestamptz NOT NULL,
    deleted_at           timestamptz NULL,
    version              bigint NOT NULL DEFAULT 1 CONSTRAINT messages_version_check
                             CHECK (version >= 1),
    -- Also the index of thread listing (thread_id, thread_seq > n ORDER BY thread_seq) and
    -- of the freshness gate's newest-first scans.
    CONSTRAINT messages_thread_seq_key UNIQUE (thread_id, thread_seq),
    -- Idempotency: a concurrent duplicate fails here and is retried (it then replays).
    CONSTRAINT messages_author_client_msg_id_key UNIQUE (author_id, client_msg_id),
    CONSTRAINT messages_run_anchor_check CHECK ((kind = 'run') = (run_id IS NOT NULL)),
    CONSTRAINT messages_trigger_human_only_check
        CHECK (trigger_state IS NULL OR origin = 'human'),
    CONSTRAINT messages_trigger_reason_needs_state_check
        CHECK (trigger_state_reason IS NULL OR trigger_state IS NOT NULL)
);

-- The global event log. seq is allocated at commit from event_counter, so seq order is
-- commit order and a reader's cursor never passes an event that commits later. No
-- foreign keys: the log outlives what it describes.
CREATE TABLE events (
    seq              bigint PRIMARY KEY,
    -- domain.events.EventType
    type             text NOT NULL CONSTRAINT events_type_check
                         CHECK (type IN ('thread.created', 'thread.reopened',
                                         'message.created', 'message.updated',
                                         'run.state_changed', 'agent.invocation',
                                         'agent.followup', 'run.cancel_requested')),
    actor_id         uuid NOT NULL,
    -- domain.world.PrincipalKind
    actor_kind       text NOT NULL CONSTRAINT events_actor_kind_check
                         CHECK (actor_kind IN ('person', 'agent', 'app')),
    space_id         uuid NOT NULL,
    channel_id       uuid NOT NULL,
    thread_id        uuid NULL,
    resource_kind    text NOT NULL CONSTRAINT events_resource_kind_check
                         CHECK (resource_kind IN ('thread', 'message', 'run')),
    resource_id      uuid NOT NULL,
    resource_version bigint NULL,
    -- personal events only (domain.events.PERSONAL_TYPES): the one receiving principal
    audience_id      uuid NULL,
    restricted_to    uuid[] NULL,
    payload          jsonb NOT NULL CONSTRAINT events_payload_object_check
                         CHECK (jsonb_typeof(payload) = 'object'),
    created_at       timestamptz NOT NULL,
    CONSTRAINT events_personal_audience_check
        CHECK ((type IN ('agent.invocation', 'agent.followup', 'run.cancel_requested'))
               = (audience_id IS NOT NULL))
);

-- The shared feed (audience_id IS NULL) filtered by channel or by single thread.
CREATE INDEX events_shared_channel_idx ON events (channel_id, seq) WHERE audience_id IS NULL;
CREATE INDEX events_shared_thread_idx ON events (thread_id, seq) WHERE audience_id IS NULL;
-- Personal feeds: one principal's events in seq order.
CREATE INDEX events_audience_idx ON events (audience_id, seq) WHERE audience_id IS NOT NULL;

-- The one row that allocates event seqs. Its row lock is taken right before COMMIT and
-- held until the commit is visible, which orders seq allocation by commit.
CREATE TABLE event_counter (
    singleton boolean PRIMARY KEY DEFAULT true CONSTRAINT event_counter_singleton_check
                  CHECK (singleton),
    last_seq  bigint NOT NULL CONSTRAINT event_counter_last_seq_check CHECK (last_seq >= 0)
);

INSERT INTO event_counter (singleton, last_seq) VALUES (true, 0);

-- Authorization denials, one row per principal, action, reason and aggregation window.
CREATE TABLE audit_denials (
    principal_id uuid NOT NULL REFERENCES principals (id),
    action       text NOT NULL,
    reason       text NOT NULL,
    window_start timestamptz NOT NULL,
    count        bigint NOT NULL CONSTRAINT audit_denials_count_check CHECK (count > 0),
    CONSTRAINT audit_denials_window_key UNIQUE (principal_id, action, reason, window_start)
);

-- Token buckets of rate-limit classes (domain.ratelimit).
CREATE TABLE rate_buckets (
    principal_id uuid NOT NULL REFERENCES principals (id),
    limit_class  text NOT NULL,
    tokens       double precision NOT NULL,
    updated_at   timestamptz NOT NULL,
    CONSTRAINT rate_buckets_pkey PRIMARY KEY (principal_id, limit_class)
);
