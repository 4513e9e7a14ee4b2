-- The ledger of applied migrations. Created before any migration runs (by
-- adapters/postgres/migrations.py, under the migration advisory lock), so it is not a
-- migration itself.
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    text PRIMARY KEY,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
