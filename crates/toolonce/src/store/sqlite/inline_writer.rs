//! The inline writer: a second writer connection used on the caller's task, behind a mutex
//! taken with `try_lock`, with busy timeout 0, and the queue that makes its commits group
//! commits. A write that finds the connection taken joins the queue rather than waiting, and
//! whoever holds the connection runs the queued writes once it is done with its own, as one
//! batch (each write in a savepoint of one transaction, one commit for all). Callers that
//! write at once then share commits, the largest part of a write's cost, instead of taking
//! turns for the connection or handing their writes to the connection thread one by one.
//!
//! No write is stranded in the queue: a write is queued before its caller tries the
//! connection, and every holder looks at the queue again after releasing it, so either the
//! caller gets the connection or the holder it lost to sees its write. A batch that meets the
//! write lock of another process (`SQLITE_BUSY`, nothing committed) moves, whole, to the
//! connection thread, which waits for the lock.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError, mpsc};
use std::time::Duration;

use rusqlite::Connection;

use super::checkpoint;
use super::error::is_busy;
use super::group_commit::{Job, MAX_BATCH, Write, answer_all, attempt};
use super::transaction::in_autocommit;

/// The inline writer connection, its queue of writes and its count of commits.
pub(super) struct InlineWriter {
    conn: Mutex<Connection>,
    queue: Mutex<Vec<Box<dyn Write>>>,
    /// Commits on the inline writer, to schedule checkpoints on the connection thread.
    commits: AtomicU32,
    /// The busy timeout of the thread's connection, which the checkpoint shortens for a moment.
    busy_timeout: Duration,
}

/// What became of a batch on the inline writer.
enum Ran {
    /// Committed (`Ok`) or failed as a whole; each write's own result is in it.
    Done(rusqlite::Result<()>),
    /// Another process holds the write lock: nothing was kept, and the batch goes to the thread.
    Busy,
}

impl InlineWriter {
    pub(super) fn new(conn: Connection, busy_timeout: Duration) -> Self {
        InlineWriter {
            conn: Mutex::new(conn),
            queue: Mutex::new(Vec::new()),
            commits: AtomicU32::new(0),
            busy_timeout,
        }
    }

    /// Runs `work` on the connection if it is free at once and in autocommit, on the caller's
    /// task; `None` otherwise. Then runs the writes queued meanwhile.
    pub(super) fn try_with<T>(
        self: &Arc<Self>,
        thread: &mpsc::Sender<Job>,
        work: impl FnOnce(&Connection) -> T,
    ) -> Option<T> {
        let conn = self.try_lock()?;
        // A panic in `work` must not leave the writes queued meanwhile without a holder to
        // run them: they run, then the panic goes on.
        let done = catch_unwind(AssertUnwindSafe(|| {
            in_autocommit(&conn).then(|| work(&conn))
        }));
        drop(conn);
        self.run_queued(thread);
        done.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }

    /// Queues `write` and runs the queue if the connection is free; otherwise its holder will.
    /// The write's caller hears of it through the write itself.
    pub(super) fn submit(self: &Arc<Self>, write: Box<dyn Write>, thread: &mpsc::Sender<Job>) {
        self.lock_queue().push(write);
        self.run_queued(thread);
    }

    /// Counts a commit and, every [`checkpoint::CHECKPOINT_EVERY`], asks the connection thread
    /// for a checkpoint (see the `checkpoint` module), since the inline writer runs none
    /// itself: a passive one while writes go on, then the rest with this connection held.
    pub(super) fn note_commit(self: &Arc<Self>, thread: &mpsc::Sender<Job>) {
        if checkpoint::due(&self.commits) {
            let (writer, to_thread) = (Arc::clone(self), thread.clone());
            let _ = thread.send(Job::Run(Box::new(move |conn| {
                checkpoint::run_passive(conn);
                writer.hold(&to_thread, || {
                    checkpoint::restart(conn, writer.busy_timeout)
                });
            })));
        }
    }

    /// Runs `work` with the connection held (waiting for it), so that no write of this store
    /// is under way meanwhile, then the writes that queued for it.
    fn hold(self: &Arc<Self>, thread: &mpsc::Sender<Job>, work: impl FnOnce()) {
        let conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        work();
        drop(conn);
        self.run_queued(thread);
    }

    fn try_lock(&self) -> Option<MutexGuard<'_, Connection>> {
        match self.conn.try_lock() {
            Ok(guard) => Some(guard),
            // A panic inside a write unwound through `Transaction`, which rolled back;
            // `in_autocommit` checks it before the connection is used.
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    fn lock_queue(&self) -> MutexGuard<'_, Vec<Box<dyn Write>>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs the queued writes, a batch at a time, for as long as there are some and the
    /// connection is free. Each batch is answered after the connection is released.
    fn run_queued(self: &Arc<Self>, thread: &mpsc::Sender<Job>) {
        while !self.lock_queue().is_empty() {
            let Some(conn) = self.try_lock() else {
                return;
            };
            let mut batch = {
                let mut queue = self.lock_queue();
                let n = queue.len().min(MAX_BATCH);
                queue.drain(..n).collect::<Vec<_>>()
            };
            let ran = if in_autocommit(&conn) {
                run(&conn, &mut batch)
            } else {
                Ran::Busy
            };
            drop(conn);
            match ran {
                Ran::Busy => {
                    for write in batch {
                        // A stopped thread drops the write, whose caller then hears so.
                        let _ = thread.send(Job::Write(write));
                    }
                }
                Ran::Done(outcome) => {
                    if outcome.is_ok() {
                        self.note_commit(thread);
                    }
                    answer_all(batch, outcome);
                }
            }
        }
    }
}

/// A batch on the inline writer: a lone write runs as it is (its own transaction), several
/// share one ([`attempt`]).
fn run(conn: &Connection, batch: &mut [Box<dyn Write>]) -> Ran {
    let outcome = match batch {
        [write] => {
            let met = catch_unwind(AssertUnwindSafe(|| write.run(conn))).unwrap_or(None);
            match met {
                Some(e) if is_busy(&e) => Err(e),
                _ => Ok(()),
            }
        }
        _ => attempt(conn, batch),
    };
    match outcome {
        // `Transaction` rolled back what did not commit; if that rollback failed, the
        // connection may still hold the write lock, and the thread would only wait for it:
        // report the error instead of moving the batch.
        Err(e) if is_busy(&e) && in_autocommit(conn) => Ran::Busy,
        outcome => Ran::Done(outcome),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::error::{Fault, JobResult};
    use crate::store::sqlite::group_commit::Pending;
    use crate::store::sqlite::transaction::Transaction;
    use tokio::sync::oneshot;

    fn file() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("batch.db");
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.execute_batch("CREATE TABLE t (k TEXT PRIMARY KEY)")
            .unwrap();
        (dir, path)
    }

    fn writer(path: &std::path::Path) -> Arc<InlineWriter> {
        let conn = Connection::open(path).unwrap();
        conn.busy_timeout(Duration::ZERO).unwrap();
        Arc::new(InlineWriter::new(conn, Duration::from_secs(5)))
    }

    /// A write of its own transaction inserting `k`; a `k` already there fails it.
    fn insert(k: &'static str) -> (Box<dyn Write>, oneshot::Receiver<JobResult<()>>) {
        let (tx, rx) = oneshot::channel();
        let write = move |conn: &Connection| -> JobResult<()> {
            let t = Transaction::immediate(conn)?;
            conn.execute("INSERT INTO t VALUES (?1)", [k])?;
            t.commit()?;
            Ok(())
        };
        (Box::new(Pending::new(write, tx)), rx)
    }

    fn keys(path: &std::path::Path) -> Vec<String> {
        let conn = Connection::open(path).unwrap();
        let mut stmt = conn.prepare("SELECT k FROM t ORDER BY k").unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    #[test]
    fn writes_that_find_the_connection_taken_wait_for_its_holder_and_commit_with_one_another() {
        let (_dir, path) = file();
        let writer = writer(&path);
        let (thread, jobs) = mpsc::channel();
        let held = writer.conn.lock().unwrap();
        let mut answers = Vec::new();
        for k in ["a", "b", "a", "c"] {
            let (write, rx) = insert(k);
            writer.submit(write, &thread);
            answers.push(rx);
        }
        for rx in &mut answers {
            assert!(rx.try_recv().is_err(), "answered before the holder let go");
        }
        drop(held);
        // The holder, done with its own work, runs what queued meanwhile: one batch.
        writer.try_with(&thread, |_| ());
        let results: Vec<_> = answers
            .into_iter()
            .map(|mut rx| rx.try_recv().expect("answered"))
            .collect();
        assert!(results[0].is_ok() && results[1].is_ok() && results[3].is_ok());
        assert!(
            matches!(&results[2], Err(Fault::Sql(e)) if e.to_string().contains("UNIQUE")),
            "the duplicate fails alone"
        );
        assert_eq!(keys(&path), ["a", "b", "c"]);
        assert!(jobs.try_recv().is_err(), "nothing went to the thread");
        assert!(writer.conn.lock().unwrap().is_autocommit());
    }

    #[test]
    fn a_holder_that_panics_still_runs_the_writes_queued_behind_it() {
        let (_dir, path) = file();
        let writer = writer(&path);
        let (thread, _jobs) = mpsc::channel();
        let queued = Arc::clone(&writer);
        let (to_thread, mut answer) = (thread.clone(), None);
        let panicked = catch_unwind(AssertUnwindSafe(|| {
            writer.try_with(&thread, |_| {
                // Queued while the holder has the connection: only the holder can run it.
                let (write, rx) = insert("a");
                queued.submit(write, &to_thread);
                answer = Some(rx);
                panic!("a bug in the holder's own work");
            })
        }));
        assert!(panicked.is_err());
        let mut answer = answer.expect("the write was queued");
        assert!(answer.try_recv().expect("answered").is_ok());
        assert_eq!(keys(&path), ["a"]);
    }

    #[test]
    fn a_batch_that_meets_another_processs_write_lock_moves_whole_to_the_thread_having_kept_nothing()
     {
        let (_dir, path) = file();
        let writer = writer(&path);
        let (thread, jobs) = mpsc::channel();
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let held = writer.conn.lock().unwrap();
        let mut answers = Vec::new();
        for k in ["a", "b"] {
            let (write, rx) = insert(k);
            writer.submit(write, &thread);
            answers.push(rx);
        }
        drop(held);
        writer.try_with(&thread, |_| ());
        let moved: Vec<Job> = jobs.try_iter().collect();
        assert_eq!(moved.len(), 2, "both writes went to the thread");
        for rx in &mut answers {
            assert!(rx.try_recv().is_err(), "a moved write is not answered yet");
        }
        other.execute_batch("COMMIT").unwrap();
        // The thread's connection runs them once the lock is free.
        let own = Connection::open(&path).unwrap();
        let mut batch: Vec<Box<dyn Write>> = moved
            .into_iter()
            .map(|job| match job {
                Job::Write(write) => write,
                Job::Run(_) => panic!("a write became a job of another kind"),
            })
            .collect();
        let outcome = attempt(&own, &mut batch);
        answer_all(batch, outcome);
        for rx in &mut answers {
            assert!(rx.try_recv().expect("answered").is_ok());
        }
        assert_eq!(keys(&path), ["a", "b"]);
    }
}
