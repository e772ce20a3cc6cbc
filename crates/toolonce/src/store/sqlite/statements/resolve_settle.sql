-- An operator settles the running or unknown entry it saw (the store has judged it in the same
-- transaction): ?1 key, ?2 the new state (done or failed), ?3 payload JSON, ?4 now, ?5
-- retention end, ?6 the owner seen (IS: NULL matches a row without one), ?7 the attempts seen.
-- A settled, absent or other attempt's row matches nothing.
-- The owner stays: which attempt settled the row, what a removal compares (remove_settled.sql).
UPDATE toolonce_entries SET state = ?2, lease_until = NULL, payload = ?3,
    settled_at = ?4, kept_until = ?5
WHERE key = ?1 AND state = 'running' AND kept_until > ?4 AND owner IS ?6 AND attempts = ?7
