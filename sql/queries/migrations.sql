-- Serializes migrators: every migration transaction takes it first.
-- name: TakeMigrationLock :exec
SELECT pg_advisory_xact_lock(sqlc.arg(lock_key)::bigint);

-- name: SchemaMigrationsExists :one
SELECT (to_regclass('schema_migrations') IS NOT NULL)::boolean AS present;

-- name: ListAppliedMigrations :many
SELECT version, checksum, applied_at FROM schema_migrations ORDER BY version;

-- name: RecordMigration :exec
INSERT INTO schema_migrations (version, checksum) VALUES (sqlc.arg(version), sqlc.arg(checksum));

-- After a restore into another cluster the transaction id counter is behind the events:
-- raise the seq offset above them (migration 0011, ADR 0038). Under the migration lock.
-- name: AlignEventSeqs :one
SELECT turnkeeper_align_event_seqs()::bigint AS raised;

-- Whether every transaction id still to come derives seqs above the last event (false
-- for a restored database that was not migrated since). Read-only.
-- name: EventSeqsAligned :one
SELECT (turnkeeper_event_xid_shortfall() <= 0)::boolean AS aligned;
