//! The statements of the store for one table, and what makes them safe to build from a name:
//! the table name's check, identifier quoting, and durations as capped milliseconds.

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
}

/// The columns of the claim function's row `c`, in the order [`PostgresStore::claim`] and
/// [`decode`] read them: `state` there is already `unknown` for a running row whose lease ran
/// out, and `expires_at` the lease deadline of a running row.
///
/// The function is called in a select list (`SELECT f(…) AS c OFFSET 0`: once, `OFFSET 0`
/// keeps the subquery from being flattened, which would call it once per column) rather than
/// in `FROM`: a function scan builds the function's result type from its 15 `OUT` parameters
/// at the start of every execution, even when the settled read answers and the function is
/// never called. Measured on the server with callgrind (single-user backend, 1,000 prepared
/// executions of a replay): 262k instructions per execution in `FROM`, 248k in the select list.
pub(super) const CALLED_COLUMNS: &str = "(c).won, (c).took_over, (c).state, (c).owner, (c).fingerprint, \
     (c).started_at, (c).expires_at, (c).settled_at, (c).result, (c).error, (c).scope, \
     (c).tool, (c).detail, (c).first_started_at, (c).attempts";

/// The state of a row as the store reports it: `unknown` is a running row whose lease ran out.
pub(super) const STATE: &str =
    "(CASE WHEN state = 'running' AND lease_until <= now() THEN 'unknown' ELSE state END)";

/// The columns of an entry read from the table, in the order [`decode`] reads them (the same
/// as [`CALLED_COLUMNS`], after `won` and `took_over`).
pub(super) const ENTRY_COLUMNS: &str = "(CASE WHEN state = 'running' AND lease_until <= now() \
     THEN 'unknown' ELSE state END), owner, fingerprint, started_at, \
     (CASE WHEN state = 'running' THEN lease_until ELSE expires_at END), settled_at, \
     result::text, error::text, scope, tool, detail, first_started_at, attempts";

/// How many expired rows one purge statement deletes: batches keep each transaction short.
pub(super) const PURGE_BATCH: i64 = 10_000;

/// The fence of every owner's write: the entry is still running (its lease live or run out,
/// that is `unknown`), held by this owner, and not past its final expiry. A takeover installs
/// another token, so only an owner nobody replaced can still settle: the tool did run, and
/// recording what it did beats leaving the entry `unknown`.
pub(super) const FENCE: &str =
    "key = $1 AND state = 'running' AND owner = $2 AND expires_at > now()";

/// The fence of an operator's settle, its parameters numbered from `$n`: the entry is running
/// or `unknown` and the attempt seen (`$n` its owner, NULL for none; `$n+1` its attempts), and
/// its lease has passed unless `$n+2` (forced) is true.
fn seen_fence(n: usize) -> String {
    format!(
        "key = $1 AND state = 'running' AND expires_at > now() \
         AND owner IS NOT DISTINCT FROM ${n}::text AND attempts = ${}::integer \
         AND (${}::boolean OR lease_until <= now())",
        n + 1,
        n + 2
    )
}

impl Sql {
    pub(super) fn new(table: &str) -> Sql {
        let t = quote(table);
        let claim = quote(&format!("{table}_claim"));
        let lease = "now() + $3::bigint * interval '1 millisecond'";
        let retention = "now() + $4::bigint * interval '1 millisecond'";
        Sql {
            claim: format!(
                "(SELECT false, false, state, owner, fingerprint, started_at, expires_at, \
                 settled_at, result::text, error::text, scope, tool, detail, first_started_at, \
                 attempts FROM {t} WHERE key = $1 AND expires_at > now() AND state <> 'running') \
                 UNION ALL \
                 (SELECT {CALLED_COLUMNS} FROM (SELECT {claim}(\
                 $1, $2, $3, $4::bigint, $5::bigint, $6::boolean, $7, $8, $9) AS c OFFSET 0) AS called) \
                 LIMIT 1"
            ),
            // The lease moves, and the final expiry with it: `expires_at - lease_until` is the
            // retention the claim asked for (the `SET` reads the row's old values).
            renew: format!(
                "UPDATE {t} SET lease_until = {lease}, \
                 expires_at = {lease} + (expires_at - lease_until) WHERE {FENCE}"
            ),
            complete: format!(
                "UPDATE {t} SET state = 'done', owner = NULL, lease_until = NULL, \
                 result = $3::text::json, settled_at = now(), expires_at = {retention} \
                 WHERE {FENCE}"
            ),
            fail_sticky: format!(
                "UPDATE {t} SET state = 'failed', owner = NULL, lease_until = NULL, \
                 error = $3::text::json, settled_at = now(), expires_at = {retention} \
                 WHERE {FENCE}"
            ),
            fail_delete: format!("DELETE FROM {t} WHERE {FENCE}"),
            get: format!("SELECT {ENTRY_COLUMNS} FROM {t} WHERE key = $1 AND expires_at > now()"),
            // `key > $1` with '' for the first page keeps one plan that walks the primary key
            // in order; the filters are checked on the rows it visits.
            list: format!(
                "SELECT key, {ENTRY_COLUMNS} FROM {t} \
                 WHERE key > $1 AND expires_at > now() AND ($2::text IS NULL OR {STATE} = $2) \
                 AND ($4::text IS NULL OR scope = $4) AND ($5::text IS NULL OR tool = $5) \
                 ORDER BY key LIMIT $3"
            ),
            delete: format!("DELETE FROM {t} WHERE key = $1 RETURNING expires_at > now()"),
            // Each row by its own expiry, through the `expires_at` index. Rows locked by a
            // claim taking them over are skipped rather than waited for.
            purge: format!(
                "DELETE FROM {t} WHERE key IN (\
                 SELECT key FROM {t} WHERE expires_at <= now() \
                 LIMIT $1 FOR UPDATE SKIP LOCKED)"
            ),
            resolve_done: format!(
                "UPDATE {t} SET state = 'done', owner = NULL, lease_until = NULL, \
                 result = $2::text::json, settled_at = now(), \
                 expires_at = now() + $3::bigint * interval '1 millisecond' WHERE {}",
                seen_fence(4)
            ),
            resolve_failed: format!(
                "UPDATE {t} SET state = 'failed', owner = NULL, lease_until = NULL, \
                 error = $2::text::json, settled_at = now(), \
                 expires_at = now() + $3::bigint * interval '1 millisecond' WHERE {}",
                seen_fence(4)
            ),
            resolve_release: format!("DELETE FROM {t} WHERE {}", seen_fence(2)),
            // An operator's removal of the settled entry it read, and no other: `$2` the state
            // seen (`done` or `failed`), `$3` its attempts, `$4` its start, `$5` its settling
            // time (NULL for none). A row deleted and claimed again since the read (running,
            // or settled anew at another time) matches nothing.
            remove_settled: format!(
                "DELETE FROM {t} WHERE key = $1 AND expires_at > now() AND state = $2 \
                 AND attempts = $3::integer AND started_at = $4::timestamptz \
                 AND settled_at IS NOT DISTINCT FROM $5::timestamptz"
            ),
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
}
