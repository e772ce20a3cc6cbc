-- Moves committed pages from the WAL into the database file, without waiting for a reader
-- (the Rust store runs it every few hundred commits, worker.rs, so the WAL stays short).
PRAGMA wal_checkpoint(PASSIVE)
