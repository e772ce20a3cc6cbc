//! The SQLite store: a durable store in one database file, shared safely by every process of
//! the machine that opens it (the default store of the `toolonce` command). SQLite is
//! synchronous, so every statement that may wait runs on a dedicated connection thread. Point
//! reads, and writes that find the database's write lock free, run on the caller's task on
//! connections that never wait (busy timeout 0): a statement that would have to wait is sent
//! to the thread instead, so the executor is never blocked for longer than a statement takes on
//! an uncontended database (see [`SqliteStore`]).

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError, TryLockError, mpsc};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, params};
use serde_json::Value;
use tokio::sync::oneshot;

use super::{
    About, Claim, ClaimRequest, Entry, EntryState, Fenced, ListQuery, OwnerToken, Page, Resolution,
    Resolved, State, Store, millis,
};
use crate::key::{Fingerprint, OperationKey};
use crate::tool::ToolError;
use crate::{Error, Result};

mod schema;
#[doc(hidden)]
pub mod sql;

pub use schema::SCHEMA_VERSION;

/// How to open a [`SqliteStore`].
///
/// ```no_run
/// use std::time::Duration;
/// use toolonce::store::sqlite::SqliteOptions;
///
/// let store = SqliteOptions::new()
///     .busy_timeout(Duration::from_secs(10))
///     .open("/var/lib/agent/toolonce.db")?;
/// # Ok::<(), toolonce::Error>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SqliteOptions {
    busy_timeout: Duration,
    readers: usize,
    inline_writes: bool,
    full_sync: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            busy_timeout: Duration::from_secs(5),
            readers: 2,
            inline_writes: true,
            full_sync: false,
        }
    }
}

impl SqliteOptions {
    /// The defaults: a 5 s busy timeout, two inline reader connections, inline writes,
    /// `synchronous=NORMAL`.
    pub fn new() -> Self {
        Self::default()
    }

    /// How long an operation waits for another connection or process to release the
    /// database's write lock before failing with [`Error::Unavailable`]. SQLite counts it in
    /// an `i32` of milliseconds: a longer timeout (up to `Duration::MAX`) waits that maximum,
    /// about 24.8 days.
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// How many reader connections serve point reads (the replay check of
    /// [`claim`](Store::claim), and [`get`](Store::get)) on the caller's task. `0` sends every
    /// statement to the connection thread, so that no SQLite call at all runs on the async
    /// executor, at the cost of a thread hop per read; it turns off
    /// [`inline_writes`](Self::inline_writes) too.
    pub fn readers(mut self, readers: usize) -> Self {
        self.readers = readers;
        self
    }

    /// Whether writes ([`claim`](Store::claim)'s transaction, [`complete`](Store::complete),
    /// [`fail`](Store::fail), [`renew`](Store::renew)) may run on the caller's task, on a
    /// second writer connection whose busy timeout is 0 (default `true`).
    ///
    /// When that connection is free and SQLite grants the write lock at once, the write runs
    /// inline: on an uncontended database it costs the statements themselves (tens of
    /// microseconds with `synchronous=NORMAL`, which does not flush at commit) instead of two
    /// thread switches, which cost several times as much. When the connection is in use by
    /// another task, or another connection or process holds the write lock, the write goes to
    /// the connection thread, which waits up to the [busy timeout](Self::busy_timeout): a
    /// contended write never blocks the executor. The price is that an uncontended write
    /// blocks the executor for as long as its statements take, which grows with
    /// [`full_sync`](Self::full_sync) (a flush per commit): turn this off, or set
    /// [`readers`](Self::readers)`(0)`, to keep every SQLite call off the executor.
    pub fn inline_writes(mut self, inline: bool) -> Self {
        self.inline_writes = inline;
        self
    }

    /// `synchronous=FULL` instead of `NORMAL`: fsync the write-ahead log at every commit.
    ///
    /// With `NORMAL` (the default) every commit is durable across a crash of the process
    /// (SIGKILL included) and the database never corrupts, but the last commits before a power
    /// loss or an OS crash may be lost: an operation completed just before is then found
    /// `unknown` (its claim survived, its result did not), held for a person to check, or run
    /// again with the same key by a tool whose policy reruns; a claim made just before may be
    /// lost altogether, so its operation runs again with the same key. `FULL` closes that gap
    /// at the price of a disk flush per claim and per completion.
    pub fn full_sync(mut self, full: bool) -> Self {
        self.full_sync = full;
        self
    }

    /// Opens (creating it if needed) the database at `path`; `:memory:` is a private in-memory
    /// database. The directory must exist: toolonce does not create directories.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an empty path, a missing directory, a file that belongs to another
    /// program or holds a schema newer than this build knows; [`Error::Store`] or
    /// [`Error::Unavailable`] when SQLite cannot open or set up the file.
    pub fn open(&self, path: impl AsRef<Path>) -> Result<SqliteStore> {
        SqliteStore::open_with(path.as_ref(), self)
    }
}

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// A [`Store`] in a SQLite database file.
///
/// # Design
///
/// - **One writer thread per store.** SQLite calls block, and a write may wait for the file's
///   write lock held by another process (up to the busy timeout). So writes never run on the
///   async executor: every store opens one connection that lives on a dedicated thread, fed
///   jobs through a channel and answering through a oneshot. SQLite admits one writer at a time
///   anyway, so one writer connection per process costs no concurrency.
/// - **Inline point reads.** The read that answers a replay ([`claim`](Store::claim) of a key
///   that has a live entry) and [`get`](Store::get) run on the caller's task, on a small pool of
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
/// of the whole database for every connection of every process. See [`claim`](Store::claim)
/// below for the one operation that is more than a single statement.
///
/// # Cancellation
///
/// A job handed to the connection thread runs to its end even if the caller's future is dropped
/// (a dropped [`claim`](Store::claim) may have won, as the [`Store`] contract says).
pub struct SqliteStore {
    path: Arc<str>,
    jobs: mpsc::Sender<Job>,
    readers: Box<[Mutex<Connection>]>,
    /// The inline writer connection, if [`SqliteOptions::inline_writes`] is on (and the
    /// database is a file and has readers).
    writer: Option<Arc<Mutex<Connection>>>,
    /// Commits on the inline writer, to schedule checkpoints on the connection thread.
    inline_commits: Arc<AtomicU32>,
}

/// How many commits on the inline writer between two checkpoints asked of the connection
/// thread. A commit appends a few pages to the log, so this is near SQLite's automatic
/// checkpoint threshold of 1000 pages.
const CHECKPOINT_EVERY: u32 = 256;

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .field("readers", &self.readers.len())
            .field("inline_writes", &self.writer.is_some())
            .finish()
    }
}

/// What went wrong in a job: a SQLite error (classified by the caller, who knows the path) or
/// an undecodable entry.
enum Fault {
    Sql(rusqlite::Error),
    Corrupt(Error),
}

impl From<rusqlite::Error> for Fault {
    fn from(e: rusqlite::Error) -> Self {
        Fault::Sql(e)
    }
}

type JobResult<T> = std::result::Result<T, Fault>;

/// A SQLite error, with the database and what toolonce was doing.
#[derive(Debug, thiserror::Error)]
#[error("SQLite database {path}: could not {doing}")]
struct SqliteError {
    path: String,
    doing: &'static str,
    #[source]
    source: rusqlite::Error,
}

/// Whether a SQLite error may go away by itself: a lock still held after the busy timeout, a
/// full disk, an I/O error. Everything else (a corrupt file, a read-only one) will not.
fn is_transient(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(
            ErrorCode::DatabaseBusy
                | ErrorCode::DatabaseLocked
                | ErrorCode::SystemIoFailure
                | ErrorCode::DiskFull
                | ErrorCode::CannotOpen
        )
    )
}

/// Whether a SQLite error says that another connection holds a lock: the statement did nothing
/// and may be retried elsewhere.
fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

fn sql_error(path: &str, doing: &'static str, source: rusqlite::Error) -> Error {
    let transient = is_transient(&source);
    let e = SqliteError {
        path: path.to_owned(),
        doing,
        source,
    };
    if transient {
        Error::unavailable(e)
    } else {
        Error::store(e)
    }
}

/// The current time in milliseconds since the epoch.
fn now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// `now` plus `d`, saturating.
fn after(now: i64, d: Duration) -> i64 {
    now.saturating_add(i64::try_from(millis(d)).unwrap_or(i64::MAX))
}

/// Whether `path` names a database that lives in memory, which each connection would see as a
/// different, empty database (so it gets no reader connections).
fn is_memory(path: &str) -> bool {
    path == ":memory:" || (path.starts_with("file:") && path.contains("mode=memory"))
}

/// An open `BEGIN IMMEDIATE` transaction that rolls back when dropped uncommitted (after an
/// error or a panic), so the connection thread always returns to autocommit. Both statements
/// come from the statement cache, unlike rusqlite's `Transaction`, which parses them each time.
struct Immediate<'c> {
    conn: &'c Connection,
    open: bool,
}

impl<'c> Immediate<'c> {
    fn begin(conn: &'c Connection) -> rusqlite::Result<Self> {
        conn.prepare_cached(sql::BEGIN)?.execute([])?;
        Ok(Immediate { conn, open: true })
    }

    fn commit(mut self) -> rusqlite::Result<()> {
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

/// Decodes the entry in a row of [`sql::SELECT_LIVE`] or [`sql::LIST`], reading text straight
/// from SQLite's buffers and copying only what the entry keeps. `key` is the key the caller
/// asked for, when it did (it is the row's key, so it need not be parsed again). `now` tells a
/// `running` row whose lease has passed (`unknown`) from a live one.
fn entry_from(r: &rusqlite::Row<'_>, key: Option<&OperationKey>, now: i64) -> JobResult<Entry> {
    let key = match key {
        Some(k) => k.clone(),
        None => {
            let stored = r
                .get_ref(0)?
                .as_str()
                .map_err(|e| Fault::Corrupt(Error::corrupt("(a key that is not text)", e)))?;
            stored
                .parse()
                .map_err(|e: Error| Fault::Corrupt(Error::corrupt(stored, e)))?
        }
    };
    let corrupt = |reason: String| Fault::Corrupt(Error::corrupt(&key, reason));
    let text = |column: usize| -> JobResult<Option<&str>> {
        r.get_ref(column)?
            .as_str_or_null()
            .map_err(|e| corrupt(format!("column {column}: {e}")))
    };
    let fingerprint = text(3)?
        .map(str::parse::<Fingerprint>)
        .transpose()
        .map_err(|e| corrupt(e.to_string()))?;
    let millis = |column: usize| -> JobResult<Option<i64>> { Ok(r.get::<_, Option<i64>>(column)?) };
    let time = |column: usize, what: &str| -> JobResult<Option<SystemTime>> {
        let Some(ms) = millis(column)? else {
            return Ok(None);
        };
        u64::try_from(ms)
            .ok()
            .and_then(|ms| UNIX_EPOCH.checked_add(Duration::from_millis(ms)))
            .map(Some)
            .ok_or_else(|| corrupt(format!("{what} {ms} is not a time")))
    };
    let started_at = time(4, "started_at")?.ok_or_else(|| corrupt("no started_at".into()))?;
    let lease_until = millis(5)?;
    let settled_at = time(7, "settled_at")?;
    let state = text(1)?.unwrap_or_default();
    let payload = || -> JobResult<&str> {
        text(8)?.ok_or_else(|| corrupt(format!("a {state} entry without its payload")))
    };
    let (state, expires_at) = match state {
        "running" => {
            let lease =
                lease_until.ok_or_else(|| corrupt("a running entry without a lease".into()))?;
            let owner = r.get(2)?;
            let state = if lease <= now {
                EntryState::Unknown { owner }
            } else {
                EntryState::Running { owner }
            };
            (state, time(5, "lease_until")?)
        }
        "done" => (
            EntryState::Done {
                result: serde_json::from_str::<Value>(payload()?)
                    .map_err(|e| corrupt(format!("result is not JSON: {e}")))?,
                completed_at: settled_at,
            },
            time(6, "kept_until")?,
        ),
        "failed" => (
            EntryState::Failed {
                error: serde_json::from_str::<ToolError>(payload()?)
                    .map_err(|e| corrupt(format!("error is not a tool error: {e}")))?,
                failed_at: settled_at,
            },
            time(6, "kept_until")?,
        ),
        other => return Err(corrupt(format!("unknown state {other:?}"))),
    };
    let about = About::empty()
        .with_scope(text(9)?.map(str::to_owned))
        .with_tool(text(10)?.map(str::to_owned))
        .with_detail(text(11)?.map(str::to_owned));
    let attempts = millis(13)?.unwrap_or(0);
    let attempts = u32::try_from(attempts).map_err(|_| corrupt(format!("{attempts} attempts")))?;
    let first_started_at = time(12, "first_started_at")?;
    Ok(Entry::new(key, fingerprint, started_at, expires_at, state)
        .with_about(about)
        .with_first_started_at(first_started_at)
        .with_attempts(attempts)
        .with_settled_at(settled_at))
}

/// The live entry of `key`, read in one statement (so from one consistent snapshot).
fn read_live(conn: &Connection, key: &OperationKey, now: i64) -> JobResult<Option<Entry>> {
    let mut stmt = conn.prepare_cached(sql::SELECT_LIVE)?;
    let mut rows = stmt.query(params![key.as_str(), now])?;
    match rows.next()? {
        Some(row) => Ok(Some(entry_from(row, Some(key), now)?)),
        None => Ok(None),
    }
}

/// The outcome of [`claim_locked`]: won, or the live row that stopped the claim.
enum Claimed {
    Won,
    TookOver,
    Existing(Box<Entry>),
}

/// A claim's request, owned so that it can be sent to the connection thread.
struct OwnedClaim {
    key: OperationKey,
    owner: String,
    fingerprint: Fingerprint,
    lease: Duration,
    retention: Duration,
    takeover: bool,
    about: About,
}

impl OwnedClaim {
    fn of(req: &ClaimRequest<'_>) -> OwnedClaim {
        OwnedClaim {
            key: req.key.clone(),
            owner: req.owner.as_str().to_owned(),
            fingerprint: req.fingerprint.clone(),
            lease: req.lease,
            retention: req.retention,
            takeover: req.takeover,
            about: req.about.clone(),
        }
    }
}

impl From<Claimed> for Claim {
    fn from(claimed: Claimed) -> Claim {
        match claimed {
            Claimed::Won => Claim::Won,
            Claimed::TookOver => Claim::TookOver,
            Claimed::Existing(entry) => Claim::Existing(*entry),
        }
    }
}

/// Whether a claim that finds `entry` is answered by it without writing: a settled entry, a
/// live one held by somebody else, an `unknown` one held by somebody else that the caller does
/// not take over. Everything else (the caller's own entry, a takeover) needs the write lock.
fn answers_claim(entry: &Entry, owner: &str, takeover: bool, fingerprint: &Fingerprint) -> bool {
    match &entry.state {
        EntryState::Running { .. } => !held_by(entry, owner),
        EntryState::Unknown { .. } => {
            !held_by(entry, owner) && !takes_over(entry, takeover, fingerprint)
        }
        _ => true,
    }
}

/// Whether a claim asking for a takeover takes `entry` over: only an `unknown` entry of the
/// same operation. One whose fingerprint differs (other arguments under the same key) is not
/// this caller's to run again: it is the answer, so the caller reports the conflict.
fn takes_over(entry: &Entry, takeover: bool, fingerprint: &Fingerprint) -> bool {
    takeover && matches!(entry.state, EntryState::Unknown { .. }) && entry.matches(fingerprint)
}

/// The atomic part of a claim, on the writer connection.
///
/// `BEGIN IMMEDIATE` takes the database's write lock, then [`sql::CLAIM`] decides the common
/// case in one statement: it writes a `running` row owned by the caller if the key has no row
/// or only one that is no longer kept, and changes nothing if the key has a kept row. If it
/// wrote, the caller won: nobody else can have written the key since, because the lock is held
/// until the commit. If it did not, the read that follows runs under the same lock, so it sees
/// exactly the row that stopped the claim (no window in which that row could expire, be
/// settled, deleted or claimed by another process, and a vanished row is never taken for a
/// win), and the rules for that row apply under the same lock: the caller's own entry, live or
/// `unknown`, is renewed and won ([`sql::RECLAIM_OWN`]); an `unknown` entry of the same
/// fingerprint is taken over if the caller asks ([`sql::TAKEOVER`]); anything else is the
/// answer.
fn claim_locked(conn: &Connection, req: &OwnedClaim) -> JobResult<Claimed> {
    let tx = Immediate::begin(conn)?;
    let now = now_ms();
    let lease_until = after(now, req.lease);
    let kept_until = after(lease_until, req.retention);
    let wrote = conn.prepare_cached(sql::CLAIM)?.execute(params![
        req.key.as_str(),
        req.owner,
        req.fingerprint.as_str(),
        now,
        lease_until,
        kept_until,
        req.about.scope,
        req.about.tool,
        req.about.detail,
    ])?;
    let claimed = if wrote == 1 {
        Claimed::Won
    } else {
        match read_live(conn, &req.key, now)? {
            Some(entry) if held_by(&entry, &req.owner) => {
                conn.prepare_cached(sql::RECLAIM_OWN)?.execute(params![
                    req.key.as_str(),
                    req.owner,
                    lease_until,
                    kept_until
                ])?;
                Claimed::Won
            }
            Some(entry) if takes_over(&entry, req.takeover, &req.fingerprint) => {
                conn.prepare_cached(sql::TAKEOVER)?.execute(params![
                    req.key.as_str(),
                    req.owner,
                    now,
                    lease_until,
                    kept_until
                ])?;
                Claimed::TookOver
            }
            Some(entry) => Claimed::Existing(Box::new(entry)),
            // Unreachable while the lock is held: the claim saw a kept row a moment ago.
            None => return Err(Fault::Sql(rusqlite::Error::QueryReturnedNoRows)),
        }
    };
    tx.commit()?;
    Ok(claimed)
}

/// Whether `entry` is `running` or `unknown` and held by `owner`.
fn held_by(entry: &Entry, owner: &str) -> bool {
    matches!(
        &entry.state,
        EntryState::Running { owner: Some(o) } | EntryState::Unknown { owner: Some(o) } if o == owner
    )
}

/// Runs one fenced statement (`renew`, `complete`, `fail`) in its own transaction, with `now`
/// read under the lock. The fence is the statement's `WHERE key = ? AND state = 'running' AND
/// owner = ? AND kept_until > now`: the owner, not the lease. A caller whose entry was taken
/// over, deleted, resolved or settled, or is no longer kept, matches no row, so the statement
/// changes nothing and says so (0 rows); it never overwrites or deletes an entry the caller does
/// not own. A caller whose lease ran out but whom nobody took over still matches: its tool did
/// run, and recording the outcome beats leaving the entry `unknown`.
fn fenced(
    conn: &Connection,
    write: impl FnOnce(&Connection, i64) -> rusqlite::Result<usize>,
) -> rusqlite::Result<bool> {
    let tx = Immediate::begin(conn)?;
    let changed = write(conn, now_ms())?;
    tx.commit()?;
    Ok(changed == 1)
}

impl SqliteStore {
    /// Opens the database at `path` with the default [`SqliteOptions`]: `toolonce.db`,
    /// `/abs/path.db`, or `:memory:`. (The store URLs `sqlite://toolonce.db` and
    /// `sqlite:///abs/path.db` of [`store::open`](crate::store::open) come here with the
    /// scheme stripped.)
    ///
    /// # Errors
    ///
    /// As [`SqliteOptions::open`].
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore> {
        SqliteOptions::default().open(path)
    }

    /// The options to open a store with something other than the defaults.
    pub fn options() -> SqliteOptions {
        SqliteOptions::default()
    }

    /// The path the store was opened with.
    pub fn path(&self) -> &str {
        &self.path
    }

    fn open_with(path: &Path, options: &SqliteOptions) -> Result<SqliteStore> {
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
    async fn write<T, F>(&self, doing: &'static str, write: F) -> Result<T>
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
    fn write_inline<T>(
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
    fn on_inline_writer<T>(
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
    fn note_inline_commit(&self) {
        let n = self.inline_commits.fetch_add(1, Ordering::Relaxed);
        if n % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1 {
            let _ = self.jobs.send(Box::new(|conn| {
                let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
            }));
        }
    }

    /// Runs `job` on the connection thread and waits for its answer without blocking the
    /// executor.
    async fn on_thread<T, F>(&self, doing: &'static str, job: F) -> Result<T>
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
    fn read_inline<T>(
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

    fn fault(&self, doing: &'static str, fault: Fault) -> Error {
        match fault {
            Fault::Sql(e) => sql_error(&self.path, doing, e),
            Fault::Corrupt(e) => e,
        }
    }

    fn stopped(&self) -> Error {
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
fn switch_to_wal(conn: &Connection, busy_timeout: Duration) -> rusqlite::Result<String> {
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
const MAX_BUSY_TIMEOUT: Duration = Duration::from_millis(i32::MAX as u64);

/// The per-connection settings (WAL itself is a setting of the file).
fn configure(conn: &Connection, busy_timeout: Duration, full_sync: bool) -> rusqlite::Result<()> {
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
fn open_reader(path: &Path, full_sync: bool) -> rusqlite::Result<Connection> {
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
fn open_inline_writer(path: &Path, full_sync: bool) -> rusqlite::Result<Connection> {
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
fn in_autocommit(conn: &Connection) -> bool {
    if !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    conn.is_autocommit()
}

/// The connection thread: runs jobs in order until the store (the only sender) is dropped.
fn serve(mut conn: Connection, jobs: mpsc::Receiver<Job>) {
    for job in jobs {
        // A panicking job drops its oneshot, so its caller gets an error; the thread carries on
        // for the others. `Immediate` has rolled back any open transaction while unwinding.
        let _ = std::panic::catch_unwind(AssertUnwindSafe(|| job(&mut conn)));
    }
}

#[async_trait]
impl Store for SqliteStore {
    /// Claims the request's key, in up to two steps:
    ///
    /// 1. A read of the key's live row: on the inline writer when it is free (then step 2, if
    ///    needed, follows on it at once), else on a reader connection, else at the start of
    ///    step 2, on the same connection. If the row answers the claim
    ///    by itself (settled, or held by somebody else and not to be taken over), that is the
    ///    answer: the read is one statement on one consistent snapshot, so the row was live at a
    ///    moment during this call, which is all `Existing` promises. Replays end here, without
    ///    taking the write lock.
    /// 2. Otherwise the atomic claim of `claim_locked` under the write lock, which decides the
    ///    winner, the caller's own entry, a takeover of an `unknown` entry, or else reads the
    ///    live row in the same transaction. A row that vanished, expired or changed between
    ///    steps 1 and 2 is decided there on what it is then: step 1 never concludes a win. It
    ///    runs on the inline writer if the write lock is free, else on the connection thread; a
    ///    busy inline attempt committed nothing, and the thread's attempt is the whole claim
    ///    again (same owner token), so the claim happens at most once.
    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<Claim> {
        let (owner, takeover) = (req.owner.as_str(), req.takeover);
        // Steps 1 and 2 on the inline writer in one go when it is free: its page cache is
        // current after its own commits, while in WAL mode a reader drops its whole cache
        // whenever another connection has committed since its last read, so on a store that
        // writes, a read on a reader first re-reads the pages it needs.
        let inline = self.on_inline_writer("claim", |conn| {
            if let Some(entry) = read_live(conn, req.key, now_ms())?
                && answers_claim(&entry, owner, takeover, req.fingerprint)
            {
                return Ok(Claimed::Existing(Box::new(entry)));
            }
            claim_locked(conn, &OwnedClaim::of(req))
        });
        match inline {
            Some(Ok(claimed)) => {
                if !matches!(claimed, Claimed::Existing(_)) {
                    self.note_inline_commit();
                }
                return Ok(claimed.into());
            }
            Some(Err(e)) => return Err(e),
            None => {}
        }
        let inline = self.read_inline("claim", |conn| read_live(conn, req.key, now_ms()));
        let read_first = match inline {
            Some(Ok(Some(entry))) if answers_claim(&entry, owner, takeover, req.fingerprint) => {
                return Ok(Claim::Existing(entry));
            }
            Some(Ok(_)) => false,
            Some(Err(e)) => return Err(e),
            None => true,
        };
        let owned = OwnedClaim::of(req);
        let claimed = self
            .write("claim", move |conn| {
                if read_first
                    && let Some(entry) = read_live(conn, &owned.key, now_ms())?
                    && answers_claim(&entry, &owned.owner, owned.takeover, &owned.fingerprint)
                {
                    return Ok(Claimed::Existing(Box::new(entry)));
                }
                claim_locked(conn, &owned)
            })
            .await?;
        Ok(claimed.into())
    }

    async fn renew(&self, key: &OperationKey, owner: &OwnerToken, lease: Duration) -> Result<bool> {
        let (k, o) = (key.as_str().to_owned(), owner.as_str().to_owned());
        self.write("renew a lease", move |conn| {
            Ok(fenced(conn, |c, now| {
                c.prepare_cached(sql::RENEW)?
                    .execute(params![k, o, after(now, lease), now])
            })?)
        })
        .await
    }

    async fn complete(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        result: &Value,
        retention: Duration,
    ) -> Result<Fenced> {
        let payload = serde_json::to_string(result)
            .map_err(|e| Error::store(format!("cannot encode the result as JSON: {e}")))?;
        let (k, o) = (key.as_str().to_owned(), owner.as_str().to_owned());
        let applied = self
            .write("record a result", move |conn| {
                Ok(fenced(conn, |c, now| {
                    c.prepare_cached(sql::COMPLETE)?.execute(params![
                        k,
                        o,
                        payload,
                        now,
                        after(now, retention)
                    ])
                })?)
            })
            .await?;
        Ok(if applied {
            Fenced::Applied
        } else {
            Fenced::NotOwner
        })
    }

    async fn fail(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        error: &ToolError,
        sticky: Option<Duration>,
    ) -> Result<Fenced> {
        let (k, o) = (key.as_str().to_owned(), owner.as_str().to_owned());
        let applied = match sticky {
            Some(retention) => {
                let payload = serde_json::to_string(error)
                    .map_err(|e| Error::store(format!("cannot encode the error as JSON: {e}")))?;
                self.write("record a failure", move |conn| {
                    Ok(fenced(conn, |c, now| {
                        c.prepare_cached(sql::FAIL_STICKY)?.execute(params![
                            k,
                            o,
                            payload,
                            now,
                            after(now, retention)
                        ])
                    })?)
                })
                .await?
            }
            None => {
                self.write("release a failed claim", move |conn| {
                    Ok(fenced(conn, |c, now| {
                        c.prepare_cached(sql::FAIL_DELETE)?
                            .execute(params![k, o, now])
                    })?)
                })
                .await?
            }
        };
        Ok(if applied {
            Fenced::Applied
        } else {
            Fenced::NotOwner
        })
    }

    /// One transaction under the write lock: the fenced write ([`sql::RESOLVE_SETTLE`] or
    /// [`sql::RESOLVE_RELEASE`], which match only a kept `running` row, live or `unknown`,
    /// whoever holds it), then, only if it matched nothing, a read of what stopped it in the
    /// same transaction: no row, or a row that settled meanwhile, which is left untouched.
    async fn resolve(
        &self,
        key: &OperationKey,
        resolution: &Resolution,
        retention: Duration,
    ) -> Result<Resolved> {
        let settle = match resolution {
            Resolution::Done(value) => Some((
                "done",
                serde_json::to_string(value)
                    .map_err(|e| Error::store(format!("cannot encode the result as JSON: {e}")))?,
            )),
            Resolution::Failed(error) => Some((
                "failed",
                serde_json::to_string(error)
                    .map_err(|e| Error::store(format!("cannot encode the error as JSON: {e}")))?,
            )),
            Resolution::Release => None,
        };
        let k = key.clone();
        self.write("resolve an entry", move |conn| {
            let tx = Immediate::begin(conn)?;
            let now = now_ms();
            let applied = match &settle {
                Some((state, payload)) => {
                    conn.prepare_cached(sql::RESOLVE_SETTLE)?.execute(params![
                        k.as_str(),
                        state,
                        payload,
                        now,
                        after(now, retention)
                    ])?
                }
                None => conn
                    .prepare_cached(sql::RESOLVE_RELEASE)?
                    .execute(params![k.as_str(), now])?,
            };
            let resolved = if applied == 1 {
                Resolved::Applied
            } else {
                match read_live(conn, &k, now)? {
                    Some(entry) => Resolved::Settled(entry),
                    None => Resolved::Absent,
                }
            };
            tx.commit()?;
            Ok(resolved)
        })
        .await
    }

    async fn get(&self, key: &OperationKey) -> Result<Option<Entry>> {
        if let Some(entry) = self.read_inline("read an entry", |c| read_live(c, key, now_ms())) {
            return entry;
        }
        let k = key.clone();
        self.on_thread("read an entry", move |conn| read_live(conn, &k, now_ms()))
            .await
    }

    async fn list(&self, query: &ListQuery) -> Result<Page> {
        // Validate the cursor as the memory store does: a cursor is a key from a previous page.
        let after_key = match &query.cursor {
            Some(c) => c.parse::<OperationKey>()?.as_str().to_owned(),
            None => String::new(),
        };
        let state = query.state.map(State::as_str);
        let (scope, tool) = (query.scope.clone(), query.tool.clone());
        let size = query.page_size();
        // One more than a page, to know whether another page follows.
        let fetch = i64::try_from(size).unwrap_or(i64::MAX).saturating_add(1);
        let entries = self
            .on_thread("list entries", move |conn| {
                let mut stmt = conn.prepare_cached(sql::LIST)?;
                let now = now_ms();
                let mut rows = stmt.query(params![after_key, now, state, fetch, scope, tool])?;
                let mut entries = Vec::new();
                while let Some(row) = rows.next()? {
                    entries.push(entry_from(row, None, now)?);
                }
                Ok(entries)
            })
            .await?;
        let mut entries = entries;
        let next = if entries.len() > size {
            entries.truncate(size);
            entries.last().map(|e| e.key.as_str().to_owned())
        } else {
            None
        };
        Ok(Page::new(entries, next))
    }

    /// One statement under the write lock: deletes the row, live or not, and its `RETURNING`
    /// says whether it was live.
    async fn delete(&self, key: &OperationKey) -> Result<bool> {
        let k = key.as_str().to_owned();
        self.on_thread("delete an entry", move |conn| {
            let tx = Immediate::begin(conn)?;
            let live = conn
                .prepare_cached(sql::DELETE)?
                .query_row(params![k, now_ms()], |r| r.get::<_, bool>(0))
                .optional()?;
            tx.commit()?;
            Ok(live == Some(true))
        })
        .await
    }

    /// One statement under the write lock, using the index on `kept_until`. Only rows that
    /// already count as absent are deleted, so no live entry can be lost to a race, and an
    /// `unknown` entry is kept for its retention.
    async fn purge_expired(&self) -> Result<u64> {
        self.on_thread("purge expired entries", move |conn| {
            let tx = Immediate::begin(conn)?;
            let purged = conn
                .prepare_cached(sql::PURGE)?
                .execute(params![now_ms()])?;
            tx.commit()?;
            Ok(purged as u64)
        })
        .await
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

    #[test]
    fn expiry_saturates_instead_of_overflowing() {
        assert_eq!(after(1_000, Duration::from_millis(500)), 1_500);
        assert_eq!(after(i64::MAX - 1, Duration::from_secs(10)), i64::MAX);
        assert_eq!(after(0, Duration::MAX), i64::MAX);
    }

    #[test]
    fn the_application_id_spells_tool() {
        assert_eq!(schema::APPLICATION_ID.to_be_bytes(), *b"tool");
    }
}
