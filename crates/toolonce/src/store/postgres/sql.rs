//! The statements of the store for one table (the files of `statements/`, rendered for the
//! table), and what makes them safe to build from a name: the table name's check, identifier
//! quoting, and durations as capped milliseconds.

use std::time::Duration;

use deadpool_postgres::tokio_postgres::types::private::BytesMut;
use deadpool_postgres::tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

use crate::{Error, Result};

use super::constants::{MAX_MILLIS, MAX_TABLE_NAME, VERSION_TABLE};

/// The statements of the store for one table, prepared once per connection.
pub(super) struct Sql {
    /// `claim` calls the PL/pgSQL function of the migration. It is atomic, and never reports a
    /// win without the entry written, because:
    ///
    /// - The caller wins only through its own `INSERT … ON CONFLICT DO UPDATE … WHERE expired`
    ///   returning the row it wrote. The primary key makes concurrent inserts of one key
    ///   conflict, and `ON CONFLICT DO UPDATE` locks the conflicting row and checks the `WHERE`
    ///   on its newest committed version, so of any number of concurrent claimers exactly one
    ///   inserts (or takes over the expired row) and every other one sees that row.
    /// - A loser returns a row that it read, live, with a snapshot taken inside the same call.
    ///   When the upsert finds a live row that its snapshot missed (committed concurrently: the
    ///   anomaly of reading through a CTE, whose plain `SELECT` uses the statement's snapshot),
    ///   the loop reads again; each statement of a `VOLATILE` function under `READ COMMITTED`
    ///   takes a new snapshot, which sees that committed row. The upsert still holds the row's
    ///   lock, so it cannot vanish in between; and both checks use the same `now()`, so the
    ///   second read finds it live. A row that vanishes before the upsert (a transient failure
    ///   deleted it) makes the upsert insert: the caller wins with its row written, never by
    ///   assuming.
    /// - A duplicate of a live entry (the common replay) is a read only: no row lock, no
    ///   transaction id, no WAL, no commit flush, so duplicates do not queue behind each other
    ///   on the row. An upsert that always updates would also be atomic, but would write a
    ///   new row version and flush a commit for every replay.
    /// - The two writes to a live running row (the caller's own entry renewed; an `unknown`
    ///   one taken over) are `UPDATE`s fenced on what the read saw (the owner, the state, the
    ///   lease run out), re-checked by PostgreSQL on the newest row version after any wait for
    ///   its lock. Of concurrent takers of one `unknown` entry the first installs its token
    ///   and a live lease, so the others' fences match nothing, and they loop to read the
    ///   winner's entry, live, as losers.
    ///
    /// The statement first reads a settled live row with a plain `SELECT` (`UNION ALL … LIMIT
    /// 1`: the function is called only when that finds nothing). A settled row only ever goes
    /// away (expiry, delete), so answering it from the statement's snapshot is what the
    /// function would answer; it spares the common replay the PL/pgSQL call, which costs the
    /// server about as much again as the read (measured with pgbench: 8.7–10.4k against
    /// 15.1–16.5k statements/s on one connection). A first-time claim pays one more index
    /// lookup.
    pub(super) claim: String,
    pub(super) renew: String,
    pub(super) complete: String,
    pub(super) fail_sticky: String,
    pub(super) fail_delete: String,
    pub(super) get: String,
    pub(super) list: String,
    pub(super) delete: String,
    pub(super) purge: String,
    pub(super) resolve_done: String,
    pub(super) resolve_failed: String,
    pub(super) resolve_release: String,
    pub(super) remove_settled: String,
    pub(super) census: String,
}

/// How many expired rows one purge statement deletes: batches keep each transaction short.
pub(super) const PURGE_BATCH: i64 = 10_000;

/// The statements' files (`statements/*.sql`, each file's top names its parameters and
/// placeholders): the one source of the store's SQL, which the TypeScript package embeds too
/// (typescript/scripts/artifacts.js).
mod text {
    pub(super) const CLAIM: &str = include_str!("statements/claim.sql");
    pub(super) const RENEW: &str = include_str!("statements/renew.sql");
    pub(super) const COMPLETE: &str = include_str!("statements/complete.sql");
    pub(super) const FAIL_STICKY: &str = include_str!("statements/fail_sticky.sql");
    pub(super) const FAIL_DELETE: &str = include_str!("statements/fail_delete.sql");
    pub(super) const GET: &str = include_str!("statements/get.sql");
    pub(super) const LIST: &str = include_str!("statements/list.sql");
    pub(super) const DELETE: &str = include_str!("statements/delete.sql");
    pub(super) const PURGE: &str = include_str!("statements/purge.sql");
    pub(super) const RESOLVE_DONE: &str = include_str!("statements/resolve_done.sql");
    pub(super) const RESOLVE_FAILED: &str = include_str!("statements/resolve_failed.sql");
    pub(super) const RESOLVE_RELEASE: &str = include_str!("statements/resolve_release.sql");
    pub(super) const REMOVE_SETTLED: &str = include_str!("statements/remove_settled.sql");
    pub(super) const CENSUS: &str = include_str!("statements/census.sql");
    /// The columns `row::decode` reads, by position.
    pub(super) const ENTRY_COLUMNS: &str = include_str!("statements/entry_columns.sql");
}

/// The schema's statements, placeholder `{{version_table}}` to fill.
pub(super) mod schema_text {
    pub(crate) const MIGRATION_LOCK: &str = include_str!("statements/migration_lock.sql");
    pub(crate) const CREATE_VERSION_TABLE: &str =
        include_str!("statements/create_version_table.sql");
    pub(crate) const READ_VERSION: &str = include_str!("statements/read_version.sql");
    pub(crate) const WRITE_VERSION: &str = include_str!("statements/write_version.sql");
    /// The version unlocked, for a caller that only reads it.
    pub(crate) const SCHEMA_VERSION: &str = include_str!("statements/schema_version.sql");
    /// Whether the server is a hot standby (no placeholder).
    pub(crate) const IN_RECOVERY: &str = include_str!("statements/in_recovery.sql");
}

/// A fragment of a statement (a column list) without its comment lines, to put in place of a
/// placeholder.
fn fragment(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("--")).collect();
    lines.join(" ").trim().to_string()
}

/// A statement's file with its placeholders for `table` filled in: `{{table}}`, `{{claim}}` (the
/// claim function) and `{{entry_columns}}`.
fn render(text: &str, table: &str, columns: &str) -> String {
    let filled = text
        .replace("{{table}}", &quote(table))
        .replace("{{claim}}", &quote(&format!("{table}_claim")))
        .replace("{{entry_columns}}", columns);
    debug_assert!(!filled.contains("{{"), "a placeholder left in {text}");
    filled
}

impl Sql {
    pub(super) fn new(table: &str) -> Sql {
        let columns = fragment(text::ENTRY_COLUMNS);
        let r = |text: &str| render(text, table, &columns);
        Sql {
            claim: r(text::CLAIM),
            renew: r(text::RENEW),
            complete: r(text::COMPLETE),
            fail_sticky: r(text::FAIL_STICKY),
            fail_delete: r(text::FAIL_DELETE),
            get: r(text::GET),
            list: r(text::LIST),
            delete: r(text::DELETE),
            purge: r(text::PURGE),
            resolve_done: r(text::RESOLVE_DONE),
            resolve_failed: r(text::RESOLVE_FAILED),
            resolve_release: r(text::RESOLVE_RELEASE),
            remove_settled: r(text::REMOVE_SETTLED),
            census: r(text::CENSUS),
        }
    }

    pub(super) fn all(&self) -> impl Iterator<Item = &str> {
        [
            &self.claim,
            &self.renew,
            &self.complete,
            &self.fail_sticky,
            &self.fail_delete,
            &self.get,
            &self.list,
            &self.delete,
            &self.purge,
            &self.resolve_done,
            &self.resolve_failed,
            &self.resolve_release,
            &self.remove_settled,
            &self.census,
        ]
        .into_iter()
        .map(String::as_str)
    }

    /// The place of one of these statements in [`all`](Self::all), found by address: the
    /// operations pass the texts of this very struct, so no text is read or compared.
    pub(super) fn slot(&self, text: &str) -> Option<usize> {
        self.all()
            .position(|s| std::ptr::eq(s.as_ptr(), text.as_ptr()) && s.len() == text.len())
    }
}

/// Checks a table name: 1 to [`MAX_TABLE_NAME`] ASCII letters, digits and underscores, not
/// starting with a digit, and not the version table. With that alphabet the quoted identifier
/// needs no escaping, and no name can smuggle SQL.
pub(super) fn check_table_name(name: &str) -> Result<()> {
    let bad = |why: &str| Err(Error::Config(format!("invalid table name {name:?}: {why}")));
    if name.is_empty() || name.len() > MAX_TABLE_NAME {
        return bad(&format!("use 1 to {MAX_TABLE_NAME} characters"));
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return bad("use only ASCII letters, digits and underscores");
    }
    if name.as_bytes()[0].is_ascii_digit() {
        return bad("it must not start with a digit");
    }
    if name.eq_ignore_ascii_case(VERSION_TABLE) {
        return bad("that name is taken by the schema version table");
    }
    Ok(())
}

/// Quotes a checked identifier (see [`check_table_name`]: nothing inside needs escaping, but a
/// doubled quote is still the rule).
pub(super) fn quote(identifier: &str) -> String {
    format!("\"{}\"", identifier.replace('"', "\"\""))
}

/// Durations as whole milliseconds for the database, capped at [`MAX_MILLIS`].
pub(super) fn millis(d: Duration) -> i64 {
    i64::try_from(crate::store::contract::millis(d))
        .unwrap_or(i64::MAX)
        .min(MAX_MILLIS)
}

/// A text parameter already known to be ASCII (a key, a fingerprint), sent as its bytes.
/// `&str`'s own encoding looks the parameter's type up by name (for `ltree`) on every call,
/// and `as_str` checks the bytes as UTF-8 first: about 190 instructions per parameter under
/// callgrind, twice in a claim and once in each settle. The bytes on the wire are the same.
#[derive(Debug)]
pub(super) struct Ascii<'a>(pub(super) &'a [u8]);

impl ToSql for Ascii<'_> {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(self.0);
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        matches!(*ty, Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME)
    }

    to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::postgres::SCHEMA_VERSION;
    use crate::store::postgres::schema::migration;

    #[test]
    fn table_names_are_checked_before_they_reach_sql() {
        for good in [
            "toolonce_entries",
            "T",
            "_x",
            "agent_ops_2",
            &"a".repeat(52),
        ] {
            assert!(check_table_name(good).is_ok(), "{good:?}");
        }
        for bad in [
            "",
            "1abc",
            "a-b",
            "a b",
            "a\"b",
            "x; DROP TABLE y",
            "schema.table",
            "é",
            "toolonce_schema",
            &"a".repeat(53),
        ] {
            assert!(
                matches!(check_table_name(bad), Err(Error::Config(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn durations_become_capped_milliseconds() {
        assert_eq!(millis(Duration::from_millis(1500)), 1500);
        assert_eq!(millis(Duration::MAX), MAX_MILLIS);
    }

    #[test]
    fn every_statement_names_the_quoted_table() {
        let sql = Sql::new("My_Table");
        for text in sql.all() {
            assert!(text.contains("\"My_Table"), "{text}");
        }
        for version in 1..=SCHEMA_VERSION {
            assert!(migration(version, "My_Table").contains("\"My_Table_claim\""));
        }
    }

    #[test]
    fn every_placeholder_of_every_statement_is_filled() {
        let sql = Sql::new("t");
        for text in sql.all() {
            assert!(!text.contains("{{"), "{text}");
        }
        assert!(
            sql.get.contains("first_started_at, attempts FROM"),
            "{}",
            sql.get
        );
        // The column list goes in without its comment, which would hide the rest of the line.
        let mut body = sql.get.lines().filter(|l| !l.starts_with("--"));
        assert!(body.all(|l| !l.contains("--")), "{}", sql.get);
    }
}
