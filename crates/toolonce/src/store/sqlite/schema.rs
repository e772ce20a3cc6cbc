//! The SQLite store's schema: the layout each version creates, and the migration of files
//! written by earlier versions. Kept apart from the statements because it changes for its own
//! reason (a new version), and because a migration must keep producing exactly the layout a new
//! file gets.

use rusqlite::Connection;

use super::error::sql_error;
use super::sql;
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
        .query_row(sql::APPLICATION_ID, [], |r| r.get(0))
        .map_err(err("read the application id"))?;
    let version: i64 = conn
        .query_row(sql::USER_VERSION, [], |r| r.get(0))
        .map_err(err("read the schema version"))?;
    match (application_id, version) {
        (0, 0) => {
            conn.execute_batch(SCHEMA_V2)
                .map_err(err("create the schema"))?;
            let set = sql::with_number(sql::SET_APPLICATION_ID, "id", APPLICATION_ID.into());
            conn.execute_batch(&set).map_err(err("create the schema"))?;
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
        let set = sql::with_number(sql::SET_USER_VERSION, "version", SCHEMA_VERSION);
        conn.execute_batch(&set)
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

    /// The opcodes SQLite compiles `statement` to on a database made by `schema`.
    fn opcodes(schema: &str, statement: &str) -> Vec<String> {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(schema).unwrap();
        let mut explain = conn.prepare(&format!("EXPLAIN {statement}")).unwrap();
        let parameters = explain.parameter_count();
        explain
            .query_map(
                rusqlite::params_from_iter(vec![None::<i64>; parameters]),
                |row| row.get::<_, String>(1),
            )
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    #[test]
    fn the_schema_refuses_a_state_it_does_not_know_and_a_lease_that_does_not_fit_it() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(SCHEMA_V2).unwrap();
        let insert = |state: &str, lease: Option<i64>| {
            conn.execute(
                "INSERT INTO toolonce_entries (key, state, started_at, lease_until, kept_until) \
                 VALUES (?1, ?2, 1, ?3, 2)",
                rusqlite::params![format!("{state}/{lease:?}"), state, lease],
            )
        };
        for (state, lease) in [("running", Some(5)), ("done", None), ("failed", None)] {
            insert(state, lease).unwrap_or_else(|e| panic!("{state} {lease:?}: {e}"));
        }
        for (state, lease) in [
            ("unknown", Some(5)),
            ("Done", None),
            ("", None),
            ("running", None),
            ("done", Some(5)),
        ] {
            let e = insert(state, lease).unwrap_err();
            assert!(
                e.to_string().contains("CHECK constraint failed"),
                "{state}: {e}"
            );
        }
    }

    #[test]
    fn no_write_of_the_store_builds_a_temporary_table_to_check_a_row() {
        use super::super::sql;
        let writes = [
            ("CLAIM", sql::CLAIM),
            ("RECLAIM_OWN", sql::RECLAIM_OWN),
            ("TAKEOVER", sql::TAKEOVER),
            ("RENEW", sql::RENEW),
            ("COMPLETE", sql::COMPLETE),
            ("FAIL_STICKY", sql::FAIL_STICKY),
            ("FAIL_DELETE", sql::FAIL_DELETE),
            ("RESOLVE_SETTLE", sql::RESOLVE_SETTLE),
            ("RESOLVE_RELEASE", sql::RESOLVE_RELEASE),
            ("PURGE", sql::PURGE),
            // Not `DELETE`: its `RETURNING` row is buffered in one (an operator's command, once
            // per call, and it checks no row).
        ];
        for (name, statement) in writes {
            let ops = opcodes(SCHEMA_V2, statement);
            assert!(
                ops.iter().any(|op| op == "Halt"),
                "{name} compiled: {ops:?}"
            );
            assert!(
                !ops.iter().any(|op| op == "OpenEphemeral"),
                "{name} builds a temporary table on every run (an `IN` list in a CHECK?): {ops:?}"
            );
        }
        // The form that did, so that this test keeps meaning something.
        let ops = opcodes(
            "CREATE TABLE t (s TEXT CHECK (s IN ('a', 'b', 'c')))",
            "UPDATE t SET s = 'a'",
        );
        assert!(ops.iter().any(|op| op == "OpenEphemeral"), "{ops:?}");
    }
}
