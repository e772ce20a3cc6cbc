-- The columns of an entry read by position with binary timestamps (the Rust store's decode,
-- row.rs): state (unknown for a running row whose lease ran out), owner, fingerprint,
-- started_at, the lease deadline of a running row or else the final expiry, settled_at, result,
-- error, scope, tool, detail, first_started_at, attempts. The same order as the claim's row
-- after won and took_over. Filled in for the placeholder entry_columns.
(CASE WHEN state = 'running' AND lease_until <= now() THEN 'unknown' ELSE state END), owner,
fingerprint, started_at, (CASE WHEN state = 'running' THEN lease_until ELSE expires_at END),
settled_at, result::text, error::text, scope, tool, detail, first_started_at, attempts
