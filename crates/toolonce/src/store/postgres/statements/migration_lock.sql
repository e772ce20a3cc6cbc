-- The advisory lock that serializes migrations across processes, held to the transaction's
-- end: $1 the lock ("toolonce" in ASCII as a big-endian bigint).
SELECT pg_advisory_xact_lock($1::bigint)
