-- Extends the lease of a running (or unknown) entry the caller holds, keeping the row as long
-- after the new lease as it was after the old one (saturating at the largest 64-bit integer):
-- ?1 key, ?2 owner, ?3 new lease deadline, ?4 now.
UPDATE toolonce_entries SET lease_until = ?3,
    kept_until = CASE WHEN kept_until - lease_until > 9223372036854775807 - ?3
        THEN 9223372036854775807 ELSE ?3 + (kept_until - lease_until) END
WHERE key = ?1 AND state = 'running' AND owner = ?2 AND kept_until > ?4
