//! The write transaction every write runs in: `BEGIN IMMEDIATE`, which takes the database's
//! write lock at once, and a rollback when it is dropped uncommitted.

use rusqlite::Connection;

use super::sql;

/// An open `BEGIN IMMEDIATE` transaction that rolls back when dropped uncommitted (after an
/// error or a panic), so the connection thread always returns to autocommit. Both statements
/// come from the statement cache, unlike rusqlite's `Transaction`, which parses them each time.
pub(super) struct Immediate<'c> {
    conn: &'c Connection,
    open: bool,
}

impl<'c> Immediate<'c> {
    pub(super) fn begin(conn: &'c Connection) -> rusqlite::Result<Self> {
        conn.prepare_cached(sql::BEGIN)?.execute([])?;
        Ok(Immediate { conn, open: true })
    }

    pub(super) fn commit(mut self) -> rusqlite::Result<()> {
        self.conn.prepare_cached(sql::COMMIT)?.execute([])?;
        self.open = false;
        Ok(())
    }
}

impl Drop for Immediate<'_> {
    fn drop(&mut self) {
        if self.open && !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }
}
