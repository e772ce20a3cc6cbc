-- A page of live entries: ?1 keys after this one, ?2 now, ?3 state (running, unknown, done,
-- failed) or NULL for all, ?4 how many, ?5 scope or NULL, ?6 tool or NULL.
SELECT key, state, owner, fingerprint, started_at, lease_until, kept_until, settled_at, payload,
       scope, tool, detail, first_started_at, attempts
FROM toolonce_entries
WHERE key > ?1 AND kept_until > ?2
    AND (?3 IS NULL OR ?3 = CASE WHEN state = 'running' AND lease_until <= ?2
        THEN 'unknown' ELSE state END)
    AND (?5 IS NULL OR scope = ?5) AND (?6 IS NULL OR tool = ?6)
ORDER BY key LIMIT ?4
