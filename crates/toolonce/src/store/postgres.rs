//! The PostgreSQL store: entries in one table, shared by every process and machine that can
//! reach the database. Each store operation is one statement (one round trip) on a pooled
//! connection with cached prepared statements; leases and retention are timed by the
//! database's clock. The schema comes from a versioned migration, applied on connect or by
//! [`PostgresStore::migrate`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::Pool;
use deadpool_postgres::tokio_postgres::error::SqlState;
use serde_json::Value;

use crate::store::contract::{
    Claim, ClaimRequest, Entry, Fenced, ListQuery, Page, Resolution, Resolved, State, Store,
};
use crate::store::owner::OwnerToken;
use crate::key::OperationKey;
use crate::tool::ToolError;
use crate::{Error, Result};

mod error;
mod pool;
mod row;
mod schema;
mod sql;
mod tls;

pub use pool::{PostgresStoreBuilder, connect_client};

use error::discard_if_broken;
use pool::prepare_all;
use row::{decode, fenced};
use schema::{migrate_on, version_of};
use sql::{PURGE_BATCH, Sql, millis, quote};

/// The table the entries live in unless [`PostgresStoreBuilder::table`] says otherwise.
pub const DEFAULT_TABLE: &str = "toolonce_entries";

/// The schema version this build creates and understands. [`PostgresStore::migrate`] brings an
/// older table up to it; a table of a newer version is refused, since an older build could
/// misread or damage it.
pub const SCHEMA_VERSION: u32 = 3;

/// The table that records the schema version of each entries table of the database (in the
/// same schema as the entries table, the first of the `search_path`).
const VERSION_TABLE: &str = "toolonce_schema";

/// The longest table name accepted: PostgreSQL cuts identifiers at 63 bytes, and the index and
/// function names append up to 11 bytes (`_expires_at`) to the table name.
const MAX_TABLE_NAME: usize = 52;

/// Durations beyond this are capped (100 years, in milliseconds): far enough to mean "forever",
/// near enough that `now() + interval` cannot overflow a timestamp.
const MAX_MILLIS: i64 = 100 * 365 * 24 * 60 * 60 * 1000;

/// Serialization failures and deadlocks roll the statement back, so it is safe to run it again;
/// they only happen when the database runs sessions at `REPEATABLE READ` or `SERIALIZABLE` by
/// default. This many attempts in all before the error is reported.
const ATTEMPTS: u32 = 3;

/// Advisory lock that serializes migrations across processes: `"toolonce"` in ASCII.
const MIGRATION_LOCK: i64 = i64::from_be_bytes(*b"toolonce");

/// A [`Store`] on a PostgreSQL table.
///
/// # Layout
///
/// One row per key (`key` is the primary key, in the `"C"` collation so listings page in byte
/// order): `state` (`running`, `done` or `failed`), `owner` (the token of a running entry),
/// `fingerprint`, `started_at` (of the current attempt), `lease_until` (the lease deadline of
/// a running row), `expires_at` (the row's final expiry: the lease deadline plus the claim's
/// retention while running, the retention once settled), `settled_at`, `result` or `error` as
/// `json`, and what the entry is and has been through: `scope`, `tool`, `detail`,
/// `first_started_at` and `attempts`. A running row whose `lease_until` has passed is reported
/// `unknown` (the state is not stored: it is judged on the database's clock when read). A row
/// past its `expires_at` counts as absent for every operation;
/// [`purge_expired`](Store::purge_expired) deletes such rows, using the index on `expires_at`.
///
/// Results are `json`, not `jsonb`: `json` keeps the text exactly as written, while `jsonb`
/// would reorder object keys and rewrite numbers (`1.0` as `1`, a big integer as a numeric), and
/// a replay must return exactly what the first caller got.
///
/// # Time
///
/// Every lease, retention and expiry check uses the database's `now()`, never the client's
/// clock, so clients on machines with skewed clocks agree. `now()` is the start of the
/// transaction, and every operation is its own transaction of one statement, so it is the
/// moment the operation started, one instant for all its comparisons and new expiry times
/// (`clock_timestamp()` would move between them). The only lag is a wait for a row lock, which
/// the one-statement transactions of other operations hold for microseconds.
///
/// # Atomicity
///
/// `claim` is one call of a small PL/pgSQL function, created by the migration (the comments on
/// the `Sql` struct in the source explain why it is atomic);
/// `renew`, `complete` and `fail` are single `UPDATE`s or `DELETE`s whose `WHERE` clause is the
/// fence (`state = 'running' AND owner = $2 AND expires_at > now()`: the owner, not the lease,
/// so an owner whose entry went `unknown` but was not taken over still records what its tool
/// did). Under PostgreSQL's default `READ COMMITTED`, an `UPDATE` that finds its row changed by
/// a concurrent transaction re-evaluates that clause on the newest version, so a takeover that
/// happened meanwhile makes the stale owner's write match nothing. `resolve` is one such
/// statement fenced on `state = 'running'` whatever the owner, followed by a read only when it
/// matched nothing, to say why.
///
/// # Upgrading from schema version 2
///
/// Version 3 adds the columns above and replaces the claim function; rows written before keep
/// their state, a live running row keeps its lease and is kept 24 hours past it (so an owner
/// that dies after the upgrade leaves it `unknown`), and their `attempts` read 0 (not
/// recorded). Stop processes of older builds before migrating: once the table is at version 3
/// their claims fail with an error that says to upgrade, and their lease renewals would not
/// move the new lease column.
///
/// # Connections
///
/// A `deadpool` pool of `tokio-postgres` connections, each with its own cache of prepared
/// statements (prepared when the connection opens). Connections broken by a server restart are
/// dropped and replaced, so the same store recovers on its own after an outage.
///
/// # TLS
///
/// `sslmode` (`disable`, `prefer` — the default —, `require`, `verify-ca`, `verify-full`) and
/// `sslrootcert=PATH` in the URL, with libpq's meaning, through rustls (feature
/// `postgres-tls`); without `sslrootcert` the system's trust store is used. A build without
/// the feature refuses the modes that require TLS rather than connect in plain text.
pub struct PostgresStore {
    pool: Pool,
    table: String,
    sql: Arc<Sql>,
    operation_timeout: Option<Duration>,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self.pool.status();
        f.debug_struct("PostgresStore")
            .field("table", &self.table)
            .field("pool_size", &status.max_size)
            .field("connections", &status.size)
            .finish_non_exhaustive()
    }
}

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
        let query = format!("SELECT version FROM {VERSION_TABLE} WHERE table_name = $1");
        match client.query_opt(&query, &[&self.table]).await {
            Ok(row) => row.map_or(Ok(0), |r| version_of(&r)),
            Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => Ok(0),
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
        let rows = self
            .rows(
                &self.sql.claim,
                &[
                    &key.as_str(),
                    &req.owner.as_str(),
                    &req.fingerprint.as_str(),
                    &millis(req.lease),
                    &millis(req.retention),
                    &req.takeover,
                    &about.scope,
                    &about.tool,
                    &about.detail,
                ],
            )
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| Error::store("the claim function returned no row"))?;
        let won: bool = row
            .try_get(0)
            .map_err(|e| Error::corrupt(key, format!("won: {e}")))?;
        let took_over: bool = row
            .try_get(1)
            .map_err(|e| Error::corrupt(key, format!("took_over: {e}")))?;
        match (won, took_over) {
            (true, true) => Ok(Claim::TookOver),
            (true, false) => Ok(Claim::Won),
            (false, _) => Ok(Claim::Existing(decode(key.clone(), row, 2)?)),
        }
    }

    async fn renew(&self, key: &OperationKey, owner: &OwnerToken, lease: Duration) -> Result<bool> {
        let n = self
            .count(
                &self.sql.renew,
                &[&key.as_str(), &owner.as_str(), &millis(lease)],
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
                &[&key.as_str(), &owner.as_str(), &text, &millis(retention)],
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
        let rows = self.rows(&self.sql.get, &[&key.as_str()]).await?;
        rows.first()
            .map(|row| decode(key.clone(), row, 0))
            .transpose()
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
        let mut entries = Vec::with_capacity(rows.len().min(size));
        for row in rows.iter().take(size) {
            let key: String = row
                .try_get(0)
                .map_err(|e| Error::corrupt("(listed row)", format!("key: {e}")))?;
            let key = key
                .parse::<OperationKey>()
                .map_err(|e| Error::corrupt(&key, e))?;
            entries.push(decode(key, row, 1)?);
        }
        let next = if more {
            entries.last().map(|e| e.key.as_str().to_owned())
        } else {
            None
        };
        Ok(Page::new(entries, next))
    }

    async fn resolve(
        &self,
        key: &OperationKey,
        resolution: &Resolution,
        retention: Duration,
    ) -> Result<Resolved> {
        let retention = millis(retention);
        // The write is one fenced statement. When it matches nothing, a read says why; a
        // running entry seen then was claimed after the write looked, so the write is tried on
        // it again (a new claim after each miss is needed to loop, so this ends).
        for _ in 0..ATTEMPTS * 3 {
            let n = match resolution {
                Resolution::Done(value) => {
                    let text = serde_json::to_string(value).map_err(Error::store)?;
                    self.count(&self.sql.resolve_done, &[&key.as_str(), &text, &retention])
                        .await?
                }
                Resolution::Failed(error) => {
                    let text = serde_json::to_string(error).map_err(Error::store)?;
                    self.count(
                        &self.sql.resolve_failed,
                        &[&key.as_str(), &text, &retention],
                    )
                    .await?
                }
                Resolution::Release => {
                    self.count(&self.sql.resolve_release, &[&key.as_str()])
                        .await?
                }
            };
            if n > 0 {
                return Ok(Resolved::Applied);
            }
            match self.get(key).await? {
                None => return Ok(Resolved::Absent),
                Some(entry) => match entry.state() {
                    State::Done | State::Failed => return Ok(Resolved::Settled(entry)),
                    _ => continue,
                },
            }
        }
        Err(Error::unavailable(
            "the entry was claimed again each time resolve tried to settle it",
        ))
    }

    async fn delete(&self, key: &OperationKey) -> Result<bool> {
        let rows = self.rows(&self.sql.delete, &[&key.as_str()]).await?;
        match rows.first() {
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
