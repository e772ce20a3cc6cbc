//! The connections and the thread: opening the file (WAL, the per-connection settings, the
//! reader pool and the inline writer), the connection thread that runs every statement that
//! may wait, and the choice, per statement, between the caller's task and that thread (see
//! `SqliteStore`'s design).

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError, TryLockError, mpsc};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::oneshot;

use crate::{Error, Result};

use super::error::{Fault, JobResult, is_busy, is_transient, sql_error};
use super::{SqliteOptions, SqliteStore, schema, sql};

pub(super) type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// How many commits on the inline writer between two checkpoints asked of the connection
/// thread. A commit appends a few pages to the log, so this is near SQLite's automatic
/// checkpoint threshold of 1000 pages.
pub(super) const CHECKPOINT_EVERY: u32 = 256;

/// Whether `path` names a database that lives in memory, which each connection would see as a
/// different, empty database (so it gets no reader connections).
pub(super) fn is_memory(path: &str) -> bool {
    path == ":memory:" || (path.starts_with("file:") && path.contains("mode=memory"))
}

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

impl SqliteStore {
    pub(super) fn open_with(path: &Path, options: &SqliteOptions) -> Result<SqliteStore> {
        let path_text: Arc<str> = path.to_string_lossy().into();
        if path_text.is_empty() {
            return Err(Error::Config(
                "no SQLite database path: expected a file such as sqlite://toolonce.db or \
                 sqlite:///var/lib/toolonce.db"
                    .into(),
            ));
        }
        let memory = is_memory(&path_text);
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
            writer: inline_writer.map(|c| Arc::new(Mutex::new(c))),
            inline_commits: Arc::new(AtomicU32::new(0)),
        })
    }

    /// Runs a write transaction on the inline writer if it can run at once, on the connection
    /// thread otherwise (see [`SqliteStore`]). `write` must be one or more complete
    /// transactions that either commit or leave nothing behind when they fail, since after a
    /// busy answer it runs again on the thread.
    pub(super) async fn write<T, F>(&self, doing: &'static str, write: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> JobResult<T> + Send + 'static,
    {
        if let Some(done) = self.write_inline(doing, &write) {
            return done;
        }
        let Some(inline) = self.writer.clone() else {
            return self.on_thread(doing, move |conn| write(conn)).await;
        };
        let commits = Arc::clone(&self.inline_commits);
        self.on_thread(doing, move |conn| {
            // Most often the lock was held by this store's inline writer, for the microseconds
            // of one transaction: wait for its mutex, which wakes the thread when released,
            // rather than for SQLite's lock, whose handler sleeps 1, 2, 5, 10 … ms between
            // attempts and lost the race to inline writers again and again (eight callers
            // writing at once: p99 of 16-23 ms). Another process holding the lock answers
            // busy on this connection at once; the thread's own connection then waits for it.
            {
                let guard = inline.lock().unwrap_or_else(PoisonError::into_inner);
                if in_autocommit(&guard) {
                    match write(&guard) {
                        Err(Fault::Sql(e)) if is_busy(&e) && in_autocommit(&guard) => {}
                        Ok(value) => {
                            drop(guard);
                            let n = commits.fetch_add(1, Ordering::Relaxed);
                            if n % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1 {
                                let _ = conn.query_row(
                                    "PRAGMA wal_checkpoint(PASSIVE)",
                                    [],
                                    |_| Ok(()),
                                );
                            }
                            return Ok(value);
                        }
                        Err(fault) => return Err(fault),
                    }
                }
            }
            write(conn)
        })
        .await
    }

    /// Runs `write` on the inline writer, on the caller's task. `None` when it cannot run at
    /// once (no inline writer, the connection in use, or the lock held elsewhere): then nothing
    /// was committed and the connection holds no transaction, so the caller may run it on the
    /// connection thread.
    pub(super) fn write_inline<T>(
        &self,
        doing: &'static str,
        write: impl FnOnce(&Connection) -> JobResult<T>,
    ) -> Option<Result<T>> {
        let done = self.on_inline_writer(doing, write)?;
        if done.is_ok() {
            self.note_inline_commit();
        }
        Some(done)
    }

    /// [`write_inline`](Self::write_inline) without counting a commit: for work that may
    /// only read.
    pub(super) fn on_inline_writer<T>(
        &self,
        doing: &'static str,
        write: impl FnOnce(&Connection) -> JobResult<T>,
    ) -> Option<Result<T>> {
        let conn = match self.writer.as_ref()?.try_lock() {
            Ok(guard) => guard,
            // A panic inside a write unwound through `Immediate`, which rolled back;
            // `in_autocommit` below checks it.
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        if !in_autocommit(&conn) {
            return None;
        }
        let result = write(&conn);
        // `Immediate` rolls back a transaction that did not commit (a busy `COMMIT` included);
        // if that rollback failed, the connection may still hold the write lock, and the
        // thread would only wait for it: report the error instead of falling back.
        let settled = in_autocommit(&conn);
        drop(conn);
        match result {
            Ok(value) => Some(Ok(value)),
            Err(Fault::Sql(e)) if is_busy(&e) && settled => None,
            Err(fault) => Some(Err(self.fault(doing, fault))),
        }
    }

    /// Counts a commit of the inline writer, and every [`CHECKPOINT_EVERY`] asks the connection
    /// thread for a passive checkpoint (which never waits for a lock), since the inline writer
    /// runs none itself.
    pub(super) fn note_inline_commit(&self) {
        let n = self.inline_commits.fetch_add(1, Ordering::Relaxed);
        if n % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1 {
            let _ = self.jobs.send(Box::new(|conn| {
                let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
            }));
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
            .send(Box::new(move |conn| {
                let _ = tx.send(job(conn));
            }))
            .map_err(|_| self.stopped())?;
        match rx.await {
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

/// Whether `conn` holds no open transaction, rolling back one that a failed rollback left open.
pub(super) fn in_autocommit(conn: &Connection) -> bool {
    if !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    conn.is_autocommit()
}

/// The connection thread: runs jobs in order until the store (the only sender) is dropped.
pub(super) fn serve(mut conn: Connection, jobs: mpsc::Receiver<Job>) {
    for job in jobs {
        // A panicking job drops its oneshot, so its caller gets an error; the thread carries on
        // for the others. `Immediate` has rolled back any open transaction while unwinding.
        let _ = std::panic::catch_unwind(AssertUnwindSafe(|| job(&mut conn)));
    }
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
