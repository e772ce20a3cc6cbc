//! Checkpoints of the inline writer's commits. The inline writer runs no automatic checkpoint
//! (it would flush the disk on the caller's task), so the store counts its commits and every
//! [`CHECKPOINT_EVERY`] has the connection thread run a passive one, which waits for no reader.

use std::sync::atomic::{AtomicU32, Ordering};

use rusqlite::Connection;

use super::sql;

/// How many commits on the inline writer between two checkpoints. A commit appends a few
/// pages to the log, so this is near SQLite's automatic checkpoint threshold of 1000 pages.
pub(super) const CHECKPOINT_EVERY: u32 = 256;

/// Counts one commit of the inline writer, and says whether a checkpoint is due.
pub(super) fn due(commits: &AtomicU32) -> bool {
    let n = commits.fetch_add(1, Ordering::Relaxed);
    n % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1
}

/// Moves the log's committed pages into the database file, as far as no reader holds them. A
/// failure is harmless (the log grows until the next one), so it is not reported.
pub(super) fn run_passive(conn: &Connection) {
    let _ = conn.query_row(sql::WAL_CHECKPOINT, [], |_| Ok(()));
}
