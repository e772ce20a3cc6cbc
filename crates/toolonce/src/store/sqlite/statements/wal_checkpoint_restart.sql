-- Moves the rest of the WAL into the database file and waits (up to the busy timeout) until no
-- reader uses the log, so that the next write starts the log again from its beginning. A
-- passive checkpoint never does that while writes go on (each finds frames appended since it
-- began), and the log then grows for as long as they do (checkpoint.rs).
PRAGMA wal_checkpoint(RESTART)
