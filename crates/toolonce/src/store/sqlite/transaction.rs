//! The transactions the store runs: `BEGIN IMMEDIATE`, which takes the database's write lock at
//! once (every write on a connection that may wait for the lock), `BEGIN` (deferred, the
//! inline writer's claim: a read that may turn into a write), a savepoint in place of either
//! inside a batch that already holds the lock (group commit), and a rollback when any of them
//! is dropped uncommitted.

use rusqlite::Connection;

use super::sql;

/// An open transaction that rolls back when dropped uncommitted (after an error or a panic),
/// so the connection always returns to where it was: autocommit, or the open batch. The
/// statements come from the statement cache, unlike rusqlite's `Transaction`, which parses
/// them each time.
pub(super) struct Transaction<'c> {
    conn: &'c Connection,
    open: bool,
    /// A savepoint inside a batch's transaction rather than a transaction of its own.
    nested: bool,
}

impl<'c> Transaction<'c> {
    /// `BEGIN IMMEDIATE`: the write lock, taken now (waiting up to the busy timeout). Inside a
    /// batch, which holds the lock already, a savepoint: the write commits with the batch, or
    /// is undone alone.
    pub(super) fn immediate(conn: &'c Connection) -> rusqlite::Result<Self> {
        if conn.is_autocommit() {
            Self::begin(conn, sql::BEGIN, false)
        } else {
            Self::begin(conn, sql::SAVEPOINT, true)
        }
    }

    /// `BEGIN`: no lock until the first statement. Its first read takes a snapshot and its
    /// first write upgrades it to the write lock, which SQLite refuses at once with
    /// `SQLITE_BUSY` (no busy handler runs on an upgrade) when another connection holds the
    /// lock or has committed since the snapshot: the reads it made are then never written
    /// upon, and dropping it rolls back.
    pub(super) fn deferred(conn: &'c Connection) -> rusqlite::Result<Self> {
        Self::begin(conn, sql::BEGIN_DEFERRED, false)
    }

    fn begin(conn: &'c Connection, statement: &str, nested: bool) -> rusqlite::Result<Self> {
        conn.prepare_cached(statement)?.execute([])?;
        Ok(Transaction {
            conn,
            open: true,
            nested,
        })
    }

    pub(super) fn commit(mut self) -> rusqlite::Result<()> {
        let end = if self.nested {
            sql::RELEASE_SAVEPOINT
        } else {
            sql::COMMIT
        };
        self.conn.prepare_cached(end)?.execute([])?;
        self.open = false;
        Ok(())
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        // A savepoint whose batch SQLite already rolled back (after a full disk, say) has
        // nothing left to undo: the connection is back in autocommit.
        if self.open && !self.conn.is_autocommit() {
            let undo = if self.nested {
                sql::ROLLBACK_SAVEPOINT
            } else {
                sql::ROLLBACK
            };
            let _ = self.conn.execute_batch(undo);
        }
    }
}

/// Whether `conn` holds no open transaction, rolling back one that a failed rollback left open.
pub(super) fn in_autocommit(conn: &Connection) -> bool {
    if !conn.is_autocommit() {
        let _ = conn.execute_batch(sql::ROLLBACK);
    }
    conn.is_autocommit()
}
