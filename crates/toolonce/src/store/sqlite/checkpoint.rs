//! Checkpoints of the inline writer's commits. The inline writer runs no automatic checkpoint
//! (it would flush the disk on the caller's task), so the store counts its commits and every
//! [`CHECKPOINT_EVERY`] has the connection thread run one, in two steps:
//!
//! 1. a passive checkpoint while writes go on, which moves most of the log into the file;
//! 2. a restart checkpoint with the inline writer held (its writes queue meanwhile and commit
//!    as one batch after), which moves the few frames written since and waits, briefly, for
//!    readers to leave the log, so that the next write starts the log from its beginning.
//!
//! Step 2 is what keeps the log short: a passive checkpoint alone never lets the log restart
//! while writes go on (each finds frames appended since it began), and a store written without
//! pause grew its log by about 100 MB a second (and every append to the log's index slowed as
//! the log grew). If a reader of another process keeps the log in use past the short wait, the
//! restart waits for the next checkpoint; nothing else waits for it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rusqlite::Connection;

use super::sql;

/// How many commits on the inline writer between two checkpoints. A commit appends a few
/// pages to the log, so this is near SQLite's automatic checkpoint threshold of 1000 pages.
pub(super) const CHECKPOINT_EVERY: u32 = 256;

/// How long the restart waits for readers (of this process or others) to leave the log, the
/// inline writer's callers waiting meanwhile.
const RESTART_WAIT: Duration = Duration::from_millis(20);

/// Counts one commit of the inline writer, and says whether a checkpoint is due.
pub(super) fn due(commits: &AtomicU32) -> bool {
    let n = commits.fetch_add(1, Ordering::Relaxed);
    n % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1
}

/// Step 1: moves the log's committed pages into the database file, as far as no reader holds
/// them. A failure is harmless (the log grows until the next one), so it is not reported.
pub(super) fn run_passive(conn: &Connection) {
    let _ = conn.query_row(sql::WAL_CHECKPOINT, [], |_| Ok(()));
}

/// Step 2, on the thread's connection (whose busy timeout is `busy_timeout`), with no write of
/// this store under way: the rest of the log, and its restart.
pub(super) fn restart(conn: &Connection, busy_timeout: Duration) {
    if conn.busy_timeout(RESTART_WAIT).is_ok() {
        let _ = conn.query_row(sql::WAL_CHECKPOINT_RESTART, [], |_| Ok(()));
    }
    let _ = conn.busy_timeout(busy_timeout);
}
