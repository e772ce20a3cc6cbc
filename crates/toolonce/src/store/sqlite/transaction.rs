//! The transactions the store runs: `BEGIN IMMEDIATE`, which takes the database's write lock at
//! once (every write on a connection that may wait for the lock), `BEGIN` (deferred, the
//! inline writer's claim: a read that may turn into a write), and a rollback when either is
//! dropped uncommitted.

use rusqlite::Connection;

use super::sql;

/// An open transaction that rolls back when dropped uncommitted (after an error or a panic),
/// so the connection always returns to autocommit. The statements come from the statement
/// cache, unlike rusqlite's `Transaction`, which parses them each time.
pub(super) struct Transaction<'c> {
    conn: &'c Connection,
    open: bool,
}

impl<'c> Transaction<'c> {
    /// `BEGIN IMMEDIATE`: the write lock, taken now (waiting up to the busy timeout).
    pub(super) fn immediate(conn: &'c Connection) -> rusqlite::Result<Self> {
        Self::begin(conn, sql::BEGIN)
    }

    /// `BEGIN`: no lock until the first statement. Its first read takes a snapshot and its
    /// first write upgrades it to the write lock, which SQLite refuses at once with
    /// `SQLITE_BUSY` (no busy handler runs on an upgrade) when another connection holds the
    /// lock or has committed since the snapshot: the reads it made are then never written
    /// upon, and dropping it rolls back.
    pub(super) fn deferred(conn: &'c Connection) -> rusqlite::Result<Self> {
        Self::begin(conn, sql::BEGIN_DEFERRED)
    }

    fn begin(conn: &'c Connection, statement: &str) -> rusqlite::Result<Self> {
        conn.prepare_cached(statement)?.execute([])?;
        Ok(Transaction { conn, open: true })
    }

    pub(super) fn commit(mut self) -> rusqlite::Result<()> {
        self.conn.prepare_cached(sql::COMMIT)?.execute([])?;
        self.open = false;
        Ok(())
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if self.open && !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch(sql::ROLLBACK);
        }
    }
}
