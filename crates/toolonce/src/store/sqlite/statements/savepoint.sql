-- Opens a write of its own inside a transaction that already holds the write lock: a batch of
-- writes committed together (group commit), where each write must be undone alone if it fails.
SAVEPOINT toolonce_write
