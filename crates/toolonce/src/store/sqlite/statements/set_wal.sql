-- WAL: readers and the writer do not block each other. (The Rust store retries it while the
-- file is busy, worker.rs.)
PRAGMA journal_mode = WAL
