//! Group commit: a batch of writes run as savepoints of one transaction that commits once for
//! all, so that writers under contention append to the log once per batch instead of once per
//! write, which is most of a write's cost (the frames, their checksums, the log's index). The
//! inline writer runs batches of the writes queued for it (`inline_writer`); the connection
//! thread, whose loop is here, runs batches of the writes sent to it together (writes that met
//! another process's write lock), and every other job alone, in the order it was sent.
//!
//! A batch commits as a whole or not at all, and every write learns which: a write's own
//! error undoes its savepoint alone; an error that ends the transaction (`BEGIN` or `COMMIT`
//! refused, or SQLite rolling the transaction back after a full disk) fails every write of the
//! batch, none of whose changes are then in the database. No write is answered before the
//! commit, so no caller acts on a claim that was not kept.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::error::{Fault, JobResult};
use super::transaction::Transaction;

/// The most writes in one batch: the transaction, and how long the first write of a batch
/// waits for its commit, stay bounded.
pub(super) const MAX_BATCH: usize = 64;

/// What the connection thread is sent.
pub(super) enum Job {
    /// A job that runs alone (a read that may wait, a listing, a purge, a checkpoint).
    Run(Box<dyn FnOnce(&mut Connection) + Send>),
    /// A write that may share its transaction with the writes queued beside it.
    Write(Box<dyn Write>),
}

/// One write of a batch, run (perhaps more than once) and then answered once.
pub(super) trait Write: Send {
    /// Runs the write's statements inside the batch's transaction and keeps their result,
    /// returning a copy of the SQLite error it met, if any. Run again from the start if the
    /// batch has to move to another connection.
    fn run(&mut self, conn: &Connection) -> Option<rusqlite::Error>;
    /// Hands the caller its result, or `failed` if the batch did not commit.
    fn answer(self: Box<Self>, failed: Option<&rusqlite::Error>);
}

/// A write waiting for its batch: the statements (`Fn`, since a batch refused for a busy lock
/// runs again on the thread's connection), the result of its last run, and its caller.
pub(super) struct Pending<T, F> {
    write: F,
    result: Option<JobResult<T>>,
    caller: oneshot::Sender<JobResult<T>>,
}

impl<T, F> Pending<T, F> {
    pub(super) fn new(write: F, caller: oneshot::Sender<JobResult<T>>) -> Self {
        Pending {
            write,
            result: None,
            caller,
        }
    }
}

impl<T, F> Write for Pending<T, F>
where
    T: Send,
    F: Fn(&Connection) -> JobResult<T> + Send,
{
    fn run(&mut self, conn: &Connection) -> Option<rusqlite::Error> {
        let result = (self.write)(conn);
        let met = match &result {
            Err(Fault::Sql(e)) => Some(copy(e)),
            _ => None,
        };
        self.result = Some(result);
        met
    }

    fn answer(self: Box<Self>, failed: Option<&rusqlite::Error>) {
        let Pending { result, caller, .. } = *self;
        let result = match (result, failed) {
            // Its own error first: its savepoint was undone whatever became of the batch.
            (Some(Err(fault)), _) => Err(fault),
            (_, Some(e)) => Err(Fault::Sql(copy(e))),
            (Some(Ok(value)), None) => Ok(value),
            // It panicked: the dropped sender tells the caller.
            (None, None) => return,
        };
        let _ = caller.send(result);
    }
}

/// The connection thread: runs jobs until the store (the only sender) is dropped, the writes
/// that are queued together as one batch.
pub(super) fn serve(mut conn: Connection, jobs: mpsc::Receiver<Job>) {
    let mut next = jobs.recv().ok();
    while let Some(job) = next.take() {
        match job {
            // A panicking job drops its oneshot, so its caller gets an error; the thread
            // carries on for the others. `Transaction` has rolled back while unwinding.
            Job::Run(job) => {
                let _ = catch_unwind(AssertUnwindSafe(|| job(&mut conn)));
            }
            Job::Write(first) => {
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match jobs.try_recv() {
                        Ok(Job::Write(write)) => batch.push(write),
                        Ok(other) => {
                            next = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                let outcome = attempt(&conn, &mut batch);
                answer_all(batch, outcome);
            }
        }
        if next.is_none() {
            next = jobs.recv().ok();
        }
    }
}

/// Every write of the batch in one transaction on `conn`, each in a savepoint of its own:
/// `Ok` once it committed. After an error nothing of the batch is in the database.
pub(super) fn attempt(conn: &Connection, batch: &mut [Box<dyn Write>]) -> rusqlite::Result<()> {
    let tx = Transaction::immediate(conn)?;
    for write in batch.iter_mut() {
        // A panic unwound through the write's own savepoint, which was undone; its result is
        // left empty, and its caller learns of it when its sender is dropped.
        let met = catch_unwind(AssertUnwindSafe(|| write.run(conn))).unwrap_or(None);
        if conn.is_autocommit() {
            // SQLite rolled the whole transaction back on this write's error (a full disk, an
            // I/O error): the writes before it are undone too.
            return Err(met.unwrap_or_else(rolled_back));
        }
    }
    tx.commit()
}

/// Answers every write of a batch once its outcome is known: each its own result, or the
/// batch's error if it did not commit.
pub(super) fn answer_all(batch: Vec<Box<dyn Write>>, outcome: rusqlite::Result<()>) {
    let failed = outcome.err();
    for write in batch {
        write.answer(failed.as_ref());
    }
}

/// The error that a batch SQLite rolled back reports when its write kept no error of its own.
fn rolled_back() -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
        Some("SQLite rolled back the transaction of a batch of writes".into()),
    )
}

/// A copy of a SQLite error, for each write of a batch that failed as a whole (the error type
/// is not `Clone`): the same code, so the same classification, and the same message.
fn copy(e: &rusqlite::Error) -> rusqlite::Error {
    match e {
        rusqlite::Error::SqliteFailure(code, message) => {
            rusqlite::Error::SqliteFailure(*code, message.clone())
        }
        other => rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
            Some(other.to_string()),
        ),
    }
}
