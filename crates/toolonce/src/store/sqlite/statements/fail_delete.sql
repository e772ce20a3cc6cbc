-- Drops an owned entry after a transient error: ?1 key, ?2 owner, ?3 now.
DELETE FROM toolonce_entries
WHERE key = ?1 AND state = 'running' AND owner = ?2 AND kept_until > ?3
