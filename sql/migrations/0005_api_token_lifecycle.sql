-- API tokens that can be listed and revoked (issue 15), and the audit of administrative
-- changes (grants that change level, tokens issued and revoked).
--
-- A token gets an id (what the owner names it by; the hash stays the lookup key), an
-- optional label, its origin (issued: created through a use case; owner_env: named by
-- TURNKEEPER_OWNER_TOKEN, so that a changed variable revokes the token it named before),
-- the time of its last use (written at most once per auth.token_last_used_interval) and
-- the time it was revoked. A revoked row is kept so that a leaked token named again by
-- the variable is recognized and refused instead of being added back.

ALTER TABLE api_tokens
    ADD COLUMN id           uuid NULL,
    ADD COLUMN label        text NULL,
    -- domain.credentials.TokenOrigin
    ADD COLUMN origin       text NOT NULL DEFAULT 'issued' CONSTRAINT api_tokens_origin_check
                                CHECK (origin IN ('issued', 'owner_env')),
    ADD COLUMN last_used_at timestamptz NULL,
    ADD COLUMN revoked_at   timestamptz NULL;

-- Ids of the tokens that exist already: UUIDv7 from their creation time (the 48-bit
-- millisecond timestamp over a random UUID, version bits set to 7), so that they sort
-- like the ids of newer tokens.
UPDATE api_tokens
SET id = encode(
    set_bit(
        set_bit(
            overlay(
                uuid_send(gen_random_uuid())
                PLACING substring(int8send(floor(extract(epoch FROM created_at) * 1000)::bigint)
                    FROM 3)
                FROM 1 FOR 6
            ),
            52, 1
        ),
        53, 1
    ),
    'hex'
)::uuid;

ALTER TABLE api_tokens ALTER COLUMN id SET NOT NULL;
ALTER TABLE api_tokens ADD CONSTRAINT api_tokens_id_key UNIQUE (id);

-- One row per administrative change, newest last. before and after are the changed
-- value as text (a grant's level), absent where there is none (a new or revoked token).
CREATE TABLE audit_changes (
    id         uuid PRIMARY KEY,
    actor_id   uuid NOT NULL REFERENCES principals (id),
    action     text NOT NULL,
    -- the grant or token the change is about (no foreign key: a deleted grant's history
    -- stays)
    subject_id uuid NOT NULL,
    before     text NULL,
    after      text NULL,
    at         timestamptz NOT NULL
);

CREATE INDEX audit_changes_subject_idx ON audit_changes (subject_id, id);
