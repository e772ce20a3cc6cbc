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

use super::{
    Claim, ClaimRequest, Entry, Fenced, ListQuery, OwnerToken, Page, Resolution, Resolved, State,
    Store,
};
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

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use deadpool_postgres::Object;

    use super::*;
    use crate::store::EntryState;

    /// Today's (version 2) statements, as that build issued them, to write rows the way it did.
    struct VersionTwo {
        claim: String,
        complete: String,
        fail: String,
    }

    impl VersionTwo {
        fn new(table: &str) -> VersionTwo {
            let t = quote(table);
            let claim = quote(&format!("{table}_claim"));
            let fence = "key = $1 AND state = 'running' AND owner = $2 AND expires_at > now()";
            let retention = "now() + $4::bigint * interval '1 millisecond'";
            VersionTwo {
                claim: format!("SELECT won FROM {claim}($1, $2, $3, $4)"),
                complete: format!(
                    "UPDATE {t} SET state = 'done', owner = NULL, result = $3::text::json, \
                     settled_at = now(), expires_at = {retention} WHERE {fence}"
                ),
                fail: format!(
                    "UPDATE {t} SET state = 'failed', owner = NULL, error = $3::text::json, \
                     settled_at = now(), expires_at = {retention} WHERE {fence}"
                ),
            }
        }
    }

    fn derived(n: u32) -> crate::key::Derived {
        crate::key::derive("upgrade", "t", &serde_json::json!({"n": n}), None).unwrap()
    }

    async fn claim(
        store: &PostgresStore,
        op: &crate::key::Derived,
        owner: &OwnerToken,
        takeover: bool,
    ) -> Claim {
        let req = ClaimRequest::new(&op.key, &op.fingerprint, owner, Duration::from_secs(60))
            .takeover(takeover);
        store.claim(&req).await.unwrap()
    }

    /// A table at version 2 holding what today's build writes (a live running entry, one whose
    /// owner is about to die, one whose lease already lapsed, a done and a failed one) is
    /// brought to version 3 by `migrate` with every entry as it was: the lapsed one absent,
    /// the settled ones replayable verbatim, the live one still its owner's to complete, and
    /// the dying one `unknown` once its lease runs out, rather than absent as version 2 would
    /// have left it. A process of the old build still connected is refused with a reason.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_table_at_version_two_holding_entries_upgrades_to_version_three_with_them() {
        let url = toolonce_testsupport::shared_postgres().create_unique_database();
        let store = PostgresStore::builder(url)
            .migrate_on_connect(false)
            .connect()
            .await
            .unwrap();
        let mut client = store.checkout().await.unwrap();
        assert_eq!(
            migrate_on(&mut client, &store.table, 2)
                .await
                .unwrap()
                .unwrap(),
            2
        );
        let v2 = VersionTwo::new(&store.table);
        let (live, dying, lapsed, done, failed) =
            (derived(1), derived(2), derived(3), derived(4), derived(5));
        let owners: Vec<OwnerToken> = (0..5).map(|_| OwnerToken::generate()).collect();
        let dying_lease_ms: i64 = 3_000;
        for (op, owner, lease_ms) in [
            (&live, &owners[0], 60_000_i64),
            (&dying, &owners[1], dying_lease_ms),
            (&lapsed, &owners[2], 1),
            (&done, &owners[3], 60_000),
            (&failed, &owners[4], 60_000),
        ] {
            let row = client
                .query_one(
                    &v2.claim,
                    &[
                        &op.key.as_str(),
                        &owner.as_str(),
                        &op.fingerprint.as_str(),
                        &lease_ms,
                    ],
                )
                .await
                .unwrap();
            assert!(row.get::<_, bool>(0));
        }
        let result_text = r#"{"receipt":"r_1","amount":1.0}"#;
        let n = client
            .execute(
                &v2.complete,
                &[
                    &done.key.as_str(),
                    &owners[3].as_str(),
                    &result_text,
                    &60_000_i64,
                ],
            )
            .await
            .unwrap();
        assert_eq!(n, 1);
        let declined = ToolError::permanent("card declined");
        let n = client
            .execute(
                &v2.fail,
                &[
                    &failed.key.as_str(),
                    &owners[4].as_str(),
                    &serde_json::to_string(&declined).unwrap(),
                    &60_000_i64,
                ],
            )
            .await
            .unwrap();
        assert_eq!(n, 1);
        let dying_started = store.get_at_v2_started(&client, &dying.key).await;
        tokio::time::sleep(Duration::from_millis(50)).await; // `lapsed` is past its lease.
        drop(client);

        assert_eq!(store.migrate().await.unwrap(), 1);
        assert_eq!(store.schema_version().await.unwrap(), SCHEMA_VERSION);

        // The live entry: still running, its lease the one it had (not the retention), nothing
        // recorded about it, and its owner completes it.
        let entry = store.get(&live.key).await.unwrap().expect("the live entry");
        assert_eq!(
            entry.state,
            EntryState::Running {
                owner: Some(owners[0].as_str().to_owned())
            }
        );
        let lease_left = entry
            .expires_at
            .unwrap()
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        assert!(lease_left <= Duration::from_secs(61), "{lease_left:?}");
        assert_eq!((entry.attempts, entry.first_started_at), (0, None));
        assert!(entry.about.is_empty());
        assert!(matches!(
            claim(&store, &live, &OwnerToken::generate(), true).await,
            Claim::Existing(_)
        ));
        let receipt = serde_json::json!({"receipt": "r_0"});
        assert_eq!(
            store
                .complete(
                    &live.key,
                    owners[0].duplicate(),
                    &receipt,
                    Duration::from_secs(60)
                )
                .await
                .unwrap(),
            Fenced::Applied
        );

        // The lapsed one is absent, as it was.
        assert_eq!(store.get(&lapsed.key).await.unwrap(), None);
        assert!(matches!(
            claim(&store, &lapsed, &OwnerToken::generate(), false).await,
            Claim::Won
        ));

        // The settled ones replay, the result as written.
        match claim(&store, &done, &OwnerToken::generate(), true).await {
            Claim::Existing(e) => {
                match &e.state {
                    EntryState::Done { result, .. } => {
                        let written: Value = serde_json::from_str(result_text).unwrap();
                        assert_eq!(*result, written);
                    }
                    other => panic!("{other:?}"),
                }
                assert!(e.settled_at.is_some());
            }
            other => panic!("{other:?}"),
        }
        match claim(&store, &failed, &OwnerToken::generate(), true).await {
            Claim::Existing(Entry {
                state: EntryState::Failed { error, .. },
                ..
            }) => assert_eq!(error, declined),
            other => panic!("{other:?}"),
        }

        // The dying owner dies: once its lease has run out the entry is unknown, not absent.
        tokio::time::sleep(Duration::from_millis(dying_lease_ms as u64 + 500)).await;
        let entry = store
            .get(&dying.key)
            .await
            .unwrap()
            .expect("kept as unknown");
        assert_eq!(
            entry.state,
            EntryState::Unknown {
                owner: Some(owners[1].as_str().to_owned())
            }
        );
        assert!(matches!(
            claim(&store, &dying, &OwnerToken::generate(), false).await,
            Claim::Existing(Entry {
                state: EntryState::Unknown { .. },
                ..
            })
        ));
        let rerun = OwnerToken::generate();
        assert!(matches!(
            claim(&store, &dying, &rerun, true).await,
            Claim::TookOver
        ));
        let entry = store.get(&dying.key).await.unwrap().unwrap();
        assert_eq!(entry.attempts, 2, "the version 2 attempt, then this one");
        assert_eq!(entry.first_started_at, Some(dying_started));
        assert_eq!(
            store
                .complete(
                    &dying.key,
                    owners[1].duplicate(),
                    &receipt,
                    Duration::from_secs(60)
                )
                .await
                .unwrap(),
            Fenced::NotOwner,
            "taken over: the old owner's late complete is refused"
        );

        // The result's text is the one version 2 wrote, byte for byte.
        let client = store.checkout().await.unwrap();
        let sql = format!(
            "SELECT result::text FROM {} WHERE key = $1",
            quote(&store.table)
        );
        let row = client.query_one(&sql, &[&done.key.as_str()]).await.unwrap();
        assert_eq!(row.get::<_, &str>(0), result_text);

        // A process of the old build, still connected, is told why its claims fail.
        let op = derived(6);
        let err = client
            .query_one(
                &v2.claim,
                &[
                    &op.key.as_str(),
                    &OwnerToken::generate().as_str(),
                    &op.fingerprint.as_str(),
                    &60_000_i64,
                ],
            )
            .await
            .unwrap_err();
        let text = err
            .as_db_error()
            .map(|db| db.message().to_owned())
            .unwrap_or_default();
        assert!(
            text.contains("schema version 3") && text.contains("upgrade"),
            "{err:?}"
        );
    }

    impl PostgresStore {
        /// `started_at` of a row, read directly (version 2 has no `get` of this build).
        async fn get_at_v2_started(&self, client: &Object, key: &OperationKey) -> SystemTime {
            let sql = format!(
                "SELECT started_at FROM {} WHERE key = $1",
                quote(&self.table)
            );
            client
                .query_one(&sql, &[&key.as_str()])
                .await
                .unwrap()
                .get(0)
        }
    }
}
