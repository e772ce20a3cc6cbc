-- The live entry of a key: ?1 key, ?2 now (ms). A row counts as absent once kept_until <= now.
-- Every SELECT of the store returns these columns in this order.
SELECT key, state, owner, fingerprint, started_at, lease_until, kept_until, settled_at, payload,
       scope, tool, detail, first_started_at, attempts
FROM toolonce_entries WHERE key = ?1 AND kept_until > ?2
