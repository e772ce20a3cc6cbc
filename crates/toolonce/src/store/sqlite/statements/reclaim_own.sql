-- A claim re-sent with the token that holds the entry, live or unknown: renews the lease and
-- keeps the row at least as long as a new claim would. ?1 key, ?2 owner, ?3 lease deadline,
-- ?4 lease deadline plus retention.
UPDATE toolonce_entries
SET lease_until = ?3, kept_until = MAX(kept_until, ?4)
WHERE key = ?1 AND state = 'running' AND owner = ?2
