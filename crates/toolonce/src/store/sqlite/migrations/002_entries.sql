-- Schema version 2 of a SQLite toolonce database: the layout a new file gets, and the layout
-- 002_from_001.sql carries a version-1 file into (it runs these very statements). No
-- placeholders. The store runs it in the transaction that holds the write lock, then sets
-- `PRAGMA application_id` ("tool") and `PRAGMA user_version` (2); the file is SQLite's own
-- (`main`), so the table names are fixed.
--
-- Times are milliseconds since the Unix epoch, read from the system clock of the process that
-- writes them: SQLite is embedded, so every process sharing the file shares the machine's
-- clock.
--
-- - `kept_until` is when the row stops existing for every operation (it counts as absent
--   from then on, and its index lets `purge_expired` find it without a scan): the lease plus
--   the retention while `running` (so that a lease that runs out leaves the row `unknown` for
--   the retention), the retention once settled. Version 1 called the column `expires_at` and
--   meant the lease by it; the new name is also what makes a process of the older version
--   that still has the file open fail loudly ("no such column") instead of writing rows that
--   mean something else.
-- - `lease_until` is the lease deadline of a `running` row and `NULL` once settled. A
--   `running` row whose lease has passed is `unknown`: the state is derived from the clock, as
--   expiry is, so no write is needed when a lease runs out.
-- - `scope`, `tool`, `detail`: what the entry is (`About`), recorded by the claim that
--   created it; `first_started_at` and `attempts` count the attempts (a takeover adds one and
--   keeps the first start; `0` and `NULL` for rows migrated from version 1, which did not
--   know them); `settled_at` is when it became `done` or `failed`.
-- - `payload` is the result (`done`) or the `ToolError` (`failed`) as JSON text.
-- - The states are checked as `state = … OR …`, not `state IN (…)`: SQLite evaluates an `IN`
--   list of three or more constants by building a temporary b-tree of it on every insert and
--   update that sets `state`, which was about 40k of the 138k instructions of a first-time
--   write (claim and complete) under callgrind. Files made before keep the `IN` form, which
--   means the same.

CREATE TABLE toolonce_entries (
    key              TEXT PRIMARY KEY NOT NULL,
    state            TEXT NOT NULL CHECK (state = 'running' OR state = 'done' OR state = 'failed'),
    owner            TEXT,
    fingerprint      TEXT,
    started_at       INTEGER NOT NULL,
    lease_until      INTEGER CHECK ((state = 'running') = (lease_until IS NOT NULL)),
    kept_until       INTEGER NOT NULL,
    settled_at       INTEGER,
    payload          TEXT,
    scope            TEXT,
    tool             TEXT,
    detail           TEXT,
    first_started_at INTEGER,
    attempts         INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX toolonce_entries_kept_until ON toolonce_entries (kept_until);
