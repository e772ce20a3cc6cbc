-- An operator settles the running or unknown entry it saw as done: $1 key, $2 result JSON,
-- $3 retention ms, $4 the owner seen (NULL for none), $5 its attempts, $6 forced (else its
-- lease must have passed). Placeholder: table.
-- The owner stays: which attempt settled the row, what a removal compares (remove_settled.sql).
UPDATE {{table}} SET state = 'done', lease_until = NULL, result = $2::text::json,
    settled_at = now(), expires_at = now() + $3::bigint * interval '1 millisecond'
WHERE key = $1 AND state = 'running' AND expires_at > now()
    AND owner IS NOT DISTINCT FROM $4::text AND attempts = $5::integer
    AND ($6::boolean OR lease_until <= now())
