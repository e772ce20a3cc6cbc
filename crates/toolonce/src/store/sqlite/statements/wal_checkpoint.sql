-- Moves committed pages from the WAL into the database file, without waiting for a reader
-- (the Rust store runs it every few hundred commits, checkpoint.rs, while writes go on).
PRAGMA wal_checkpoint(PASSIVE)
