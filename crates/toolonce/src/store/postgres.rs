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
    ClientWrapper, Hook, Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime,
};
use serde_json::Value;

use super::{
    Claim, ClaimRequest, Entry, EntryState, Fenced, ListQuery, OwnerToken, Page, Resolution,
    Resolved, State, Store, redact_url,
};
use tls::TlsOptions;

mod tls;
use crate::key::{Fingerprint, OperationKey};
use crate::tool::ToolError;
use crate::{Error, Result};

/// The table the entries live in unless [`PostgresStoreBuilder::table`] says otherwise.
pub const DEFAULT_TABLE: &str = "toolonce_entries";

/// The schema version this build creates and understands. [`PostgresStore::migrate`] brings an
/// older table up to it; a table of a newer version is refused, since an older build could
/// misread or damage it.
pub const SCHEMA_VERSION: u32 = 2;

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
        let (conninfo, tls) = TlsOptions::take(&self.url)?;
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
                // Still usable (the statements did not change), but a re-sent claim is not
                // recognised as the caller's own until the claim function is upgraded.
                tracing::warn!(
                    target: "toolonce",
                    table = %store.table,
                    version,
                    expected = SCHEMA_VERSION,
                    "the table's schema is older than this build's; run PostgresStore::migrate \
                     (or connect with migration on) so that a claim whose reply was lost can be \
                     retried"
                );
            }
        }
        Ok(store)
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
/// `fingerprint`, `started_at`, `expires_at` (the lease while running, the retention once
/// settled), `settled_at`, and `result` or `error` as `json`. An expired row counts as absent
/// for every operation; [`purge_expired`](Store::purge_expired) deletes such rows, using the
/// index on `expires_at`.
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
/// fence (`state = 'running' AND owner = $2 AND expires_at > now()`). Under PostgreSQL's default
/// `READ COMMITTED`, an `UPDATE` that finds its row changed by a concurrent transaction
/// re-evaluates that clause on the newest version, so a reclaim that happened meanwhile makes
/// the stale owner's write match nothing.
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
            PoolError::Backend(e) if tls::is_tls_refusal(&e) => Error::store(e),
            PoolError::Backend(e) => classify(&e).into_error(e),
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

/// Applies the missing migration steps in one transaction. The outer error is the database's,
/// the inner one a refusal (a newer schema).
async fn migrate_on(
    client: &mut Object,
    table: &str,
    target: u32,
) -> std::result::Result<Result<u32>, tokio_postgres::Error> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    tx.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (
             table_name text PRIMARY KEY,
             version integer NOT NULL,
             migrated_at timestamptz NOT NULL DEFAULT now()
         )"
    ))
    .await?;
    let row = tx
        .query_opt(
            &format!("SELECT version FROM {VERSION_TABLE} WHERE table_name = $1 FOR UPDATE"),
            &[&table],
        )
        .await?;
    let from = match row.map_or(Ok(0), |r| version_of(&r)) {
        Ok(v) => v,
        Err(e) => return Ok(Err(e)),
    };
    if from > SCHEMA_VERSION {
        // Dropping the transaction rolls it back.
        return Ok(Err(too_new(table, from)));
    }
    for version in from + 1..=target {
        tx.batch_execute(&migration(version, table)).await?;
    }
    if from < target {
        let version = i32::try_from(target).expect("a small version number");
        tx.execute(
            &format!(
                "INSERT INTO {VERSION_TABLE} (table_name, version) VALUES ($1, $2)
                 ON CONFLICT (table_name)
                 DO UPDATE SET version = EXCLUDED.version, migrated_at = now()"
            ),
            &[&table, &version],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(Ok(target.saturating_sub(from)))
}

fn version_of(row: &Row) -> Result<u32> {
    let v: i32 = row
        .try_get(0)
        .map_err(|e| Error::store(format!("unreadable {VERSION_TABLE}.version: {e}")))?;
    u32::try_from(v).map_err(|_| Error::store(format!("negative schema version {v}")))
}

fn too_new(table: &str, version: u32) -> Error {
    Error::store(format!(
        "table {table:?} has schema version {version}, newer than version {SCHEMA_VERSION} that \
         this build of toolonce knows: upgrade toolonce, or use another table"
    ))
}

/// The statements of one migration step, for the (already validated) table name.
fn migration(version: u32, table: &str) -> String {
    let t = quote(table);
    let index = quote(&format!("{table}_expires_at"));
    let claim = quote(&format!("{table}_claim"));
    match version {
        1 => format!(
            r#"
CREATE TABLE IF NOT EXISTS {t} (
    key         text COLLATE "C" PRIMARY KEY,
    state       text NOT NULL CHECK (state IN ('running', 'done', 'failed')),
    owner       text,
    fingerprint text,
    started_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    settled_at  timestamptz,
    result      json,
    error       json
);
COMMENT ON TABLE {t} IS 'toolonce operation entries; schema version in {VERSION_TABLE}';
CREATE INDEX IF NOT EXISTS {index} ON {t} (expires_at);

-- claim(key, owner, fingerprint, lease_ms): see PostgresStore's Sql::new for why this is atomic.
CREATE OR REPLACE FUNCTION {claim}(
    p_key text, p_owner text, p_fingerprint text, p_lease_ms bigint,
    OUT won boolean, OUT state text, OUT owner text, OUT fingerprint text,
    OUT started_at timestamptz, OUT expires_at timestamptz, OUT settled_at timestamptz,
    OUT result text, OUT error text)
LANGUAGE plpgsql VOLATILE AS $claim$
#variable_conflict use_column
DECLARE
    e {t}%ROWTYPE;
BEGIN
    LOOP
        -- A live entry: the caller loses, and nothing is written.
        SELECT * INTO e FROM {t} AS t WHERE t.key = p_key AND t.expires_at > now();
        IF FOUND THEN
            won := false;
            EXIT;
        END IF;
        -- Absent, or expired: take it. The unique index decides between concurrent takers.
        INSERT INTO {t} AS t (key, state, owner, fingerprint, started_at, expires_at)
        VALUES (p_key, 'running', p_owner, p_fingerprint, now(),
                now() + p_lease_ms * interval '1 millisecond')
        ON CONFLICT (key) DO UPDATE
            SET state = EXCLUDED.state, owner = EXCLUDED.owner,
                fingerprint = EXCLUDED.fingerprint, started_at = EXCLUDED.started_at,
                expires_at = EXCLUDED.expires_at, settled_at = NULL, result = NULL, error = NULL
            WHERE t.expires_at <= now()
        RETURNING * INTO e;
        IF FOUND THEN
            won := true;
            EXIT;
        END IF;
        -- A live entry committed after the SELECT's snapshot: read it with a new one.
    END LOOP;
    state := e.state;
    owner := e.owner;
    fingerprint := e.fingerprint;
    started_at := e.started_at;
    expires_at := e.expires_at;
    settled_at := e.settled_at;
    result := e.result::text;
    error := e.error::text;
END
$claim$;
"#
        ),
        // Version 2: a claim that finds the caller's own running entry wins and renews its
        // lease, so a claim whose reply was lost can be retried (the caller now makes the owner
        // token). Same arguments and columns as version 1, so `CREATE OR REPLACE` swaps the
        // body in place, and processes of this version and the last agree on every other case.
        2 => format!(
            r#"
CREATE OR REPLACE FUNCTION {claim}(
    p_key text, p_owner text, p_fingerprint text, p_lease_ms bigint,
    OUT won boolean, OUT state text, OUT owner text, OUT fingerprint text,
    OUT started_at timestamptz, OUT expires_at timestamptz, OUT settled_at timestamptz,
    OUT result text, OUT error text)
LANGUAGE plpgsql VOLATILE AS $claim$
#variable_conflict use_column
DECLARE
    e {t}%ROWTYPE;
BEGIN
    LOOP
        SELECT * INTO e FROM {t} AS t WHERE t.key = p_key AND t.expires_at > now();
        IF FOUND THEN
            IF e.state <> 'running' OR e.owner IS DISTINCT FROM p_owner THEN
                -- Somebody else's live entry: the caller loses, and nothing is written.
                won := false;
                EXIT;
            END IF;
            -- The caller's own running entry (an earlier attempt of this claim applied):
            -- renew it, fenced like every owner's write. No row means it changed meanwhile.
            UPDATE {t} AS t SET expires_at = now() + p_lease_ms * interval '1 millisecond'
            WHERE t.key = p_key AND t.state = 'running' AND t.owner = p_owner
                AND t.expires_at > now()
            RETURNING * INTO e;
            IF FOUND THEN
                won := true;
                EXIT;
            END IF;
            CONTINUE;
        END IF;
        -- Absent, or expired: take it. The unique index decides between concurrent takers.
        INSERT INTO {t} AS t (key, state, owner, fingerprint, started_at, expires_at)
        VALUES (p_key, 'running', p_owner, p_fingerprint, now(),
                now() + p_lease_ms * interval '1 millisecond')
        ON CONFLICT (key) DO UPDATE
            SET state = EXCLUDED.state, owner = EXCLUDED.owner,
                fingerprint = EXCLUDED.fingerprint, started_at = EXCLUDED.started_at,
                expires_at = EXCLUDED.expires_at, settled_at = NULL, result = NULL, error = NULL
            WHERE t.expires_at <= now()
        RETURNING * INTO e;
        IF FOUND THEN
            won := true;
            EXIT;
        END IF;
        -- A live entry committed after the SELECT's snapshot: read it with a new one.
    END LOOP;
    state := e.state;
    owner := e.owner;
    fingerprint := e.fingerprint;
    started_at := e.started_at;
    expires_at := e.expires_at;
    settled_at := e.settled_at;
    result := e.result::text;
    error := e.error::text;
END
$claim$;
"#
        ),
        other => unreachable!("no migration to schema version {other}"),
    }
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
    claim: String,
    renew: String,
    complete: String,
    fail_sticky: String,
    fail_delete: String,
    get: String,
    list: String,
    delete: String,
    purge: String,
}

/// The columns of an entry, in the order [`decode`] reads them.
const ENTRY_COLUMNS: &str =
    "state, owner, fingerprint, started_at, expires_at, settled_at, result::text, error::text";

/// How many expired rows one purge statement deletes: batches keep each transaction short.
const PURGE_BATCH: i64 = 10_000;

/// The fence of every owner's write: the entry is still running, held by this owner, and its
/// lease has not expired.
const FENCE: &str = "key = $1 AND state = 'running' AND owner = $2 AND expires_at > now()";

impl Sql {
    fn new(table: &str) -> Sql {
        let t = quote(table);
        let claim = quote(&format!("{table}_claim"));
        let lease = "now() + $3::bigint * interval '1 millisecond'";
        let retention = "now() + $4::bigint * interval '1 millisecond'";
        Sql {
            claim: format!("SELECT won, {ENTRY_COLUMNS} FROM {claim}($1, $2, $3, $4)"),
            renew: format!("UPDATE {t} SET expires_at = {lease} WHERE {FENCE}"),
            complete: format!(
                "UPDATE {t} SET state = 'done', owner = NULL, result = $3::text::json, \
                 settled_at = now(), expires_at = {retention} WHERE {FENCE}"
            ),
            fail_sticky: format!(
                "UPDATE {t} SET state = 'failed', owner = NULL, error = $3::text::json, \
                 settled_at = now(), expires_at = {retention} WHERE {FENCE}"
            ),
            fail_delete: format!("DELETE FROM {t} WHERE {FENCE}"),
            get: format!("SELECT {ENTRY_COLUMNS} FROM {t} WHERE key = $1 AND expires_at > now()"),
            // `key > $1` with '' for the first page keeps one plan that walks the primary key
            // in order; the state filter is checked on the rows it visits.
            list: format!(
                "SELECT key, {ENTRY_COLUMNS} FROM {t} \
                 WHERE key > $1 AND expires_at > now() AND ($2::text IS NULL OR state = $2) \
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
    let expires_at: SystemTime = row.try_get(at + 4).map_err(|e| corrupt("expires_at", &e))?;
    let settled_at: Option<SystemTime> =
        row.try_get(at + 5).map_err(|e| corrupt("settled_at", &e))?;
    let fingerprint = fingerprint
        .map(|f| f.parse::<Fingerprint>())
        .transpose()
        .map_err(|e| corrupt("fingerprint", &e))?;
    let state = match state.as_str() {
        "running" => EntryState::Running { owner },
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
    Ok(Entry::new(
        key,
        fingerprint,
        started_at,
        Some(expires_at),
        state,
    ))
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
        let (key, fingerprint, owner, lease) = (req.key, req.fingerprint, req.owner, req.lease);
        let rows = self
            .rows(
                &self.sql.claim,
                &[
                    &key.as_str(),
                    &owner.as_str(),
                    &fingerprint.as_str(),
                    &millis(lease),
                ],
            )
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| Error::store("the claim function returned no row"))?;
        let won: bool = row
            .try_get(0)
            .map_err(|e| Error::corrupt(key, format!("won: {e}")))?;
        if won {
            Ok(Claim::Won)
        } else {
            Ok(Claim::Existing(decode(key.clone(), row, 1)?))
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
        let rows = self.rows(&self.sql.list, &[&after, &state, &limit]).await?;
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
        _key: &OperationKey,
        _resolution: &Resolution,
        _retention: Duration,
    ) -> Result<Resolved> {
        Err(Error::store(
            "resolve is not implemented yet for this store",
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

    /// A database left at version 1 by an earlier build (whose claim never answers `Won` for
    /// the caller's own running entry) is brought to the current version by `migrate`, and the
    /// upgraded claim function then does.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_table_migrated_by_version_one_upgrades_to_idempotent_claims() {
        let url = toolonce_testsupport::shared_postgres().create_unique_database();
        let store = PostgresStore::builder(url)
            .migrate_on_connect(false)
            .connect()
            .await
            .unwrap();
        let mut client = store.checkout().await.unwrap();
        assert_eq!(
            migrate_on(&mut client, &store.table, 1)
                .await
                .unwrap()
                .unwrap(),
            1
        );
        prepare_all(&client, &store.sql).await;
        drop(client);
        assert_eq!(store.schema_version().await.unwrap(), 1);

        let op = crate::key::derive("upgrade", "t", &serde_json::json!({"n": 1}), None).unwrap();
        let lease = Duration::from_secs(60);
        let owner = OwnerToken::generate();
        let first = store
            .claim(&ClaimRequest::new(&op.key, &op.fingerprint, &owner, lease))
            .await;
        assert!(matches!(first, Ok(Claim::Won)), "{first:?}");
        let again = store
            .claim(&ClaimRequest::new(&op.key, &op.fingerprint, &owner, lease))
            .await;
        assert!(
            matches!(again, Ok(Claim::Existing(_))),
            "version 1 does not know the caller's token: {again:?}"
        );

        assert_eq!(store.migrate().await.unwrap(), SCHEMA_VERSION - 1);
        assert_eq!(store.schema_version().await.unwrap(), SCHEMA_VERSION);
        let upgraded = store
            .claim(&ClaimRequest::new(&op.key, &op.fingerprint, &owner, lease))
            .await;
        assert!(matches!(upgraded, Ok(Claim::Won)), "{upgraded:?}");
        let other = store
            .claim(&ClaimRequest::new(
                &op.key,
                &op.fingerprint,
                &OwnerToken::generate(),
                lease,
            ))
            .await;
        assert!(matches!(other, Ok(Claim::Existing(_))), "{other:?}");
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
