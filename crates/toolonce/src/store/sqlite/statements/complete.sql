-- Records a result: ?1 key, ?2 owner, ?3 result JSON, ?4 now, ?5 retention end. The fence is
-- the owner, not the lease: an owner whose lease ran out and whom nobody took over still
-- records what its tool did.
-- The owner stays: which attempt settled the row, what a removal compares (remove_settled.sql).
UPDATE toolonce_entries SET state = 'done', lease_until = NULL, payload = ?3,
    settled_at = ?4, kept_until = ?5
WHERE key = ?1 AND state = 'running' AND owner = ?2 AND kept_until > ?4
