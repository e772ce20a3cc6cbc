//! The SQLite store: a durable store in one database file, shared safely by every process of
//! the machine that opens it (the default store of the `toolonce` command). SQLite is
//! synchronous, so every statement that may wait runs on a dedicated connection thread. Point
//! reads, and writes that find the database's write lock free, run on the caller's task on
//! connections that never wait (busy timeout 0): a statement that would have to wait is sent
//! to the thread instead, so the executor is never blocked for longer than a statement takes on
//! an uncontended database (see [`SqliteStore`]).

use std::fmt;
use std::path::Path;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use crate::store::contract::{
    Claim, ClaimRequest, Entry, Fenced, ListQuery, Page, Resolution, Resolved, State, Store,
};
use crate::store::owner::OwnerToken;
use crate::key::OperationKey;
use crate::tool::ToolError;
use crate::{Error, Result};

mod claim;
mod error;
mod row;
mod schema;
mod sql;
mod worker;

pub use schema::SCHEMA_VERSION;

use claim::{Claimed, OwnedClaim, answers_claim, claim_locked, fenced};
use row::{after, entry_from, now_ms, read_live};
use worker::{Immediate, Job};

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

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .field("readers", &self.readers.len())
            .field("inline_writes", &self.writer.is_some())
            .finish()
    }
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
    fn the_application_id_spells_tool() {
        assert_eq!(schema::APPLICATION_ID.to_be_bytes(), *b"tool");
    }
}
