//! Connections: the store handle ([`PostgresStore`]: its pool, table and statements), the
//! builder (URL, TLS, table, pool size, migration on connect), the driver's settings, the pool
//! and its checkout, and the running of one prepared statement with the retries a rolled-back
//! statement allows.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::tokio_postgres::types::ToSql;
use deadpool_postgres::tokio_postgres::{self, NoTls, Row};
use deadpool_postgres::{
    ClientWrapper, Hook, Manager, ManagerConfig, Object, Pool, PoolError, QueueMode,
    RecyclingMethod, Runtime, TimeoutType, Timeouts,
};

use super::tls::TlsOptions;
use crate::store::url::redact_url;

use crate::{Error, Result};

use super::constants::{ATTEMPTS, DEFAULT_TABLE, SCHEMA_VERSION};
use super::error::{Kind, classify};
use super::prepared::Prepared;
use super::schema::too_new;
use super::sql::{Sql, check_table_name};
use super::tls;

/// A [`Store`](crate::store::Store) on a PostgreSQL table.
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
/// [`purge_expired`](crate::store::Store::purge_expired) deletes such rows, using the index on `expires_at`.
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
    pub(super) pool: Pool,
    pub(super) table: String,
    pub(super) sql: Arc<Sql>,
    pub(super) prepared: Prepared,
    pub(super) operation_timeout: Option<Duration>,
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
    /// The defaults, for [`PostgresStore::builder`].
    pub(super) fn new(url: String) -> PostgresStoreBuilder {
        PostgresStoreBuilder {
            url,
            table: DEFAULT_TABLE.to_owned(),
            pool_size: 16,
            migrate: true,
            connect_timeout: Duration::from_secs(5),
            wait_timeout: Duration::from_secs(10),
            operation_timeout: None,
        }
    }

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
    /// [`Error::Config`] for a malformed URL or table name, a hot standby (read-only), or an `sslmode` this build cannot
    /// honour, and when the server refuses the login (a wrong password, an unknown user) or has no
    /// such database; [`Error::Unavailable`] when the server cannot be reached, [`Error::Store`]
    /// when it refuses otherwise (a schema newer than this build knows) or
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
            // No recycle timeout: `Fast` recycling awaits nothing, and a timeout would still
            // arm a timer on every checkout.
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
            prepared: Prepared::new(self.pool_size),
            operation_timeout: self.operation_timeout,
        };
        store.refuse_standby().await?;
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
pub(super) type Connector = tokio_postgres_rustls::MakeRustlsConnect;
#[cfg(not(feature = "postgres-tls"))]
pub(super) type Connector = std::convert::Infallible;

/// The driver's settings and TLS connector for a store URL: what every connection of the
/// store, and every [`connect_client`] connection, is made with.
pub(super) fn driver(url: &str) -> Result<(tokio_postgres::Config, Option<Connector>)> {
    let (conninfo, tls) = TlsOptions::take(url)?;
    let connector = tls.connector()?;
    let mut pg: tokio_postgres::Config =
        conninfo.parse().map_err(super::options::config_refusal)?;
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
/// asks for what the server will not do); a refused login or a database that does not exist
/// is the URL's mistake, which no retry fixes ([`Error::Config`]); anything else is classified
/// like a failed statement.
pub(super) fn connect_error(e: tokio_postgres::Error) -> Error {
    if tls::is_tls_refusal(&e) {
        return Error::store(e);
    }
    let refusal = e.as_db_error().and_then(|db| match db.code().code() {
        // invalid_password, invalid_authorization_specification (no such role, or pg_hba.conf
        // refuses it).
        "28P01" | "28000" => Some(format!(
            "PostgreSQL refused the login ({}): check the user and password in the store URL",
            db.message()
        )),
        // invalid_catalog_name.
        "3D000" => Some(format!(
            "PostgreSQL has no such database ({}): check the database name in the store URL \
             (toolonce creates its table, not the database)",
            db.message()
        )),
        _ => None,
    });
    match refusal {
        Some(message) => Error::Config(message),
        None => classify(&e).into_error(e),
    }
}

/// Prepares every statement of the store on a new connection, all at once: the requests are
/// pipelined, so this costs about one round trip, and no store operation later pays a prepare.
/// Failures are ignored (the table may not be migrated yet): the statement is then prepared
/// on first use.
pub(super) async fn prepare_all(client: &ClientWrapper, sql: &Sql) {
    let results =
        futures_util::future::join_all(sql.all().map(|text| client.prepare_cached(text))).await;
    if let Some(Err(e)) = results.into_iter().find(|r| r.is_err()) {
        tracing::debug!(target: "toolonce", error = %e, "statements not prepared in advance");
    }
}

impl PostgresStore {
    /// Takes a connection from the pool. A free one (or room for a new one) is taken without
    /// waiting, so without arming the wait timeout's timer: a timer per checkout cost about
    /// 1.5k instructions under callgrind, and on an otherwise idle runtime a wake-up of a
    /// parked worker thread. Only a caller that has to wait for a busy pool arms it.
    pub(super) async fn checkout(&self) -> Result<Object> {
        let at_once = Timeouts {
            wait: Some(Duration::ZERO),
            ..self.pool.timeouts()
        };
        let got = match self.pool.timeout_get(&at_once).await {
            // Boxed, so that every operation's future does not carry room for this larger one.
            Err(PoolError::Timeout(TimeoutType::Wait)) => Box::pin(self.pool.get()).await,
            other => other,
        };
        got.map_err(|e| match e {
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
    pub(super) async fn run(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        exec: Exec,
    ) -> Result<Output> {
        let mut attempt = 1;
        loop {
            let client = self.checkout().await?;
            let statement = async {
                let statement = self.prepared.statement(&self.sql, &client, sql).await?;
                match exec {
                    Exec::Row => client.query_opt(&statement, params).await.map(Output::Row),
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
                        self.prepared.forget(Object::id(&client));
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
                self.prepared.forget(Object::id(&client));
                drop(Object::take(client));
            }
            if class.kind == Kind::Rollback && attempt < ATTEMPTS {
                attempt += 1;
                continue;
            }
            return Err(class.into_error(error));
        }
    }

    /// The one row, if any, of a claim, a read or a delete by key, not collected into a `Vec`.
    pub(super) async fn row(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>> {
        match self.run(sql, params, Exec::Row).await? {
            Output::Row(row) => Ok(row),
            _ => unreachable!("Exec::Row answers a row"),
        }
    }

    pub(super) async fn rows(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        match self.run(sql, params, Exec::Rows).await? {
            Output::Rows(rows) => Ok(rows),
            _ => unreachable!("Exec::Rows answers rows"),
        }
    }

    pub(super) async fn count(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        match self.run(sql, params, Exec::Count).await? {
            Output::Count(n) => Ok(n),
            _ => unreachable!("Exec::Count answers a count"),
        }
    }
}

#[derive(Clone, Copy)]
pub(super) enum Exec {
    Row,
    Rows,
    Count,
}

pub(super) enum Output {
    Row(Option<Row>),
    Rows(Vec<Row>),
    Count(u64),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_option_the_driver_does_not_know_is_named_with_a_near_miss() {
        for (url, words) in [
            (
                "postgres://u:s3cret@h/db?connect_timout=5",
                "`connect_timout` that nothing reads (did you mean `connect_timeout`?)",
            ),
            (
                "postgres://u@h/db?colour=red",
                "`colour` that nothing reads",
            ),
        ] {
            match driver(url) {
                Err(Error::Config(m)) => {
                    assert!(m.contains(words), "{url}: {m}");
                    assert!(m.contains("`sslrootcert`"), "{m}");
                    assert!(!m.contains("s3cret"), "{m}");
                }
                other => panic!("{url}: expected a refusal, got {:?}", other.err()),
            }
        }
        assert!(driver("postgres://u@h/db?connect_timeout=5&sslmode=disable").is_ok());
    }
}
