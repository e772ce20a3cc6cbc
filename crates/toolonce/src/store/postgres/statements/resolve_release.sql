-- An operator forgets the running or unknown entry it saw, so the next call runs: $1 key, $2
-- the owner seen (NULL for none), $3 its attempts, $4 forced (else its lease must have passed).
-- Placeholder: table.
DELETE FROM {{table}} WHERE key = $1 AND state = 'running' AND expires_at > now()
    AND owner IS NOT DISTINCT FROM $2::text AND attempts = $3::integer
    AND ($4::boolean OR lease_until <= now())
