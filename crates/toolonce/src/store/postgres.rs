//! The PostgreSQL store: entries in one table, shared by every process and machine that can
//! reach the database. Each store operation is one statement (one round trip) on a pooled
//! connection with cached prepared statements; leases and retention are timed by the
//! database's clock. The schema comes from a versioned migration, applied on connect or by
//! [`PostgresStore::migrate`].

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use deadpool_postgres::tokio_postgres::error::SqlState;
use deadpool_postgres::tokio_postgres::types::ToSql;
use deadpool_postgres::tokio_postgres::{self, NoTls, Row};
use deadpool_postgres::{
    ClientWrapper, Hook, Manager, ManagerConfig, Object, Pool, PoolError, QueueMode,
    RecyclingMethod, Runtime,
};
use serde_json::Value;

use super::{
    About, Claim, ClaimRequest, Entry, EntryState, Fenced, ListQuery, OwnerToken, Page, Resolution,
    Resolved, State, Store, redact_url,
};
use tls::TlsOptions;

mod schema;
mod tls;
use crate::key::{Fingerprint, OperationKey};
use crate::tool::ToolError;
use crate::{Error, Result};
#[cfg(test)]
use schema::migration;
use schema::{migrate_on, too_new, version_of};

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

/// Options of a [`PostgresStore`], from [`PostgresStore::builder`].
///
/// ```no_run
/// # async fn f() -> toolonce::Result<()> {
/// use std::time::Duration;
/// use toolonce::store::postgres::PostgresStore;
///
/// let store = PostgresStore::builder("postgres://app@db.internal/app")
///     .table("agent_operations")
///     .pool_size(32)
///     .connect_timeout(Duration::from_secs(3))
///     .connect()
///     .await?;
/// # let _ = store; Ok(()) }
/// ```
#[derive(Clone)]
#[must_use]
pub struct PostgresStoreBuilder {
    url: String,
    table: String,
    pool_size: usize,
    migrate: bool,
    connect_timeout: Duration,
    wait_timeout: Duration,
    operation_timeout: Option<Duration>,
}

impl fmt::Debug for PostgresStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStoreBuilder")
            .field("url", &redact_url(&self.url))
            .field("table", &self.table)
            .field("pool_size", &self.pool_size)
            .field("migrate", &self.migrate)
            .field("connect_timeout", &self.connect_timeout)
            .field("wait_timeout", &self.wait_timeout)
            .field("operation_timeout", &self.operation_timeout)
            .finish_non_exhaustive()
    }
}

impl PostgresStoreBuilder {
    /// The table of the entries (default [`DEFAULT_TABLE`]): 1 to 52 ASCII letters, digits and
    /// underscores, not starting with a digit. It is used quoted, so its case is kept. To put
    /// it in another schema, set the `search_path` in the URL
    /// (`?options=-c%20search_path%3Dmyschema`).
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// The most connections the pool opens (default 16). Concurrent operations beyond that
    /// wait for a free connection, up to the [wait timeout](Self::wait_timeout).
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// Whether [`connect`](Self::connect) applies the migration (default yes). Without it,
    /// `connect` only checks that the table's schema is not newer than this build knows, and
    /// [`PostgresStore::migrate`] applies it when the program (or an operator) says so.
    pub fn migrate_on_connect(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
        self
    }

    /// How long opening one connection may take, from TCP connect to authentication (default
    /// 5 s). A server that is down refuses at once; an unreachable host costs this long.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long an operation waits for a free connection when all are busy (default 10 s).
    pub fn wait_timeout(mut self, timeout: Duration) -> Self {
        self.wait_timeout = timeout;
        self
    }

    /// How long one statement may take before the operation reports [`Error::Unavailable`]
    /// and its connection is closed (default: no limit of its own).
    ///
    /// Without it, a dead server or a cut network is still noticed by the connection itself:
    /// unless the URL says otherwise, TCP keepalives probe an idle or waiting connection after
    /// 10 s (every 5 s, 3 probes) and `tcp_user_timeout` drops one whose requests stay
    /// unacknowledged for 30 s. What only this timeout bounds is a server process that is
    /// alive but stuck (its kernel answers for it). It costs a timer per statement, which on a
    /// runtime with no other timer pending wakes a parked worker thread: measurable next to a
    /// sub-millisecond round trip.
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = Some(timeout);
        self
    }

    /// Builds the pool, checks that the server answers, and applies the migration (unless
    /// turned off).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a malformed URL or table name, or an `sslmode` this build cannot
    /// honour; [`Error::Unavailable`] when the server cannot be reached, [`Error::Store`] when
    /// it refuses (wrong password, missing database, a schema newer than this build knows) or
    /// the TLS handshake fails (a certificate that fails the `sslmode`'s check, a server
    /// without TLS where TLS is required).
    pub async fn connect(self) -> Result<PostgresStore> {
        check_table_name(&self.table)?;
        if self.pool_size == 0 {
            return Err(Error::Config("the pool size must be at least 1".into()));
        }
        let (pg, connector) = driver(&self.url)?;
        let sql = Arc::new(Sql::new(&self.table));
        // `Fast` recycling only checks that the connection task is alive, at no cost: a
        // connection whose server went away ends its task when the socket closes. `Verified`
        // would spend a round trip on every checkout. A connection broken without the socket
        // noticing fails its next statement, and `run` discards it then.
        let config = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let manager = match connector {
            None => Manager::from_config(pg, NoTls, config),
            #[cfg(feature = "postgres-tls")]
            Some(connector) => Manager::from_config(pg, connector, config),
            #[cfg(not(feature = "postgres-tls"))]
            Some(never) => match never {},
        };
        let prepare = Arc::clone(&sql);
        let pool = Pool::builder(manager)
            .max_size(self.pool_size)
            // Last in, first out: a caller gets the connection it just returned, whose server
            // process has the claim function and the pages hot. First in, first out rotates
            // one caller through every connection the pool ever opened, and halves one
            // caller's replay rate once the pool has grown to 8 (measured: 6.8k → 3.5k ops/s).
            .queue_mode(QueueMode::Lifo)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(self.wait_timeout))
            .create_timeout(Some(self.connect_timeout))
            .recycle_timeout(Some(self.connect_timeout))
            .post_create(Hook::async_fn(move |client: &mut ClientWrapper, _| {
                let sql = Arc::clone(&prepare);
                Box::pin(async move {
                    prepare_all(client, &sql).await;
                    Ok(())
                })
            }))
            .build()
            .map_err(|e| Error::Config(format!("cannot build the connection pool: {e}")))?;
        let store = PostgresStore {
            pool,
            table: self.table,
            sql,
            operation_timeout: self.operation_timeout,
        };
        if self.migrate {
            store.migrate().await?;
        } else {
            let version = store.schema_version().await?;
            if version > SCHEMA_VERSION {
                return Err(too_new(&store.table, version));
            }
            if (1..SCHEMA_VERSION).contains(&version) {
                // The statements of this build need the columns and the claim function of the
                // current version: until it is applied, operations fail.
                tracing::warn!(
                    target: "toolonce",
                    table = %store.table,
                    version,
                    expected = SCHEMA_VERSION,
                    "the table's schema is older than this build's, and its operations fail \
                     until PostgresStore::migrate (or a connect with migration on) upgrades it"
                );
            }
        }
        Ok(store)
    }
}

/// The TLS connector of a build: rustls, or none at all without `postgres-tls` (a build that
/// refuses every mode needing TLS, so the `Some` case cannot happen).
#[cfg(feature = "postgres-tls")]
type Connector = tokio_postgres_rustls::MakeRustlsConnect;
#[cfg(not(feature = "postgres-tls"))]
type Connector = std::convert::Infallible;

/// The driver's settings and TLS connector for a store URL: what every connection of the
/// store, and every [`connect_client`] connection, is made with.
fn driver(url: &str) -> Result<(tokio_postgres::Config, Option<Connector>)> {
    let (conninfo, tls) = TlsOptions::take(url)?;
    let connector = tls.connector()?;
    let mut pg: tokio_postgres::Config = conninfo
        .parse()
        .map_err(|e| Error::Config(format!("invalid PostgreSQL URL: {e}")))?;
    pg.ssl_mode(tls.driver_mode());
    if pg.get_application_name().is_none() {
        pg.application_name("toolonce");
    }
    // Notice a dead peer in tens of seconds rather than the kernel's default hours; see
    // `operation_timeout`. Settings the URL made are kept (2 h idle is the driver default).
    if pg.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
        pg.keepalives_idle(Duration::from_secs(10));
    }
    if pg.get_keepalives_interval().is_none() {
        pg.keepalives_interval(Duration::from_secs(5));
    }
    if pg.get_keepalives_retries().is_none() {
        pg.keepalives_retries(3);
    }
    if pg.get_tcp_user_timeout().is_none() {
        pg.tcp_user_timeout(Duration::from_secs(30));
    }
    Ok((pg, connector))
}

/// One driver connection made as the store makes each of its own (the URL's `sslmode`,
/// `sslrootcert` and certificate check, keepalives, application name), its connection task
/// spawned on the current Tokio runtime. For programs that run their own SQL beside a store
/// and want it to pay what the store's statements pay, as `toolonce bench`'s raw floor does.
///
/// # Errors
///
/// [`Error::Config`] for a malformed URL or an `sslmode` this build cannot honour;
/// [`Error::Unavailable`] when the server cannot be reached; [`Error::Store`] when it refuses
/// the connection (a wrong password, a failed TLS handshake).
pub async fn connect_client(url: &str) -> Result<tokio_postgres::Client> {
    let (pg, connector) = driver(url)?;
    let connected = match connector {
        None => pg.connect(NoTls).await.map(|(client, connection)| {
            tokio::spawn(connection);
            client
        }),
        #[cfg(feature = "postgres-tls")]
        Some(connector) => pg.connect(connector).await.map(|(client, connection)| {
            tokio::spawn(connection);
            client
        }),
        #[cfg(not(feature = "postgres-tls"))]
        Some(never) => match never {},
    };
    connected.map_err(connect_error)
}

/// A failure to open a connection: a refused TLS handshake is the store's answer (the URL
/// asks for what the server will not do), anything else is classified like a failed statement.
fn connect_error(e: tokio_postgres::Error) -> Error {
    if tls::is_tls_refusal(&e) {
        Error::store(e)
    } else {
        classify(&e).into_error(e)
    }
}

/// Prepares every statement of the store on a new connection, all at once: the requests are
/// pipelined, so this costs about one round trip, and no store operation later pays a prepare.
/// Failures are ignored (the table may not be migrated yet): the statement is then prepared
/// on first use.
async fn prepare_all(client: &ClientWrapper, sql: &Sql) {
    let results =
        futures_util::future::join_all(sql.all().map(|text| client.prepare_cached(text))).await;
    if let Some(Err(e)) = results.into_iter().find(|r| r.is_err()) {
        tracing::debug!(target: "toolonce", error = %e, "statements not prepared in advance");
    }
}

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
        PostgresStoreBuilder {
            url: url.into(),
            table: DEFAULT_TABLE.to_owned(),
            pool_size: 16,
            migrate: true,
            connect_timeout: Duration::from_secs(5),
            wait_timeout: Duration::from_secs(10),
            operation_timeout: None,
        }
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

    /// Takes a connection from the pool.
    async fn checkout(&self) -> Result<Object> {
        self.pool.get().await.map_err(|e| match e {
            PoolError::Timeout(kind) => Error::unavailable(format!(
                "timed out waiting for a PostgreSQL connection ({kind:?})"
            )),
            PoolError::Backend(e) => connect_error(e),
            PoolError::Closed => Error::store("the connection pool is closed"),
            other => Error::store(other.to_string()),
        })
    }

    /// Runs one prepared statement: one round trip once the connection has it prepared.
    ///
    /// Serialization failures and deadlocks are retried (they roll the statement back); any
    /// other failure is classified, and the connection is discarded when it may be broken, so
    /// the pool opens a fresh one for the next operation.
    async fn run(&self, sql: &str, params: &[&(dyn ToSql + Sync)], exec: Exec) -> Result<Output> {
        let mut attempt = 1;
        loop {
            let client = self.checkout().await?;
            let statement = async {
                let statement = client.prepare_cached(sql).await?;
                match exec {
                    Exec::Rows => client.query(&statement, params).await.map(Output::Rows),
                    Exec::Count => client.execute(&statement, params).await.map(Output::Count),
                }
            };
            let outcome = match self.operation_timeout {
                None => statement.await,
                Some(limit) => match tokio::time::timeout(limit, statement).await {
                    Ok(outcome) => outcome,
                    Err(_elapsed) => {
                        // The statement may still be running; this connection's answers can
                        // no longer be trusted to arrive, so close it.
                        drop(Object::take(client));
                        return Err(Error::unavailable(format!(
                            "PostgreSQL did not answer within {limit:?}"
                        )));
                    }
                },
            };
            let error = match outcome {
                Ok(output) => return Ok(output),
                Err(e) => e,
            };
            let class = classify(&error);
            if class.broken {
                drop(Object::take(client));
            }
            if class.kind == Kind::Rollback && attempt < ATTEMPTS {
                attempt += 1;
                continue;
            }
            return Err(class.into_error(error));
        }
    }

    async fn rows(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        match self.run(sql, params, Exec::Rows).await? {
            Output::Rows(rows) => Ok(rows),
            Output::Count(_) => unreachable!("Exec::Rows answers rows"),
        }
    }

    async fn count(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        match self.run(sql, params, Exec::Count).await? {
            Output::Count(n) => Ok(n),
            Output::Rows(_) => unreachable!("Exec::Count answers a count"),
        }
    }
}

#[derive(Clone, Copy)]
enum Exec {
    Rows,
    Count,
}

enum Output {
    Rows(Vec<Row>),
    Count(u64),
}

/// The statements of the store for one table, prepared once per connection.
struct Sql {
    /// `claim` calls the PL/pgSQL function of the migration. It is atomic, and never reports a
    /// win without the entry written, because:
    ///
    /// - The caller wins only through its own `INSERT … ON CONFLICT DO UPDATE … WHERE expired`
    ///   returning the row it wrote. The primary key makes concurrent inserts of one key
    ///   conflict, and `ON CONFLICT DO UPDATE` locks the conflicting row and checks the `WHERE`
    ///   on its newest committed version, so of any number of concurrent claimers exactly one
    ///   inserts (or takes over the expired row) and every other one sees that row.
    /// - A loser returns a row that it read, live, with a snapshot taken inside the same call.
    ///   When the upsert finds a live row that its snapshot missed (committed concurrently: the
    ///   anomaly of reading through a CTE, whose plain `SELECT` uses the statement's snapshot),
    ///   the loop reads again; each statement of a `VOLATILE` function under `READ COMMITTED`
    ///   takes a new snapshot, which sees that committed row. The upsert still holds the row's
    ///   lock, so it cannot vanish in between; and both checks use the same `now()`, so the
    ///   second read finds it live. A row that vanishes before the upsert (a transient failure
    ///   deleted it) makes the upsert insert: the caller wins with its row written, never by
    ///   assuming.
    /// - A duplicate of a live entry (the common replay) is a read only: no row lock, no
    ///   transaction id, no WAL, no commit flush, so duplicates do not queue behind each other
    ///   on the row. An upsert that always updates would also be atomic, but would write a
    ///   new row version and flush a commit for every replay.
    /// - The two writes to a live running row (the caller's own entry renewed; an `unknown`
    ///   one taken over) are `UPDATE`s fenced on what the read saw (the owner, the state, the
    ///   lease run out), re-checked by PostgreSQL on the newest row version after any wait for
    ///   its lock. Of concurrent takers of one `unknown` entry the first installs its token
    ///   and a live lease, so the others' fences match nothing, and they loop to read the
    ///   winner's entry, live, as losers.
    ///
    /// The statement first reads a settled live row with a plain `SELECT` (`UNION ALL … LIMIT
    /// 1`: the function is called only when that finds nothing). A settled row only ever goes
    /// away (expiry, delete), so answering it from the statement's snapshot is what the
    /// function would answer; it spares the common replay the PL/pgSQL call, which costs the
    /// server about as much again as the read (measured with pgbench: 8.7–10.4k against
    /// 15.1–16.5k statements/s on one connection). A first-time claim pays one more index
    /// lookup.
    claim: String,
    renew: String,
    complete: String,
    fail_sticky: String,
    fail_delete: String,
    get: String,
    list: String,
    delete: String,
    purge: String,
    resolve_done: String,
    resolve_failed: String,
    resolve_release: String,
}

/// The columns of the claim function's row `c`, in the order [`PostgresStore::claim`] and
/// [`decode`] read them: `state` there is already `unknown` for a running row whose lease ran
/// out, and `expires_at` the lease deadline of a running row.
///
/// The function is called in a select list (`SELECT f(…) AS c OFFSET 0`: once, `OFFSET 0`
/// keeps the subquery from being flattened, which would call it once per column) rather than
/// in `FROM`: a function scan builds the function's result type from its 15 `OUT` parameters
/// at the start of every execution, even when the settled read answers and the function is
/// never called. Measured on the server with callgrind (single-user backend, 1,000 prepared
/// executions of a replay): 262k instructions per execution in `FROM`, 248k in the select list.
const CALLED_COLUMNS: &str = "(c).won, (c).took_over, (c).state, (c).owner, (c).fingerprint, \
     (c).started_at, (c).expires_at, (c).settled_at, (c).result, (c).error, (c).scope, \
     (c).tool, (c).detail, (c).first_started_at, (c).attempts";

/// The state of a row as the store reports it: `unknown` is a running row whose lease ran out.
const STATE: &str =
    "(CASE WHEN state = 'running' AND lease_until <= now() THEN 'unknown' ELSE state END)";

/// The columns of an entry read from the table, in the order [`decode`] reads them (the same
/// as [`CALLED_COLUMNS`], after `won` and `took_over`).
const ENTRY_COLUMNS: &str = "(CASE WHEN state = 'running' AND lease_until <= now() \
     THEN 'unknown' ELSE state END), owner, fingerprint, started_at, \
     (CASE WHEN state = 'running' THEN lease_until ELSE expires_at END), settled_at, \
     result::text, error::text, scope, tool, detail, first_started_at, attempts";

/// How many expired rows one purge statement deletes: batches keep each transaction short.
const PURGE_BATCH: i64 = 10_000;

/// The fence of every owner's write: the entry is still running (its lease live or run out,
/// that is `unknown`), held by this owner, and not past its final expiry. A takeover installs
/// another token, so only an owner nobody replaced can still settle: the tool did run, and
/// recording what it did beats leaving the entry `unknown`.
const FENCE: &str = "key = $1 AND state = 'running' AND owner = $2 AND expires_at > now()";

/// The fence of an operator's settle: the entry is running or `unknown`, whoever owns it.
const UNSETTLED: &str = "key = $1 AND state = 'running' AND expires_at > now()";

impl Sql {
    fn new(table: &str) -> Sql {
        let t = quote(table);
        let claim = quote(&format!("{table}_claim"));
        let lease = "now() + $3::bigint * interval '1 millisecond'";
        let retention = "now() + $4::bigint * interval '1 millisecond'";
        Sql {
            claim: format!(
                "(SELECT false, false, state, owner, fingerprint, started_at, expires_at, \
                 settled_at, result::text, error::text, scope, tool, detail, first_started_at, \
                 attempts FROM {t} WHERE key = $1 AND expires_at > now() AND state <> 'running') \
                 UNION ALL \
                 (SELECT {CALLED_COLUMNS} FROM (SELECT {claim}(\
                 $1, $2, $3, $4::bigint, $5::bigint, $6::boolean, $7, $8, $9) AS c OFFSET 0) AS called) \
                 LIMIT 1"
            ),
            // The lease moves, and the final expiry with it: `expires_at - lease_until` is the
            // retention the claim asked for (the `SET` reads the row's old values).
            renew: format!(
                "UPDATE {t} SET lease_until = {lease}, \
                 expires_at = {lease} + (expires_at - lease_until) WHERE {FENCE}"
            ),
            complete: format!(
                "UPDATE {t} SET state = 'done', owner = NULL, lease_until = NULL, \
                 result = $3::text::json, settled_at = now(), expires_at = {retention} \
                 WHERE {FENCE}"
            ),
            fail_sticky: format!(
                "UPDATE {t} SET state = 'failed', owner = NULL, lease_until = NULL, \
                 error = $3::text::json, settled_at = now(), expires_at = {retention} \
                 WHERE {FENCE}"
            ),
            fail_delete: format!("DELETE FROM {t} WHERE {FENCE}"),
            get: format!("SELECT {ENTRY_COLUMNS} FROM {t} WHERE key = $1 AND expires_at > now()"),
            // `key > $1` with '' for the first page keeps one plan that walks the primary key
            // in order; the filters are checked on the rows it visits.
            list: format!(
                "SELECT key, {ENTRY_COLUMNS} FROM {t} \
                 WHERE key > $1 AND expires_at > now() AND ($2::text IS NULL OR {STATE} = $2) \
                 AND ($4::text IS NULL OR scope = $4) AND ($5::text IS NULL OR tool = $5) \
                 ORDER BY key LIMIT $3"
            ),
            delete: format!("DELETE FROM {t} WHERE key = $1 RETURNING expires_at > now()"),
            // Each row by its own expiry, through the `expires_at` index. Rows locked by a
            // claim taking them over are skipped rather than waited for.
            purge: format!(
                "DELETE FROM {t} WHERE key IN (\
                 SELECT key FROM {t} WHERE expires_at <= now() \
                 LIMIT $1 FOR UPDATE SKIP LOCKED)"
            ),
            resolve_done: format!(
                "UPDATE {t} SET state = 'done', owner = NULL, lease_until = NULL, \
                 result = $2::text::json, settled_at = now(), \
                 expires_at = now() + $3::bigint * interval '1 millisecond' WHERE {UNSETTLED}"
            ),
            resolve_failed: format!(
                "UPDATE {t} SET state = 'failed', owner = NULL, lease_until = NULL, \
                 error = $2::text::json, settled_at = now(), \
                 expires_at = now() + $3::bigint * interval '1 millisecond' WHERE {UNSETTLED}"
            ),
            resolve_release: format!("DELETE FROM {t} WHERE {UNSETTLED}"),
        }
    }

    fn all(&self) -> impl Iterator<Item = &str> {
        [
            &self.claim,
            &self.renew,
            &self.complete,
            &self.fail_sticky,
            &self.fail_delete,
            &self.get,
            &self.list,
            &self.delete,
            &self.purge,
            &self.resolve_done,
            &self.resolve_failed,
            &self.resolve_release,
        ]
        .into_iter()
        .map(String::as_str)
    }
}

/// Checks a table name: 1 to [`MAX_TABLE_NAME`] ASCII letters, digits and underscores, not
/// starting with a digit, and not the version table. With that alphabet the quoted identifier
/// needs no escaping, and no name can smuggle SQL.
fn check_table_name(name: &str) -> Result<()> {
    let bad = |why: &str| Err(Error::Config(format!("invalid table name {name:?}: {why}")));
    if name.is_empty() || name.len() > MAX_TABLE_NAME {
        return bad(&format!("use 1 to {MAX_TABLE_NAME} characters"));
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return bad("use only ASCII letters, digits and underscores");
    }
    if name.as_bytes()[0].is_ascii_digit() {
        return bad("it must not start with a digit");
    }
    if name.eq_ignore_ascii_case(VERSION_TABLE) {
        return bad("that name is taken by the schema version table");
    }
    Ok(())
}

/// Quotes a checked identifier (see [`check_table_name`]: nothing inside needs escaping, but a
/// doubled quote is still the rule).
fn quote(identifier: &str) -> String {
    format!("\"{}\"", identifier.replace('"', "\"\""))
}

/// Durations as whole milliseconds for the database, capped at [`MAX_MILLIS`].
fn millis(d: Duration) -> i64 {
    i64::try_from(super::millis(d))
        .unwrap_or(i64::MAX)
        .min(MAX_MILLIS)
}

/// What a failed statement means for the caller and for its connection.
struct Class {
    kind: Kind,
    /// The connection may be unusable: close it rather than return it to the pool.
    broken: bool,
}

#[derive(PartialEq, Eq)]
enum Kind {
    /// The server cannot be reached or cannot serve now: a retry may help.
    Unavailable,
    /// The statement was rolled back by a serialization failure or a deadlock: run it again.
    Rollback,
    /// Refused for good.
    Refused,
}

impl Class {
    fn into_error(self, e: tokio_postgres::Error) -> Error {
        match self.kind {
            Kind::Unavailable | Kind::Rollback => Error::unavailable(e),
            Kind::Refused => Error::store(e),
        }
    }
}

/// Sorts a driver error by SQLSTATE (server errors) or by cause (the rest).
fn classify(e: &tokio_postgres::Error) -> Class {
    let Some(db) = e.as_db_error() else {
        // Not an answer from the server: the socket failed or closed (an I/O cause, or none
        // for a closed connection or a connect timeout), or the driver could not encode or
        // decode a value (a cause of another type). Either way the connection is suspect.
        let io =
            e.is_closed() || std::error::Error::source(e).is_none_or(|s| s.is::<std::io::Error>());
        return Class {
            kind: if io { Kind::Unavailable } else { Kind::Refused },
            broken: true,
        };
    };
    sqlstate_class(db.code().code())
}

fn sqlstate_class(code: &str) -> Class {
    let (kind, broken) = match code {
        // Connection exceptions; the server shutting down, crashed, or starting up; a standby
        // that cannot write (a failover in progress: a new connection may reach the primary).
        c if c.starts_with("08") => (Kind::Unavailable, true),
        "57P01" | "57P02" | "57P03" | "25006" => (Kind::Unavailable, true),
        // Too many connections, out of memory or disk; a statement timeout.
        c if c.starts_with("53") => (Kind::Unavailable, false),
        "57014" => (Kind::Unavailable, false),
        "40001" | "40P01" => (Kind::Rollback, false),
        _ => (Kind::Refused, false),
    };
    Class { kind, broken }
}

/// Classifies an error outside [`PostgresStore::run`], discarding the connection if broken.
fn discard_if_broken(client: Object, e: tokio_postgres::Error) -> Error {
    let class = classify(&e);
    if class.broken {
        drop(Object::take(client));
    }
    class.into_error(e)
}

/// Decodes the entry columns ([`ENTRY_COLUMNS`]) starting at column `at`.
fn decode(key: OperationKey, row: &Row, at: usize) -> Result<Entry> {
    let corrupt = |what: &str, e: &dyn fmt::Display| Error::corrupt(&key, format!("{what}: {e}"));
    let state: String = row.try_get(at).map_err(|e| corrupt("state", &e))?;
    let owner: Option<String> = row.try_get(at + 1).map_err(|e| corrupt("owner", &e))?;
    let fingerprint: Option<String> = row
        .try_get(at + 2)
        .map_err(|e| corrupt("fingerprint", &e))?;
    let started_at: SystemTime = row.try_get(at + 3).map_err(|e| corrupt("started_at", &e))?;
    // NULL only for a running row nobody gave a lease (the schema's check forbids it).
    let expires_at: Option<SystemTime> =
        row.try_get(at + 4).map_err(|e| corrupt("expires_at", &e))?;
    let settled_at: Option<SystemTime> =
        row.try_get(at + 5).map_err(|e| corrupt("settled_at", &e))?;
    let fingerprint = fingerprint
        .map(|f| f.parse::<Fingerprint>())
        .transpose()
        .map_err(|e| corrupt("fingerprint", &e))?;
    let state = match state.as_str() {
        "running" => EntryState::Running { owner },
        "unknown" => EntryState::Unknown { owner },
        "done" => {
            let text: Option<&str> = row.try_get(at + 6).map_err(|e| corrupt("result", &e))?;
            let text = text.ok_or_else(|| Error::corrupt(&key, "a done entry without a result"))?;
            EntryState::Done {
                result: serde_json::from_str(text).map_err(|e| corrupt("result", &e))?,
                completed_at: settled_at,
            }
        }
        "failed" => {
            let text: Option<&str> = row.try_get(at + 7).map_err(|e| corrupt("error", &e))?;
            let text =
                text.ok_or_else(|| Error::corrupt(&key, "a failed entry without an error"))?;
            EntryState::Failed {
                error: serde_json::from_str(text).map_err(|e| corrupt("error", &e))?,
                failed_at: settled_at,
            }
        }
        other => return Err(Error::corrupt(&key, format!("unknown state {other:?}"))),
    };
    let text = |i: usize, what: &str| -> Result<Option<String>> {
        row.try_get(at + i).map_err(|e| corrupt(what, &e))
    };
    let about = About::empty()
        .with_scope(text(8, "scope")?)
        .with_tool(text(9, "tool")?)
        .with_detail(text(10, "detail")?);
    let first_started_at: Option<SystemTime> = row
        .try_get(at + 11)
        .map_err(|e| corrupt("first_started_at", &e))?;
    let attempts: i32 = row.try_get(at + 12).map_err(|e| corrupt("attempts", &e))?;
    let attempts = u32::try_from(attempts).map_err(|e| corrupt("attempts", &e))?;
    Ok(Entry::new(key, fingerprint, started_at, expires_at, state)
        .with_about(about)
        .with_first_started_at(first_started_at)
        .with_attempts(attempts)
        .with_settled_at(settled_at))
}

fn fenced(rows: u64) -> Fenced {
    if rows == 0 {
        Fenced::NotOwner
    } else {
        Fenced::Applied
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
    use super::*;

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

    #[test]
    fn table_names_are_checked_before_they_reach_sql() {
        for good in [
            "toolonce_entries",
            "T",
            "_x",
            "agent_ops_2",
            &"a".repeat(52),
        ] {
            assert!(check_table_name(good).is_ok(), "{good:?}");
        }
        for bad in [
            "",
            "1abc",
            "a-b",
            "a b",
            "a\"b",
            "x; DROP TABLE y",
            "schema.table",
            "é",
            "toolonce_schema",
            &"a".repeat(53),
        ] {
            assert!(
                matches!(check_table_name(bad), Err(Error::Config(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn durations_become_capped_milliseconds() {
        assert_eq!(millis(Duration::from_millis(1500)), 1500);
        assert_eq!(millis(Duration::MAX), MAX_MILLIS);
    }

    #[test]
    fn sqlstates_say_whether_a_retry_may_help_and_whether_the_connection_is_broken() {
        let c = sqlstate_class("08006");
        assert!(c.kind == Kind::Unavailable && c.broken);
        let c = sqlstate_class("57P01");
        assert!(c.kind == Kind::Unavailable && c.broken);
        let c = sqlstate_class("53300");
        assert!(c.kind == Kind::Unavailable && !c.broken);
        assert!(sqlstate_class("40001").kind == Kind::Rollback);
        assert!(sqlstate_class("40P01").kind == Kind::Rollback);
        let c = sqlstate_class("42P01");
        assert!(c.kind == Kind::Refused && !c.broken);
        assert!(sqlstate_class("28P01").kind == Kind::Refused);
    }

    #[test]
    fn every_statement_names_the_quoted_table() {
        let sql = Sql::new("My_Table");
        for text in sql.all() {
            assert!(text.contains("\"My_Table"), "{text}");
        }
        for version in 1..=SCHEMA_VERSION {
            assert!(migration(version, "My_Table").contains("\"My_Table_claim\""));
        }
    }
}
