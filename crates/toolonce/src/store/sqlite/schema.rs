//! The SQLite store's schema: the layout each version creates, and the migration of files
//! written by earlier versions. Kept apart from the statements because it changes for its own
//! reason (a new version), and because a migration must keep producing exactly the layout a new
//! file gets.

use rusqlite::Connection;

use super::error::sql_error;
use super::transaction::Transaction;
use crate::store::contract::DEFAULT_UNKNOWN_RETENTION;
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

/// Schema version 2: the layout a new file gets (the file's top describes each column).
const SCHEMA_V2: &str = include_str!("migrations/002_entries.sql");

/// The migration from version 1 to 2, with its placeholders (see the file's top) to fill in.
const FROM_V1: &str = include_str!("migrations/002_from_001.sql");

/// The statements that carry a version-1 file to version 2: [`FROM_V1`] with the version-2
/// layout and [`MIGRATED_RETENTION_MS`] in place.
fn from_v1() -> String {
    FROM_V1.replace("{{schema_v2}}", SCHEMA_V2).replace(
        "{{migrated_retention_ms}}",
        &MIGRATED_RETENTION_MS.to_string(),
    )
}

/// Creates the schema in a new database, migrates an older one, checks it in an existing one.
/// Runs under the write lock, so two processes opening a file at once create or migrate it
/// once.
pub(super) fn migrate(conn: &Connection, path: &str) -> Result<()> {
    let err = |doing| move |e| sql_error(path, doing, e);
    let tx = Transaction::immediate(conn).map_err(err("read the schema version"))?;
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
            conn.execute_batch(&from_v1()).map_err(err(doing))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_migration_from_version_one_fills_every_placeholder() {
        let sql = from_v1();
        assert!(!sql.contains("{{"), "{sql}");
        // The layout is created after the old table is set aside, not in a comment's place.
        let aside = sql.find("RENAME TO toolonce_entries_v1").unwrap();
        assert!(
            sql.find("CREATE TABLE toolonce_entries").unwrap() > aside,
            "{sql}"
        );
        assert!(
            sql.contains("CREATE INDEX toolonce_entries_kept_until"),
            "{sql}"
        );
        assert!(
            sql.contains(&format!("expires_at + {MIGRATED_RETENTION_MS} END")),
            "{sql}"
        );
    }
}
