//! The SQLite store: a durable store in one database file, shared safely by every process of
//! the machine that opens it (the default store of the `toolonce` command). SQLite is
//! synchronous, so every statement that may wait runs on a dedicated connection thread. Point
//! reads, and writes that find the database's write lock free, run on the caller's task on
//! connections that never wait (busy timeout 0): a statement that would have to wait is sent
//! to the thread instead, so the executor is never blocked for longer than a statement takes on
//! an uncontended database (see [`SqliteStore`]).
//!
//! This file declares the parts, re-exports the public API and drives the operations (the
//! [`Store`] implementation); the parts never import it: the handle and the connections live in
//! `worker`, the options in `options`, the write transaction in `transaction`.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};
use serde_json::Value;

use crate::key::OperationKey;
use crate::store::contract::{
    Census, Claim, ClaimRequest, Entry, Fenced, ListQuery, Page, Removed, Resolution, Resolved,
    Seen, SeenSettled, State, Store, Unreadable,
};
use crate::store::owner::OwnerToken;
use crate::store::removal::epoch_millis;
use crate::tool::ToolError;
use crate::{Error, Result};

mod checkpoint;
mod claim;
mod error;
mod group_commit;
mod inline_writer;
mod options;
mod row;
mod schema;
mod sql;
mod transaction;
mod worker;

pub use options::SqliteOptions;
pub use schema::SCHEMA_VERSION;
pub use worker::SqliteStore;

use claim::{ClaimArgs, Claimed, OwnedClaim, answers_claim, claim_inline, claim_locked, fenced};
use error::Fault;
use row::{after, entry_from, now_ms, read_live};
use transaction::Transaction;

impl SqliteOptions {
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
    ///    needed, follows on it at once, in the same deferred transaction, whose first write
    ///    takes the write lock only if nothing was committed since the read, else the claim
    ///    falls back as a busy one does), else on a reader connection, else at the start of
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
        // Steps 1 and 2 on the inline writer in one go when it is free, in one deferred
        // transaction (`claim_inline`): its page cache is current after its own commits,
        // while in WAL mode a reader drops its whole cache whenever another connection has
        // committed since its last read, so on a store that writes, a read on a reader first
        // re-reads the pages it needs.
        let inline = self.on_inline_writer("claim", |conn| claim_inline(conn, &ClaimArgs::of(req)));
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
                claim_locked(conn, &owned.args())
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

    /// One transaction under the write lock: the live row is read and judged against what was
    /// `seen` (the same attempt and owner, its lease passed unless forced), and only then
    /// written (`sql::RESOLVE_SETTLE` or `sql::RESOLVE_RELEASE`, which also check the
    /// attempt and owner, so the write can never act on a row the read did not judge). A
    /// refused row is left untouched and returned.
    async fn resolve(
        &self,
        key: &OperationKey,
        seen: &Seen,
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
        let seen = seen.clone();
        self.write("resolve an entry", move |conn| {
            let tx = Transaction::immediate(conn)?;
            let now = now_ms();
            let Some(entry) = read_live(conn, &k, now)? else {
                tx.commit()?;
                return Ok(Resolved::Absent);
            };
            if !seen.admits(&entry) {
                tx.commit()?;
                return Ok(seen.refusal(entry));
            }
            let (owner, attempts) = (seen.owner(), seen.attempts());
            let applied = match &settle {
                Some((state, payload)) => {
                    conn.prepare_cached(sql::RESOLVE_SETTLE)?.execute(params![
                        k.as_str(),
                        state,
                        payload,
                        now,
                        after(now, retention),
                        owner,
                        attempts
                    ])?
                }
                None => conn.prepare_cached(sql::RESOLVE_RELEASE)?.execute(params![
                    k.as_str(),
                    now,
                    owner,
                    attempts
                ])?,
            };
            let resolved = if applied == 1 {
                Resolved::Applied
            } else {
                // Judged admissible and yet not matched: refused, never applied by guess.
                Resolved::Changed(entry)
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
        let mut rows = self
            .on_thread("list entries", move |conn| {
                let mut stmt = conn.prepare_cached(sql::LIST)?;
                let now = now_ms();
                let mut rows = stmt.query(params![after_key, now, state, fetch, scope, tool])?;
                let mut listed = Vec::new();
                while let Some(row) = rows.next()? {
                    let key = row.get_ref(0)?.as_str().ok().map(str::to_owned);
                    let entry = match entry_from(row, None, now) {
                        Ok(entry) => Ok(entry),
                        // One entry another writer garbled is reported, not the page failed.
                        Err(Fault::Corrupt(e)) => {
                            Err(Unreadable::from_error(e).map_err(Fault::Corrupt)?)
                        }
                        Err(other) => return Err(other),
                    };
                    listed.push((key, entry));
                }
                Ok(listed)
            })
            .await?;
        let next = if rows.len() > size {
            rows.truncate(size);
            // The next page starts after the last row of this one, read or not (a key that is
            // not an operation key cannot be a cursor: the one before it is).
            rows.iter()
                .rev()
                .find_map(|(key, _)| key.as_deref().filter(|k| k.parse::<OperationKey>().is_ok()))
                .map(str::to_owned)
        } else {
            None
        };
        let (mut entries, mut unreadable) = (Vec::new(), Vec::new());
        for (_, row) in rows {
            match row {
                Ok(entry) => entries.push(entry),
                Err(u) => unreadable.push(u),
            }
        }
        Ok(Page::new(entries, next).with_unreadable(unreadable))
    }

    /// One aggregate statement on the connection thread (as `list`): counts, no entry decoded.
    async fn census(&self) -> Result<Option<Census>> {
        let census = self
            .on_thread("count entries", |conn| {
                let mut stmt = conn.prepare_cached(sql::CENSUS)?;
                let row = stmt.query_row(params![now_ms()], |row| {
                    let count = |at: usize| row.get::<_, i64>(at).map(|n| n.max(0).unsigned_abs());
                    let waited: Option<i64> = row.get(4)?;
                    Ok(
                        Census::new(count(0)?, count(1)?, count(2)?, count(3)?).oldest_unknown(
                            waited.map(|ms| Duration::from_millis(ms.max(0).unsigned_abs())),
                        ),
                    )
                })?;
                Ok(row)
            })
            .await?;
        Ok(Some(census))
    }

    /// One transaction under the write lock: the delete matches only the settled row seen
    /// (`sql::REMOVE_SETTLED`); when it matches nothing, the live row read in the same
    /// transaction says why.
    async fn remove(&self, key: &OperationKey, seen: &SeenSettled) -> Result<Removed> {
        let k = key.clone();
        let state = seen.state().as_str();
        let attempts = seen.attempts();
        let started = epoch_millis(seen.started_at());
        let settled = seen.settled_at().map(epoch_millis);
        let by = seen.settled_by().map(|b| b.as_str().to_owned());
        self.write("remove an entry", move |conn| {
            let tx = Transaction::immediate(conn)?;
            let now = now_ms();
            let deleted = conn.prepare_cached(sql::REMOVE_SETTLED)?.execute(params![
                k.as_str(),
                now,
                state,
                attempts,
                started,
                settled,
                by
            ])?;
            let removed = if deleted == 1 {
                Removed::Applied
            } else {
                match read_live(conn, &k, now)? {
                    None => Removed::Absent,
                    Some(entry) => Removed::Changed(entry),
                }
            };
            tx.commit()?;
            Ok(removed)
        })
        .await
    }

    /// One statement under the write lock: deletes the row, live or not, and its `RETURNING`
    /// says whether it was live.
    async fn delete(&self, key: &OperationKey) -> Result<bool> {
        let k = key.as_str().to_owned();
        self.on_thread("delete an entry", move |conn| {
            let tx = Transaction::immediate(conn)?;
            let live = conn
                .prepare_cached(sql::DELETE)?
                .query_row(params![k, now_ms()], |r| r.get::<_, bool>(0))
                .optional()?;
            tx.commit()?;
            Ok(live == Some(true))
        })
        .await
    }

    /// Batches of 10,000 rows (`sql::PURGE_BATCH`), each one statement in a transaction of its
    /// own under the write lock, using the index on `kept_until`, until a batch finds fewer:
    /// the lock is released between batches, and memory and the WAL hold one batch at a time.
    /// Only rows that already count as absent are deleted, so no live entry can be lost to a
    /// race, and an `unknown` entry is kept for its retention.
    async fn purge_expired(&self) -> Result<u64> {
        let mut total = 0;
        loop {
            let purged = self
                .on_thread("purge expired entries", move |conn| {
                    let tx = Transaction::immediate(conn)?;
                    let purged = conn
                        .prepare_cached(sql::PURGE)?
                        .execute(params![now_ms(), sql::PURGE_BATCH])?;
                    tx.commit()?;
                    Ok(purged as u64)
                })
                .await?;
            total += purged;
            if purged < sql::PURGE_BATCH as u64 {
                return Ok(total);
            }
        }
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
