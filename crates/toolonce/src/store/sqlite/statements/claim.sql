-- The decisive statement of a claim: ?1 key, ?2 owner, ?3 fingerprint, ?4 now, ?5 lease
-- deadline, ?6 when the row stops being kept (the lease deadline plus the retention), ?7 scope,
-- ?8 tool, ?9 detail. It inserts a running row (first attempt, started now) if the key has none,
-- overwrites the row if it is no longer kept, and leaves a kept row (running, unknown or
-- settled) alone; the number of changed rows (1 or 0) says which. (RETURNING would not help: it
-- returns no row in exactly the case where the row is needed, when the DO UPDATE's WHERE is
-- false.)
INSERT INTO toolonce_entries
    (key, state, owner, fingerprint, started_at, lease_until, kept_until, settled_at, payload,
     scope, tool, detail, first_started_at, attempts)
VALUES (?1, 'running', ?2, ?3, ?4, ?5, ?6, NULL, NULL, ?7, ?8, ?9, ?4, 1)
ON CONFLICT (key) DO UPDATE SET state = 'running', owner = excluded.owner,
    fingerprint = excluded.fingerprint, started_at = excluded.started_at,
    lease_until = excluded.lease_until, kept_until = excluded.kept_until, settled_at = NULL,
    payload = NULL, scope = excluded.scope, tool = excluded.tool, detail = excluded.detail,
    first_started_at = excluded.first_started_at, attempts = 1
WHERE toolonce_entries.kept_until <= ?4
