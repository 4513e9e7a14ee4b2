-- Serializes migrators: every migration transaction takes it first.
-- name: TakeMigrationLock :exec
SELECT pg_advisory_xact_lock(sqlc.arg(lock_key)::bigint);

-- name: SchemaMigrationsExists :one
SELECT (to_regclass('schema_migrations') IS NOT NULL)::boolean AS present;

-- name: ListAppliedMigrations :many
SELECT version, checksum, applied_at FROM schema_migrations ORDER BY version;

-- name: RecordMigration :exec
INSERT INTO schema_migrations (version, checksum) VALUES (sqlc.arg(version), sqlc.arg(checksum));
