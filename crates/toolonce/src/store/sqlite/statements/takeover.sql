-- A takeover of an unknown entry: a new owner and lease, one more attempt (an unknown count, 0,
-- stays unknown), the first start, what the entry is and its fingerprint kept. ?1 key, ?2 new
-- owner, ?3 now, ?4 lease deadline, ?5 lease deadline plus retention.
UPDATE toolonce_entries
SET owner = ?2, started_at = ?3, lease_until = ?4, kept_until = ?5,
    attempts = CASE WHEN attempts = 0 THEN 0 ELSE attempts + 1 END
WHERE key = ?1 AND state = 'running' AND lease_until <= ?3 AND kept_until > ?3
