//! The statements the store runs, private to it (no benchmark or other crate uses them: the
//! CLI's raw SQLite floor writes its own SQL). Each is a file of `statements/`, the one source
//! of the store's SQL: the TypeScript package embeds the same files (typescript/scripts/
//! artifacts.js), so both implementations run the same text. Each file's top names its
//! parameters (`?N`, which rusqlite and node:sqlite both bind by number).
//!
//! Every write runs between [`BEGIN`] and [`COMMIT`]: `BEGIN IMMEDIATE` takes the database's
//! write lock up front (waiting up to the busy timeout for another connection or process to
//! release it), so nothing else can write between the statements of one operation, and the
//! clock is read only once the lock is held (a wait for the lock cannot make `now` stale).
//!
//! A row counts as absent once `kept_until <= now` (see the schema); a `running` row whose
//! `lease_until <= now` is `unknown`. Every `SELECT` returns the same columns in the same order,
//! which the store decodes by position.

/// Takes the write lock for the operation's transaction.
pub(super) const BEGIN: &str = include_str!("statements/begin.sql");
/// Begins the inline writer's claim, a read that becomes a write only when the row does not
/// answer it (see `claim_inline`).
pub(super) const BEGIN_DEFERRED: &str = include_str!("statements/begin_deferred.sql");
/// Ends it.
pub(super) const COMMIT: &str = include_str!("statements/commit.sql");
/// Undoes a transaction that did not commit.
pub(super) const ROLLBACK: &str = include_str!("statements/rollback.sql");
/// Opens one write of a batch that commits together (see `group_commit`).
pub(super) const SAVEPOINT: &str = include_str!("statements/savepoint.sql");
/// Keeps it, for the batch's commit.
pub(super) const RELEASE_SAVEPOINT: &str = include_str!("statements/release_savepoint.sql");
/// Undoes it alone, the batch's transaction left open.
pub(super) const ROLLBACK_SAVEPOINT: &str = include_str!("statements/rollback_savepoint.sql");

/// The live entry of a key.
pub(super) const SELECT_LIVE: &str = include_str!("statements/select_live.sql");
/// The decisive statement of a claim; the number of changed rows (1 or 0) says whether it won.
pub(super) const CLAIM: &str = include_str!("statements/claim.sql");
/// A claim re-sent with the token that holds the entry, live or `unknown`.
pub(super) const RECLAIM_OWN: &str = include_str!("statements/reclaim_own.sql");
/// A takeover of an `unknown` entry.
pub(super) const TAKEOVER: &str = include_str!("statements/takeover.sql");
/// Extends the lease of a running (or `unknown`) entry the caller holds.
pub(super) const RENEW: &str = include_str!("statements/renew.sql");
/// Records a result, fenced on the owner.
pub(super) const COMPLETE: &str = include_str!("statements/complete.sql");
/// Records a permanent error, same parameters as [`COMPLETE`].
pub(super) const FAIL_STICKY: &str = include_str!("statements/fail_sticky.sql");
/// Drops an owned entry after a transient error.
pub(super) const FAIL_DELETE: &str = include_str!("statements/fail_delete.sql");
/// An operator settles the `running` or `unknown` entry it saw.
pub(super) const RESOLVE_SETTLE: &str = include_str!("statements/resolve_settle.sql");
/// An operator forgets the `running` or `unknown` entry it saw.
pub(super) const RESOLVE_RELEASE: &str = include_str!("statements/resolve_release.sql");
/// An operator deletes the settled entry it read, and no other (`toolonce rm`).
pub(super) const REMOVE_SETTLED: &str = include_str!("statements/remove_settled.sql");
/// Deletes a key whatever its state, saying whether its row was live.
pub(super) const DELETE: &str = include_str!("statements/delete.sql");
/// Deletes a batch of rows no longer kept (never an `unknown` one within its retention).
pub(super) const PURGE: &str = include_str!("statements/purge.sql");
/// How many expired rows one purge transaction deletes (as PostgreSQL's; a few more where rows
/// share the batch's last millisecond): the write lock is free between batches, so writers of
/// every process get it while a large purge runs.
pub(super) const PURGE_BATCH: i64 = 10_000;
/// A page of live entries.
pub(super) const LIST: &str = include_str!("statements/list.sql");
/// How many live entries are in each state, and the oldest unknown one's wait.
pub(super) const CENSUS: &str = include_str!("statements/census.sql");

/// Moves the WAL's committed pages into the database file, waiting for no reader.
pub(super) const WAL_CHECKPOINT: &str = include_str!("statements/wal_checkpoint.sql");
/// The same for the whole WAL, waiting for readers, so that the next write restarts the log.
pub(super) const WAL_CHECKPOINT_RESTART: &str =
    include_str!("statements/wal_checkpoint_restart.sql");

/// The file's application id.
pub(super) const APPLICATION_ID: &str = include_str!("statements/application_id.sql");
/// Sets it: `{{id}}` to fill.
pub(super) const SET_APPLICATION_ID: &str = include_str!("statements/set_application_id.sql");
/// The file's schema version.
pub(super) const USER_VERSION: &str = include_str!("statements/user_version.sql");
/// Sets it: `{{version}}` to fill.
pub(super) const SET_USER_VERSION: &str = include_str!("statements/set_user_version.sql");

/// `statement` with its one placeholder `{{name}}` filled with a number (a `PRAGMA` takes no
/// bound parameter).
pub(super) fn with_number(statement: &str, name: &str, value: i64) -> String {
    let filled = statement.replace(&format!("{{{{{name}}}}}"), &value.to_string());
    debug_assert!(!filled.contains("{{"), "a placeholder left in {statement}");
    filled
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_prepares_against_the_schema() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(include_str!("migrations/002_entries.sql"))
            .unwrap();
        for text in [
            SELECT_LIVE,
            CLAIM,
            RECLAIM_OWN,
            TAKEOVER,
            RENEW,
            COMPLETE,
            FAIL_STICKY,
            FAIL_DELETE,
            RESOLVE_SETTLE,
            RESOLVE_RELEASE,
            REMOVE_SETTLED,
            DELETE,
            PURGE,
            LIST,
            APPLICATION_ID,
            USER_VERSION,
        ] {
            conn.prepare(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        }
        conn.execute_batch(&with_number(SET_APPLICATION_ID, "id", 7))
            .unwrap();
        let id: i64 = conn.query_row(APPLICATION_ID, [], |r| r.get(0)).unwrap();
        assert_eq!(id, 7);
    }
}
