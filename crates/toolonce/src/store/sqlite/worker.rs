//! The connections and the thread: the store handle ([`SqliteStore`], with its design), opening
//! the file (WAL, the per-connection settings, the reader pool and the inline writer), the
//! connection thread that runs every statement that may wait, and the choice, per statement,
//! between the caller's task and that thread.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, TryLockError, mpsc};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::oneshot;

use crate::{Error, Result};

use super::error::{Fault, JobResult, is_busy, is_transient, sql_error};
use super::group_commit::{Job, Pending, serve};
use super::inline_writer::InlineWriter;
use super::options::SqliteOptions;
use super::schema;
use super::transaction::in_autocommit;

/// Whether `path` names a database that lives in memory, which each connection would see as a
/// different, empty database (so it gets no reader connections).
pub(super) fn is_memory(path: &str) -> bool {
    path == ":memory:" || (path.starts_with("file:") && path.contains("mode=memory"))
}

/// A [`Store`](crate::store::Store) in a SQLite database file.
///
/// # Design
///
/// - **One writer thread per store.** SQLite calls block, and a write may wait for the file's
///   write lock held by another process (up to the busy timeout). So writes never run on the
///   async executor: every store opens one connection that lives on a dedicated thread, fed
///   jobs through a channel and answering through a oneshot. SQLite admits one writer at a time
///   anyway, so one writer connection per process costs no concurrency.
/// - **Inline point reads.** The read that answers a replay ([`claim`](crate::store::Store::claim) of a key
///   that has a live entry) and [`get`](crate::store::Store::get) run on the caller's task, on a small pool of
///   reader connections that never wait (a claim reads on the inline writer first, when it is
///   free: a reader's page cache is dropped whenever another connection has committed since
///   its last read, the writer's survives its own commits): their busy timeout is 0, a reader that is in use is
///   skipped, and a busy database or a busy pool sends the read to the connection thread
///   instead. In WAL mode readers do not block on writers, so such a read is a few microseconds
///   of CPU on cached pages, less than the two thread switches it saves (with
///   [`SqliteOptions::readers`]`(0)`, which turns this off, a replay costs three to five times
///   as much).
/// - **Inline writes when the lock is free.** The same idea for writes
///   ([`SqliteOptions::inline_writes`]): a second writer connection, behind a mutex taken with
///   `try_lock`, with busy timeout 0. A write runs on it, on the caller's task, if the mutex is
///   free; if it is taken, or SQLite answers `SQLITE_BUSY`/`SQLITE_LOCKED` (another connection,
///   this store's thread included, or another process holds the write lock), the write goes to
///   the connection thread, which waits for the lock: for the inline writer's mutex first, and
///   runs the write on it once it is free (a wait in microseconds, where SQLite's busy handler
///   sleeps in steps of milliseconds), then, if another process holds the lock, on its own
///   connection up to the busy timeout. Falling back is safe because a busy
///   answer means the transaction did not commit: at `BEGIN IMMEDIATE` nothing was done, and
///   after it (a busy `COMMIT`, possible without WAL) the transaction is rolled back before the
///   thread runs the operation again from its start, with the same owner token; the inline
///   connection is back in autocommit mode (holding no lock) before the fallback, or the write
///   fails instead of falling back. The whole transaction runs within one poll of the caller's
///   future, so a dropped future cannot leave it half done. The inline connection never runs
///   an automatic checkpoint (that would flush the disk on the executor): every few hundred
///   inline commits it asks the connection thread for a passive checkpoint instead.
/// - **Group commit.** A write that finds the inline writer taken is queued for it rather than
///   sent to the thread: whoever holds the connection runs the queued writes after its own, as
///   savepoints of one transaction with one commit (see the `inline_writer` and
///   `group_commit` modules). Callers writing at once share commits, most of a write's cost.
/// - **WAL, `synchronous=NORMAL`.** Readers and the writer do not block each other, and a
///   commit appends to the log without a flush (see [`SqliteOptions::full_sync`] for what that
///   trades).
/// - **Expiry by the machine clock.** Rows hold their lease deadline and the end of their
///   keeping in milliseconds since the epoch; every statement compares them with `now`, treats
///   a row no longer kept as absent and a `running` row past its lease as `unknown` (nothing is
///   written when a lease runs out). All processes that share a file run on the same machine,
///   hence on the same clock.
/// - **Schema versions.** `PRAGMA user_version` says which layout a file has; opening a file of
///   an older version migrates it, under the write lock, in one transaction (see the `schema`
///   module for version 2 and the migration from version 1).
///
/// # Atomicity
///
/// Each write is one transaction that begins with `BEGIN IMMEDIATE`, which takes the write lock
/// of the whole database for every connection of every process. See [`claim`](crate::store::Store::claim)
/// below for the one operation that is more than a single statement.
///
/// # Cancellation
///
/// A job handed to the connection thread runs to its end even if the caller's future is dropped
/// (a dropped [`claim`](crate::store::Store::claim) may have won, as the [`Store`](crate::store::Store) contract says).
pub struct SqliteStore {
    pub(super) path: Arc<str>,
    pub(super) jobs: mpsc::Sender<Job>,
    pub(super) readers: Box<[Mutex<Connection>]>,
    /// The inline writer connection and its queue, if [`SqliteOptions::inline_writes`] is on
    /// (and the database is a file and has readers).
    pub(super) writer: Option<Arc<InlineWriter>>,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .field("readers", &self.readers.len())
            .field("inline_writes", &self.writer.is_some())
            .finish()
    }
}

/// A path SQLite can open: not empty, and in a directory that exists (toolonce creates none).
fn check_path(path: &Path, path_text: &str, memory: bool) -> Result<()> {
    if path_text.is_empty() {
        return Err(Error::Config(
            "no SQLite database path: expected a file such as sqlite://toolonce.db or \
             sqlite:///var/lib/toolonce.db"
                .into(),
        ));
    }
    if !memory
        && let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.is_dir()
    {
        return Err(Error::Config(format!(
            "cannot open SQLite database {path_text}: directory {} does not exist \
             (toolonce does not create directories)",
            dir.display()
        )));
    }
    Ok(())
}

impl SqliteStore {
    pub(super) fn open_with(path: &Path, options: &SqliteOptions) -> Result<SqliteStore> {
        let path_text: Arc<str> = path.to_string_lossy().into();
        let memory = is_memory(&path_text);
        check_path(path, &path_text, memory)?;
        let text: &str = &path_text;
        let err = |doing| move |e| sql_error(text, doing, e);

        let writer = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_URI
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(err("open the file"))?;
        configure(&writer, options.busy_timeout, options.full_sync)
            .map_err(err("configure the connection"))?;
        if !memory {
            // WAL is a property of the file: set once, every later connection uses it.
            let mode =
                switch_to_wal(&writer, options.busy_timeout).map_err(err("switch to WAL mode"))?;
            if !mode.eq_ignore_ascii_case("wal") {
                tracing::warn!(
                    target: "toolonce",
                    path = %path_text,
                    mode,
                    "SQLite refused WAL mode (a network file system?); readers and the writer \
                     will block each other"
                );
            }
        }
        schema::migrate(&writer, &path_text)?;

        let readers = if memory {
            Vec::new()
        } else {
            (0..options.readers)
                .map(|_| open_reader(path, options.full_sync))
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(err("open a reader connection"))?
        };

        // Opened after the migration, so that the schema exists; never on an in-memory
        // database (it would be another, empty database), nor with `readers(0)`.
        let inline_writer = if memory || options.readers == 0 || !options.inline_writes {
            None
        } else {
            Some(
                open_inline_writer(path, options.full_sync)
                    .map_err(err("open the inline writer connection"))?,
            )
        };

        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("toolonce-sqlite".into())
            .spawn(move || serve(writer, queue))
            .map_err(|e| {
                Error::Config(format!(
                    "cannot start the SQLite connection thread for {path_text}: {e}"
                ))
            })?;
        Ok(SqliteStore {
            path: path_text,
            jobs,
            readers: readers.into_iter().map(Mutex::new).collect(),
            writer: inline_writer.map(|conn| {
                Arc::new(InlineWriter::new(
                    conn,
                    options.busy_timeout.min(MAX_BUSY_TIMEOUT),
                ))
            }),
        })
    }

    /// Runs a write transaction on the inline writer, in a batch with the writes that queue
    /// for it meanwhile, on the caller's task or on that of the write holding the connection;
    /// on the connection thread when there is no inline writer or another process holds the
    /// write lock (see [`SqliteStore`]). `write` must be one or more complete transactions
    /// that either commit or leave nothing behind when they fail, since after a busy answer it
    /// runs again on the thread; inside a batch its transactions are savepoints of the batch's.
    pub(super) async fn write<T, F>(&self, doing: &'static str, write: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> JobResult<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let pending = Box::new(Pending::new(write, tx));
        match &self.writer {
            Some(writer) => writer.submit(pending, &self.jobs),
            None => self
                .jobs
                .send(Job::Write(pending))
                .map_err(|_| self.stopped())?,
        }
        self.answer(doing, rx).await
    }

    /// Runs `write` on the inline writer, on the caller's task, if it is free at once (and
    /// then the writes queued for it meanwhile). `None` when it cannot run at once (no inline
    /// writer, the connection in use, or the lock held elsewhere): then nothing was committed
    /// and the connection holds no transaction, so the caller may write elsewhere.
    pub(super) fn on_inline_writer<T>(
        &self,
        doing: &'static str,
        write: impl FnOnce(&Connection) -> JobResult<T>,
    ) -> Option<Result<T>> {
        let (result, settled) = self.writer.as_ref()?.try_with(&self.jobs, |conn| {
            let result = write(conn);
            // `Transaction` rolls back a transaction that did not commit (a busy `COMMIT`
            // included); if that rollback failed, the connection may still hold the write
            // lock, and the thread would only wait for it: report the error instead of
            // falling back.
            (result, in_autocommit(conn))
        })?;
        match result {
            Ok(value) => Some(Ok(value)),
            Err(Fault::Sql(e)) if is_busy(&e) && settled => None,
            Err(fault) => Some(Err(self.fault(doing, fault))),
        }
    }

    /// Counts a commit of the inline writer made outside [`write`](Self::write) (a claim's).
    pub(super) fn note_inline_commit(&self) {
        if let Some(writer) = &self.writer {
            writer.note_commit(&self.jobs);
        }
    }

    /// Runs `job` on the connection thread and waits for its answer without blocking the
    /// executor.
    pub(super) async fn on_thread<T, F>(&self, doing: &'static str, job: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> JobResult<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        self.jobs
            .send(Job::Run(Box::new(move |conn| {
                let _ = tx.send(job(conn));
            })))
            .map_err(|_| self.stopped())?;
        self.answer(doing, rx).await
    }

    /// The connection thread's answer to a job, or the error of a thread that stopped (or of
    /// a job that panicked, which drops its sender).
    async fn answer<T>(
        &self,
        doing: &'static str,
        answer: oneshot::Receiver<JobResult<T>>,
    ) -> Result<T> {
        match answer.await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(fault)) => Err(self.fault(doing, fault)),
            Err(_) => Err(self.stopped()),
        }
    }

    /// Runs a read on an idle reader connection, on the caller's task. `None` when no reader
    /// can serve it at once (none configured, all in use, or SQLite busy): the caller then
    /// sends the read to the connection thread, which may wait.
    pub(super) fn read_inline<T>(
        &self,
        doing: &'static str,
        read: impl FnOnce(&Connection) -> JobResult<T>,
    ) -> Option<Result<T>> {
        let conn = self.readers.iter().find_map(|m| match m.try_lock() {
            Ok(guard) => Some(guard),
            // A panic during a read leaves no half-done state behind: statements reset on drop.
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        })?;
        match read(&conn) {
            Ok(value) => Some(Ok(value)),
            Err(Fault::Sql(e)) if is_transient(&e) => None,
            Err(fault) => Some(Err(self.fault(doing, fault))),
        }
    }

    pub(super) fn fault(&self, doing: &'static str, fault: Fault) -> Error {
        match fault {
            Fault::Sql(e) => sql_error(&self.path, doing, e),
            Fault::Corrupt(e) => e,
        }
    }

    pub(super) fn stopped(&self) -> Error {
        Error::unavailable(format!(
            "the connection thread of SQLite database {} has stopped",
            self.path
        ))
    }
}

/// Sets `journal_mode=WAL` and returns the mode SQLite reports.
///
/// The switch needs an exclusive lock on the file. While another process is creating or
/// recovering the same new file, SQLite answers `SQLITE_BUSY` at once instead of calling the
/// busy handler (waiting could deadlock inside SQLite), so processes that open a new file
/// together would fail at random. Retry the switch for as long as the busy timeout allows.
pub(super) fn switch_to_wal(conn: &Connection, busy_timeout: Duration) -> rusqlite::Result<String> {
    let deadline = std::time::Instant::now()
        .checked_add(busy_timeout.min(MAX_BUSY_TIMEOUT))
        .unwrap_or_else(std::time::Instant::now);
    let mut pause = Duration::from_millis(1);
    loop {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0)) {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

/// The longest busy timeout SQLite can hold: `i32::MAX` milliseconds.
pub(super) const MAX_BUSY_TIMEOUT: Duration = Duration::from_millis(i32::MAX as u64);

/// The per-connection settings (WAL itself is a setting of the file).
pub(super) fn configure(
    conn: &Connection,
    busy_timeout: Duration,
    full_sync: bool,
) -> rusqlite::Result<()> {
    // rusqlite panics on a timeout beyond SQLite's `i32` of milliseconds.
    conn.busy_timeout(busy_timeout.min(MAX_BUSY_TIMEOUT))?;
    conn.pragma_update(
        None,
        "synchronous",
        if full_sync { "FULL" } else { "NORMAL" },
    )?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(())
}

/// A connection for inline reads: it never waits for a lock (busy timeout 0) and cannot write.
pub(super) fn open_reader(path: &Path, full_sync: bool) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    configure(&conn, Duration::ZERO, full_sync)?;
    conn.pragma_update(None, "query_only", true)?;
    Ok(conn)
}

/// The inline writer connection: it never waits for a lock (busy timeout 0) and never runs an
/// automatic checkpoint (which would flush the disk on the caller's task).
pub(super) fn open_inline_writer(path: &Path, full_sync: bool) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    configure(&conn, Duration::ZERO, full_sync)?;
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_paths_are_recognised() {
        assert!(is_memory(":memory:"));
        assert!(is_memory("file:x?mode=memory&cache=shared"));
        assert!(!is_memory("toolonce.db"));
        assert!(!is_memory("/var/lib/memory.db"));
    }
}
