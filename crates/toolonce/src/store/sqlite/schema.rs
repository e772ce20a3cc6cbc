//! The SQLite store's schema: the layout each version creates, and the migration of files
//! written by earlier versions. Kept apart from the statements because it changes for its own
//! reason (a new version), and because a migration must keep producing exactly the layout a new
//! file gets.

use rusqlite::Connection;

use super::{Immediate, sql_error};
use crate::store::DEFAULT_UNKNOWN_RETENTION;
use crate::{Error, Result};

/// The schema version this build creates and understands, kept in `PRAGMA user_version`.
pub const SCHEMA_VERSION: i64 = 2;

/// `PRAGMA application_id` of a toolonce database (`"tool"` in ASCII), so that a file of another
/// program is refused instead of being mistaken for an old or new toolonce schema.
pub(super) const APPLICATION_ID: i32 = i32::from_be_bytes(*b"tool");

/// How long a `running` entry migrated from version 1 is kept as `unknown` after its lease:
/// version 1 did not record a retention for running entries, so they get a claim's default
/// ([`DEFAULT_UNKNOWN_RETENTION`], 24 hours).
pub(super) const MIGRATED_RETENTION_MS: i64 = DEFAULT_UNKNOWN_RETENTION.as_millis() as i64;

/// Schema version 2. Times are milliseconds since the Unix epoch, read from the system clock of
/// the process that writes them: SQLite is embedded, so every process sharing the file shares
/// the machine's clock.
///
/// - `kept_until` is when the row stops existing for every operation (it counts as absent
///   from then on, and its index lets `purge_expired` find it without a scan): the lease plus
///   the retention while `running` (so that a lease that runs out leaves the row `unknown` for
///   the retention), the retention once settled. Version 1 called the column `expires_at` and
///   meant the lease by it; the new name is also what makes a process of the older version
///   that still has the file open fail loudly ("no such column") instead of writing rows that
///   mean something else.
/// - `lease_until` is the lease deadline of a `running` row and `NULL` once settled. A
///   `running` row whose lease has passed is `unknown`: the state is derived from the clock, as
///   expiry is, so no write is needed when a lease runs out.
/// - `scope`, `tool`, `detail`: what the entry is (`About`), recorded by the claim that
///   created it; `first_started_at` and `attempts` count the attempts (a takeover adds one and
///   keeps the first start; `0` and `NULL` for rows migrated from version 1, which did not
///   know them); `settled_at` is when it became `done` or `failed`.
/// - `payload` is the result (`done`) or the `ToolError` (`failed`) as JSON text.
pub(super) const SCHEMA_V2: &str = "
CREATE TABLE toolonce_entries (
    key              TEXT PRIMARY KEY NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('running', 'done', 'failed')),
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
";

/// The migration from version 1 to 2 runs in the transaction that holds the write lock: the
/// version-1 table is renamed aside ([`V1_ASIDE`]), the version-2 table created exactly as in a
/// new file, every row copied ([`COPY_V1`]), the old table and its index dropped ([`DROP_V1`]).
/// Settled rows keep their meaning (`expires_at` was their retention end, now `kept_until`). A
/// `running` row's `expires_at` was its lease: it becomes the lease deadline, and the row is
/// kept for [`MIGRATED_RETENTION_MS`] after it, so a row whose lease had already run out (its
/// owner died before settling, or the row would not be running) is now `unknown` instead of
/// silently claimable: exactly the case the new state exists for. A row whose lease ran out
/// longer ago than that is past `kept_until` and stays absent. Times saturate instead of
/// overflowing.
const V1_ASIDE: &str = "ALTER TABLE toolonce_entries RENAME TO toolonce_entries_v1";

/// See [`V1_ASIDE`]: `?1` the retention of migrated running rows, in milliseconds.
const COPY_V1: &str = "
INSERT INTO toolonce_entries
    (key, state, owner, fingerprint, started_at, lease_until, kept_until, settled_at, payload)
SELECT key, state, owner, fingerprint, started_at,
       CASE WHEN state = 'running' THEN expires_at END,
       CASE WHEN state <> 'running' THEN expires_at
            WHEN expires_at > 9223372036854775807 - ?1 THEN 9223372036854775807
            ELSE expires_at + ?1 END,
       settled_at, payload
FROM toolonce_entries_v1";

/// See [`V1_ASIDE`].
const DROP_V1: &str = "DROP TABLE toolonce_entries_v1";

/// Creates the schema in a new database, migrates an older one, checks it in an existing one.
/// Runs under the write lock, so two processes opening a file at once create or migrate it
/// once.
pub(super) fn migrate(conn: &Connection, path: &str) -> Result<()> {
    let err = |doing| move |e| sql_error(path, doing, e);
    let tx = Immediate::begin(conn).map_err(err("read the schema version"))?;
    let application_id: i32 = conn
        .pragma_query_value(None, "application_id", |r| r.get(0))
        .map_err(err("read the application id"))?;
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(err("read the schema version"))?;
    match (application_id, version) {
        (0, 0) => {
            conn.execute_batch(SCHEMA_V2)
                .map_err(err("create the schema"))?;
            conn.pragma_update(None, "application_id", APPLICATION_ID)
                .map_err(err("create the schema"))?;
        }
        (APPLICATION_ID, 1) => {
            let doing = "migrate the schema from version 1 to 2";
            conn.execute_batch(V1_ASIDE).map_err(err(doing))?;
            conn.execute_batch(SCHEMA_V2).map_err(err(doing))?;
            conn.execute(COPY_V1, [MIGRATED_RETENTION_MS])
                .map_err(err(doing))?;
            conn.execute_batch(DROP_V1).map_err(err(doing))?;
        }
        (APPLICATION_ID, SCHEMA_VERSION) => {}
        (APPLICATION_ID, v) if v > SCHEMA_VERSION => {
            return Err(Error::Config(format!(
                "SQLite database {path} has schema version {v}, newer than this toolonce knows \
                 ({SCHEMA_VERSION}): upgrade toolonce"
            )));
        }
        (APPLICATION_ID, v) => {
            return Err(Error::Config(format!(
                "SQLite database {path} has schema version {v}, which no toolonce ever wrote"
            )));
        }
        (0, v) => {
            return Err(Error::Config(format!(
                "SQLite database {path} is not a toolonce database (it has user_version {v} \
                 but no toolonce application id)"
            )));
        }
        (other, _) => {
            return Err(Error::Config(format!(
                "SQLite database {path} belongs to another program (application_id {other:#x})"
            )));
        }
    }
    if version != SCHEMA_VERSION {
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(err("record the schema version"))?;
    }
    tx.commit().map_err(err("create the schema"))
}
