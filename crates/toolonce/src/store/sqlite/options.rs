//! The options a SQLite store is opened with: the busy timeout, the inline reader connections,
//! inline writes and `synchronous=FULL`, with their defaults and what each trades.

use std::time::Duration;

/// How to open a [`SqliteStore`](super::SqliteStore).
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
    pub(super) busy_timeout: Duration,
    pub(super) readers: usize,
    pub(super) inline_writes: bool,
    pub(super) full_sync: bool,
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
    /// database's write lock before failing with [`Error::Unavailable`](crate::Error::Unavailable). SQLite counts it in
    /// an `i32` of milliseconds: a longer timeout (up to `Duration::MAX`) waits that maximum,
    /// about 24.8 days.
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// How many reader connections serve point reads (the replay check of
    /// [`claim`](crate::store::Store::claim), and [`get`](crate::store::Store::get)) on the caller's task. `0` sends every
    /// statement to the connection thread, so that no SQLite call at all runs on the async
    /// executor, at the cost of a thread hop per read; it turns off
    /// [`inline_writes`](Self::inline_writes) too.
    pub fn readers(mut self, readers: usize) -> Self {
        self.readers = readers;
        self
    }

    /// Whether writes ([`claim`](crate::store::Store::claim)'s transaction, [`complete`](crate::store::Store::complete),
    /// [`fail`](crate::store::Store::fail), [`renew`](crate::store::Store::renew)) may run on the caller's task, on a
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
}
