-- The setup of the world (the owner, the demo world) is one process at a time (ADR 0041):
-- a session advisory lock on a connection of its own, held while the setup runs and
-- given back with the connection, also when the process dies.

-- Waits until no other process sets the world up, then holds the lock for the session.
-- name: TakeWorldSetupLock :exec
SELECT pg_advisory_lock(sqlc.arg(lock_key)::bigint);
