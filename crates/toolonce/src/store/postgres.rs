//! The PostgreSQL store: entries in one table, shared by every process and machine that can
//! reach the database. Each store operation is one statement (one round trip) on a pooled
//! connection with cached prepared statements; leases and retention are timed by the
//! database's clock. The schema comes from a versioned migration, applied on connect or by
//! [`PostgresStore::migrate`].
//!
//! This file declares the parts, re-exports the public API and drives the operations (the
//! [`Store`] implementation, connecting and migrating); the parts never import it: the handle
//! and the builder live in `pool`, the names and limits they share in `constants`.

use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::tokio_postgres::error::SqlState;
use deadpool_postgres::tokio_postgres::types::ToSql;
use serde_json::Value;

use crate::key::OperationKey;
use crate::store::contract::{
    Census, Claim, ClaimRequest, Entry, Fenced, ListQuery, Page, Removed, Resolution, Resolved,
    Seen, SeenSettled, State, Store, Unreadable,
};
use crate::store::owner::OwnerToken;
use crate::tool::ToolError;
use crate::{Error, Result};

mod constants;
mod error;
mod options;
mod pool;
mod prepared;
mod row;
mod schema;
mod sql;
mod tls;

pub use constants::{DEFAULT_TABLE, SCHEMA_VERSION};
#[cfg(test)]
pub(crate) use constants::{MAX_TABLE_NAME, VERSION_TABLE};
pub use pool::{PostgresStore, PostgresStoreBuilder, connect_client};
#[cfg(test)]
pub(crate) use tls::describe;

use constants::ATTEMPTS;
use error::discard_if_broken;
use pool::prepare_all;
use row::{decode, fenced};
use schema::{migrate_on, version_of, versioned};
use sql::{Ascii, PURGE_BATCH, millis, schema_text};

impl PostgresStore {
    /// Connects with the default options ([`DEFAULT_TABLE`], migration on connect); see
    /// [`builder`](Self::builder) for the others.
    ///
    /// # Errors
    ///
    /// As [`PostgresStoreBuilder::connect`].
    pub async fn connect(url: &str) -> Result<PostgresStore> {
        Self::builder(url).connect().await
    }

    /// Options for a store on the database of `url` (`postgres://user:password@host:port/db`,
    /// or the key/value form `host=… dbname=…` that libpq accepts).
    pub fn builder(url: impl Into<String>) -> PostgresStoreBuilder {
        PostgresStoreBuilder::new(url.into())
    }

    /// The name of the entries table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The schema version of the table as recorded in the database, `0` if it has not been
    /// migrated.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] or [`Error::Store`] when the query fails.
    pub async fn schema_version(&self) -> Result<u32> {
        let client = self.checkout().await?;
        let query = versioned(schema_text::SCHEMA_VERSION);
        match client.query_opt(&query, &[&self.table]).await {
            Ok(row) => row.map_or(Ok(0), |r| version_of(&r)),
            Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => Ok(0),
            Err(e) => Err(discard_if_broken(client, e)),
        }
    }

    /// Refuses a hot standby ([`Error::Config`]): it answers reads but refuses every write
    /// (`pg_is_in_recovery()`), so a store on it could replay results and never record one.
    /// Asked on connect, once; a primary demoted later fails its writes as
    /// [`Error::Unavailable`] (`25006`), which fails closed.
    pub(crate) async fn refuse_standby(&self) -> Result<()> {
        let client = self.checkout().await?;
        match client.query_one(schema_text::IN_RECOVERY, &[]).await {
            Ok(row) if row.get::<_, bool>(0) => Err(Error::Config(
                "the PostgreSQL server of the store URL is a hot standby, which is read-only \
                 (pg_is_in_recovery() is true): toolonce writes every claim and result, so \
                 point the store URL at the primary"
                    .into(),
            )),
            Ok(_) => Ok(()),
            Err(e) => Err(discard_if_broken(client, e)),
        }
    }

    /// Brings the table's schema up to [`SCHEMA_VERSION`] and returns how many migration steps
    /// it applied (`0` when it was current, so applying it again is harmless).
    ///
    /// It runs in one transaction under an advisory lock, so processes that start together
    /// and all migrate wait for each other instead of racing, and a failure leaves the schema
    /// as it was.
    ///
    /// # Errors
    ///
    /// [`Error::Store`] if the table's schema is newer than this build knows, or the database
    /// refuses a step (no `CREATE` privilege, say); [`Error::Unavailable`] when it cannot be
    /// reached.
    pub async fn migrate(&self) -> Result<u32> {
        let mut client = self.checkout().await?;
        let outcome = migrate_on(&mut client, &self.table, SCHEMA_VERSION).await;
        match outcome {
            Ok(Ok(applied)) => {
                if applied > 0 {
                    tracing::info!(target: "toolonce", table = %self.table, applied, "migrated");
                    // This connection opened before the table existed, so its statements
                    // could not be prepared then.
                    prepare_all(&client, &self.sql).await;
                }
                Ok(applied)
            }
            Ok(Err(refused)) => Err(refused),
            Err(e) => Err(discard_if_broken(client, e)),
        }
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<Claim> {
        let key = req.key;
        let about = req.about;
        let row = self
            .row(
                &self.sql.claim,
                &[
                    &Ascii(key.as_bytes()),
                    &req.owner.as_str(),
                    &Ascii(req.fingerprint.as_bytes()),
                    &millis(req.lease),
                    &millis(req.retention),
                    &req.takeover,
                    &about.scope,
                    &about.tool,
                    &about.detail,
                ],
            )
            .await?;
        let row = row.ok_or_else(|| Error::store("the claim function returned no row"))?;
        let won: bool = row
            .try_get(0)
            .map_err(|e| Error::corrupt(key, format!("won: {e}")))?;
        let took_over: bool = row
            .try_get(1)
            .map_err(|e| Error::corrupt(key, format!("took_over: {e}")))?;
        match (won, took_over) {
            (true, true) => Ok(Claim::TookOver),
            (true, false) => Ok(Claim::Won),
            (false, _) => Ok(Claim::Existing(decode(key.clone(), &row, 2)?)),
        }
    }

    async fn renew(&self, key: &OperationKey, owner: &OwnerToken, lease: Duration) -> Result<bool> {
        let n = self
            .count(
                &self.sql.renew,
                &[&Ascii(key.as_bytes()), &owner.as_str(), &millis(lease)],
            )
            .await?;
        Ok(n > 0)
    }

    async fn complete(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        result: &Value,
        retention: Duration,
    ) -> Result<Fenced> {
        let text = serde_json::to_string(result).map_err(Error::store)?;
        let n = self
            .count(
                &self.sql.complete,
                &[
                    &Ascii(key.as_bytes()),
                    &owner.as_str(),
                    &text,
                    &millis(retention),
                ],
            )
            .await?;
        Ok(fenced(n))
    }

    async fn fail(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        error: &ToolError,
        sticky: Option<Duration>,
    ) -> Result<Fenced> {
        let n = match sticky {
            Some(retention) => {
                let text = serde_json::to_string(error).map_err(Error::store)?;
                self.count(
                    &self.sql.fail_sticky,
                    &[&key.as_str(), &owner.as_str(), &text, &millis(retention)],
                )
                .await?
            }
            None => {
                self.count(&self.sql.fail_delete, &[&key.as_str(), &owner.as_str()])
                    .await?
            }
        };
        Ok(fenced(n))
    }

    async fn get(&self, key: &OperationKey) -> Result<Option<Entry>> {
        let row = self.row(&self.sql.get, &[&key.as_str()]).await?;
        row.map(|row| decode(key.clone(), &row, 0)).transpose()
    }

    async fn list(&self, query: &ListQuery) -> Result<Page> {
        let after = match &query.cursor {
            Some(c) => c.parse::<OperationKey>()?.as_str().to_owned(),
            None => String::new(),
        };
        let state = query.state.map(State::as_str);
        let size = query.page_size();
        let limit = i64::try_from(size).unwrap_or(i64::MAX).saturating_add(1);
        let rows = self
            .rows(
                &self.sql.list,
                &[&after, &state, &limit, &query.scope, &query.tool],
            )
            .await?;
        let more = rows.len() > size;
        let (mut entries, mut unreadable) = (Vec::with_capacity(rows.len().min(size)), Vec::new());
        // The next page starts after the last row of this one, read or not (a key that is not
        // an operation key cannot be a cursor: the one before it is).
        let mut last = None;
        for row in rows.iter().take(size) {
            let key: Option<String> = row.try_get(0).ok();
            let parsed = key.as_deref().map(str::parse::<OperationKey>);
            let read = match parsed {
                Some(Ok(key)) => {
                    last = Some(key.as_str().to_owned());
                    decode(key, row, 1)
                }
                Some(Err(e)) => Err(Error::corrupt(key.as_deref().unwrap_or_default(), e)),
                None => Err(Error::corrupt("(a key that is not text)", "key")),
            };
            // One entry another writer garbled is reported, not the page failed.
            match read {
                Ok(entry) => entries.push(entry),
                Err(e) => unreadable.push(Unreadable::from_error(e)?),
            }
        }
        let next = if more { last } else { None };
        Ok(Page::new(entries, next).with_unreadable(unreadable))
    }

    /// One aggregate statement: counts on the database's clock, no row read out.
    async fn census(&self) -> Result<Option<Census>> {
        let rows = self.rows(&self.sql.census, &[]).await?;
        let row = rows
            .first()
            .ok_or_else(|| Error::store("the census statement returned no row"))?;
        let corrupt = |e: &dyn std::fmt::Display| Error::store(format!("census: {e}"));
        let count = |at: usize| -> Result<u64> {
            let n: i64 = row.try_get(at).map_err(|e| corrupt(&e))?;
            Ok(n.max(0).unsigned_abs())
        };
        let waited: Option<i64> = row.try_get(4).map_err(|e| corrupt(&e))?;
        Ok(Some(
            Census::new(count(0)?, count(1)?, count(2)?, count(3)?)
                .oldest_unknown(waited.map(|ms| Duration::from_millis(ms.max(0).unsigned_abs()))),
        ))
    }

    async fn resolve(
        &self,
        key: &OperationKey,
        seen: &Seen,
        resolution: &Resolution,
        retention: Duration,
    ) -> Result<Resolved> {
        let retention = millis(retention);
        let (statement, payload) = match resolution {
            Resolution::Done(value) => (
                &self.sql.resolve_done,
                Some(serde_json::to_string(value).map_err(Error::store)?),
            ),
            Resolution::Failed(error) => (
                &self.sql.resolve_failed,
                Some(serde_json::to_string(error).map_err(Error::store)?),
            ),
            Resolution::Release => (&self.sql.resolve_release, None),
        };
        let owner = seen.owner();
        let attempts = i32::try_from(seen.attempts()).unwrap_or(i32::MAX);
        let forced = seen.acts_while_live();
        // The write is one statement fenced on the attempt seen (owner, attempts, lease passed
        // unless forced). When it matches nothing, a read says why. A read that finds the
        // attempt seen, admissible, means the lease passed between the write and the read:
        // the write is tried again (bounded; the same attempt cannot go back to a live lease
        // unless its owner renews it, which the next write sees).
        for _ in 0..ATTEMPTS * 3 {
            let n = match &payload {
                Some(text) => {
                    let params: [&(dyn ToSql + Sync); 6] =
                        [&key.as_str(), text, &retention, &owner, &attempts, &forced];
                    self.count(statement, &params).await?
                }
                None => {
                    self.count(statement, &[&key.as_str(), &owner, &attempts, &forced])
                        .await?
                }
            };
            if n > 0 {
                return Ok(Resolved::Applied);
            }
            match self.get(key).await? {
                None => return Ok(Resolved::Absent),
                Some(entry) if seen.admits(&entry) => continue,
                Some(entry) => return Ok(seen.refusal(entry)),
            }
        }
        Err(Error::unavailable(
            "the entry changed each time resolve tried to settle it",
        ))
    }

    /// One statement fenced on the settled entry seen; when it matches nothing, a read says
    /// what is there instead (absent, or another entry: refused either way, never guessed).
    async fn remove(&self, key: &OperationKey, seen: &SeenSettled) -> Result<Removed> {
        let attempts = i32::try_from(seen.attempts()).unwrap_or(i32::MAX);
        let by = seen.settled_by().map(|b| b.as_str());
        let params: [&(dyn ToSql + Sync); 6] = [
            &key.as_str(),
            &seen.state().as_str(),
            &attempts,
            &seen.started_at(),
            &seen.settled_at(),
            &by,
        ];
        if self.count(&self.sql.remove_settled, &params).await? > 0 {
            return Ok(Removed::Applied);
        }
        Ok(match self.get(key).await? {
            None => Removed::Absent,
            Some(entry) => Removed::Changed(entry),
        })
    }

    async fn delete(&self, key: &OperationKey) -> Result<bool> {
        let row = self.row(&self.sql.delete, &[&key.as_str()]).await?;
        match row {
            Some(row) => row
                .try_get(0)
                .map_err(|e| Error::corrupt(key, format!("expires_at: {e}"))),
            None => Ok(false),
        }
    }

    async fn purge_expired(&self) -> Result<u64> {
        let mut total = 0;
        loop {
            let n = self.count(&self.sql.purge, &[&PURGE_BATCH]).await?;
            total += n;
            if n < PURGE_BATCH as u64 {
                return Ok(total);
            }
        }
    }
}
