-- Records a permanent error, the parameters of complete.sql with the error JSON as ?3.
-- The owner stays: which attempt settled the row, what a removal compares (remove_settled.sql).
UPDATE toolonce_entries SET state = 'failed', lease_until = NULL, payload = ?3,
    settled_at = ?4, kept_until = ?5
WHERE key = ?1 AND state = 'running' AND owner = ?2 AND kept_until > ?4
