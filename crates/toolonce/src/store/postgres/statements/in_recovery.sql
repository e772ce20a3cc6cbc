-- Whether the server is a hot standby, which refuses every write: a store is refused on one.
SELECT pg_is_in_recovery()
