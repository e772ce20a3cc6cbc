-- An operator forgets the running or unknown entry it saw, so the next call runs: ?1 key, ?2
-- now, ?3 the owner seen, ?4 the attempts seen.
DELETE FROM toolonce_entries
WHERE key = ?1 AND state = 'running' AND kept_until > ?2 AND owner IS ?3 AND attempts = ?4
