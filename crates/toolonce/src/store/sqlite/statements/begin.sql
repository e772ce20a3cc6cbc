-- Takes the write lock for an operation's transaction up front (waiting up to the busy timeout
-- for another connection or process to release it), so nothing else writes between the
-- statements of one operation, and the clock is read only once the lock is held.
BEGIN IMMEDIATE
