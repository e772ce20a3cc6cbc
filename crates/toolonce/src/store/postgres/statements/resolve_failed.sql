-- An operator settles the running or unknown entry it saw as failed: $1 key, $2 error JSON,
-- the other parameters as in resolve_done.sql. Placeholder: table.
-- The owner stays: which attempt settled the row, what a removal compares (remove_settled.sql).
UPDATE {{table}} SET state = 'failed', lease_until = NULL, error = $2::text::json,
    settled_at = now(), expires_at = now() + $3::bigint * interval '1 millisecond'
WHERE key = $1 AND state = 'running' AND expires_at > now()
    AND owner IS NOT DISTINCT FROM $4::text AND attempts = $5::integer
    AND ($6::boolean OR lease_until <= now())
