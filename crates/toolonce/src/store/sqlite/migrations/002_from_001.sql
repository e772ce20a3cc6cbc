-- The migration of a version-1 SQLite toolonce database to version 2, run in the transaction
-- that holds the write lock (so two processes opening the file at once migrate it once); the
-- store then sets `PRAGMA user_version` to 2.
--
-- Placeholders, written in double braces below and replaced by the store (schema.rs) before the
-- statements run (named here without the braces, since a comment is replaced too):
--   schema_v2             the statements of 002_entries.sql, so a migrated file gets exactly
--                         the layout of a new one
--   migrated_retention_ms how long a migrated `running` row is kept as `unknown` after its
--                         lease, in milliseconds (a claim's default retention, 24 hours:
--                         version 1 recorded no retention for running entries)
--
-- The version-1 table is renamed aside, the version-2 table created, every row copied, the old
-- table and its index dropped. Settled rows keep their meaning (`expires_at` was their
-- retention end, now `kept_until`). A `running` row's `expires_at` was its lease: it becomes
-- the lease deadline, and the row is kept for the migrated retention after it, so a row whose
-- lease had already run out (its owner died before settling, or the row would not be running)
-- is now `unknown` instead of silently claimable: exactly the case the new state exists for.
-- A row whose lease ran out longer ago than that is past `kept_until` and stays absent. Times
-- saturate instead of overflowing.

ALTER TABLE toolonce_entries RENAME TO toolonce_entries_v1;

{{schema_v2}}

INSERT INTO toolonce_entries
    (key, state, owner, fingerprint, started_at, lease_until, kept_until, settled_at, payload)
SELECT key, state, owner, fingerprint, started_at,
       CASE WHEN state = 'running' THEN expires_at END,
       CASE WHEN state <> 'running' THEN expires_at
            WHEN expires_at > 9223372036854775807 - {{migrated_retention_ms}}
                THEN 9223372036854775807
            ELSE expires_at + {{migrated_retention_ms}} END,
       settled_at, payload
FROM toolonce_entries_v1;

DROP TABLE toolonce_entries_v1;
