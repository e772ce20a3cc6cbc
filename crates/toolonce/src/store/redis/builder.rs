//! The builder of a [`RedisStore`] ([`RedisStoreBuilder`]: URL, prefix, TLS, eviction check,
//! claim mode, replicas) and connecting: opening the connection a URL names (a server, a
//! cluster, the master behind Sentinel), the write connections of `replicas=N`, the checks on
//! connect and the scripts loaded up front.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster::ClusterClientBuilder;
use ::redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use ::redis::{AsyncConnectionConfig, ProtocolVersion, RedisConnectionInfo, RedisError};

use crate::store::url::redact_url;
use crate::{Error, Result};

use super::conn::RedisStore;
use super::error::{config_error, refused_setup, to_error};
use super::link::Conn;
use super::replicas::{Replication, WRITE_CONNECTIONS};
use super::scripts::SCRIPTS;
use super::sentinel::SentinelConn;
use super::url::Target;

impl RedisStore {
    /// Connects with the default options; see [`RedisStore`] for the URLs.
    ///
    /// # Errors
    ///
    /// As [`RedisStoreBuilder::connect`].
    pub async fn connect(url: &str) -> Result<RedisStore> {
        Self::builder(url).connect().await
    }

    /// Options (a key prefix, timeouts) before connecting:
    /// `RedisStore::builder(url).prefix("app:").connect().await`.
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder::new(url.into())
    }
}

/// Options of a [`RedisStore`], from [`RedisStore::builder`].
#[derive(Clone)]
#[must_use]
pub struct RedisStoreBuilder {
    url: String,
    prefix: Option<String>,
    allow_eviction: Option<bool>,
    response_timeout: Duration,
    connection_timeout: Duration,
    reconnect_attempts: usize,
    native_claim: bool,
    native_fence: bool,
    replicas: Option<u32>,
    replica_timeout: Option<Duration>,
}

impl fmt::Debug for RedisStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStoreBuilder")
            .field("url", &redact_url(&self.url))
            .field("prefix", &self.prefix)
            .field("allow_eviction", &self.allow_eviction)
            .field("response_timeout", &self.response_timeout)
            .field("connection_timeout", &self.connection_timeout)
            .field("reconnect_attempts", &self.reconnect_attempts)
            .field("native_claim", &self.native_claim)
            .field("native_fence", &self.native_fence)
            .field("replicas", &self.replicas)
            .field("replica_timeout", &self.replica_timeout)
            .finish()
    }
}

/// How long a write waits for its replicas by default (`replica_timeout_ms`).
pub(super) const DEFAULT_REPLICA_TIMEOUT: Duration = Duration::from_millis(500);

impl RedisStoreBuilder {
    /// The defaults, for [`RedisStore::builder`].
    pub(super) fn new(url: String) -> RedisStoreBuilder {
        RedisStoreBuilder {
            url,
            prefix: None,
            allow_eviction: None,
            response_timeout: Duration::from_secs(2),
            connection_timeout: Duration::from_secs(1),
            reconnect_attempts: 3,
            native_claim: true,
            native_fence: true,
            replicas: None,
            replica_timeout: None,
        }
    }

    /// How many replicas must acknowledge every write before it counts (default 0; overrides
    /// a `?replicas=` in the URL). Each claim, result, sticky failure, takeover and resolve is
    /// followed by `WAIT N timeout` on the connection that wrote it. When fewer than `N`
    /// acknowledge within [`replica_timeout`](Self::replica_timeout): a claim is not run (the
    /// layer releases it and answers `store_unavailable`); a result or failure stands (the
    /// tool ran) and a warning says that it may not survive a failover.
    ///
    /// What it buys: a claim acknowledged to the tool is on `N` replicas, so it survives the
    /// loss of the primary **if** the replica promoted is one of those. Sentinel and Cluster
    /// promote the most up-to-date replica they can reach, which is usually, not certainly,
    /// one that acknowledged (a partition can leave only a stale one reachable). `WAIT` is not
    /// `fsync`: a replica that acknowledged and then restarts without persistence has lost it.
    /// What it costs: one replica round trip per write, and the writes waiting for their
    /// replicas share a pool of 8 connections.
    pub fn replicas(mut self, replicas: u32) -> Self {
        self.replicas = Some(replicas);
        self
    }

    /// How long a write waits for its [`replicas`](Self::replicas) (default 500 ms; overrides
    /// a `?replica_timeout_ms=` in the URL). Clamped to at least 1 ms.
    pub fn replica_timeout(mut self, timeout: Duration) -> Self {
        self.replica_timeout = Some(timeout.max(Duration::from_millis(1)));
        self
    }

    /// A namespace put before every key (`app:` stores `idem:…` under `app:idem:…`). Overrides
    /// a `?prefix=` in the URL. On Redis Cluster a prefix with a hash tag (`{app}:`) would put
    /// every entry in one slot, on one node: usually not what you want.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// Whether to start on a server whose `maxmemory-policy` is not `noeviction` (default
    /// no). Every entry has an expiry, so under an `allkeys-*` or `volatile-*` policy Redis
    /// deletes live entries when its memory is full, and a duplicate call then runs the tool
    /// again. [`connect`](Self::connect) reads the policy of the server (of every master of a
    /// cluster) and refuses such a server, or one whose policy it cannot read, unless this is
    /// set; then it logs a warning. Overrides an `?allow_eviction=` in the URL.
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.allow_eviction = Some(allow);
        self
    }

    /// How long to wait for an answer before the operation fails as
    /// [`Error::Unavailable`] (default 2 s). The operation may still have been applied.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long one connection attempt may take (default 1 s).
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// How many times a lost connection is retried, with exponential backoff from 50 ms,
    /// before the requests waiting on it fail (default 3). The next request after that starts
    /// reconnecting again, so a store outlives any outage; fewer attempts make calls fail
    /// closed sooner while the server is down.
    pub fn reconnect_attempts(mut self, attempts: usize) -> Self {
        self.reconnect_attempts = attempts;
        self
    }

    /// Whether a claim may use the native `SET … NX GET PX` where the server has it (default
    /// yes). [`connect`](Self::connect) reads the version of the server (of every master of a
    /// cluster) and claims with one native command on Redis 7 or later, with the claim script
    /// before 7 or when this is `false`. The entries and every answer are the same either way;
    /// the native claim costs the server a fraction of the script's CPU. `false` is for
    /// comparing the two, and for servers that report 7 without implementing it.
    pub fn native_claim(mut self, native: bool) -> Self {
        self.native_claim = native;
        self
    }

    /// Whether the owner's complete, sticky fail and renew may be one native
    /// `SET … IFEQ` where the server has it (Valkey 8.1, Redis 8.4; default yes).
    /// [`connect`](Self::connect) probes the command once; without it (or with `false`, or
    /// with `replicas=N`, whose writes are each followed by `WAIT`) they are scripts, which
    /// compare the same whole value first. The entries and every answer are the same either
    /// way; `false` is for comparing the two.
    pub fn native_fence(mut self, native: bool) -> Self {
        self.native_fence = native;
        self
    }

    /// Connects (to one node of a cluster at least), checks that Redis will not evict entries
    /// (see [`allow_eviction`](Self::allow_eviction)), reads whether every master has the
    /// native claim (see [`native_claim`](Self::native_claim)) and loads the scripts.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a malformed URL, a `rediss://` URL in a build without the
    /// `redis-tls` feature, options the driver refuses, a server that may evict entries, a
    /// wrong password or none where the server needs one, or a database index the server does
    /// not have; [`Error::Unavailable`] when the server cannot be reached; [`Error::Store`]
    /// when it refuses us otherwise.
    pub async fn connect(self) -> Result<RedisStore> {
        let target = Target::parse(&self.url)?;
        let conn = self.open(&target).await?;
        let prefix = self
            .prefix
            .clone()
            .or(target.prefix.clone())
            .unwrap_or_default();
        let allow_eviction = self
            .allow_eviction
            .or(target.allow_eviction)
            .unwrap_or(false);
        let replicas = self.replicas.or(target.replicas).unwrap_or(0);
        let replica_timeout = self
            .replica_timeout
            .or(target.replica_timeout_ms.map(Duration::from_millis))
            .unwrap_or(DEFAULT_REPLICA_TIMEOUT);
        let replication = if replicas == 0 {
            None
        } else {
            // A write's reply comes after its WAIT: its timeout includes the wait.
            let writer = RedisStoreBuilder {
                response_timeout: self.response_timeout + replica_timeout,
                ..self.clone()
            };
            let mut conns = Vec::with_capacity(WRITE_CONNECTIONS);
            for _ in 0..WRITE_CONNECTIONS {
                conns.push(writer.open(&target).await?);
            }
            Some(Arc::new(Replication::new(replicas, replica_timeout, conns)))
        };
        let mut store = RedisStore {
            conn,
            prefix,
            display: target.display.clone(),
            native_claim: false,
            native_fence: false,
            replication,
        };
        store.check_eviction(allow_eviction).await?;
        store.check_persistence().await?;
        // `native_claim(false)` in code, or `native_claim=false` in the URL, turns it off.
        store.native_claim = self.native_claim
            && target.native_claim.unwrap_or(true)
            && store.every_master_claims_natively().await?;
        // With replicas, every settle is a script sent with its WAIT (see `settle`).
        store.native_fence =
            self.native_fence && store.replication.is_none() && store.probe_set_ifeq().await?;
        let scripts = &*SCRIPTS;
        let writers = store
            .replication
            .as_ref()
            .map(|r| r.conns.clone())
            .unwrap_or_default();
        for script in [
            &scripts.claim,
            &scripts.read,
            &scripts.renew,
            &scripts.complete,
            &scripts.fail,
            &scripts.resolve,
        ] {
            // On a cluster `SCRIPT LOAD` goes to every master.
            script
                .prepare_invoke()
                .load_async(&mut store.conn())
                .await
                .map_err(to_error)?;
            // Behind a Sentinel the write connections may have found another master.
            for mut writer in writers.iter().cloned() {
                script.load_async(&mut writer).await.map_err(to_error)?;
            }
        }
        Ok(store)
    }

    /// The connection to what `target` names, with this builder's timeouts and reconnection
    /// settings.
    async fn open(&self, target: &Target) -> Result<Conn> {
        #[cfg(feature = "redis-tls")]
        if target.tls {
            // redis uses rustls without choosing a crypto provider; pick ring (no C toolchain
            // needed) unless the program installed one already.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let conn = if let Some(sentinel) = &target.sentinel {
            let mut info = RedisConnectionInfo::default().set_db(sentinel.db);
            if let Some(user) = &sentinel.username {
                info = info.set_username(user);
            }
            if let Some(password) = &sentinel.password {
                info = info.set_password(password);
            }
            if sentinel.resp3 {
                info = info.set_protocol(ProtocolVersion::RESP3);
            }
            let mut node = SentinelNodeConnectionInfo::default().set_redis_connection_info(info);
            if target.tls {
                node = node.set_tls_mode(::redis::TlsMode::Secure);
            }
            let client = SentinelClient::build(
                target.nodes.clone(),
                sentinel.master.clone(),
                Some(node),
                SentinelServerType::Master,
            )
            .map_err(config_error)?;
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(self.connection_timeout))
                .set_response_timeout(Some(self.response_timeout));
            Conn::Sentinel(
                SentinelConn::connect(client, config)
                    .await
                    .map_err(|e| at_connect(e, &target.display))?,
            )
        } else if target.cluster {
            let client = ClusterClientBuilder::new(target.nodes.clone())
                .connection_timeout(self.connection_timeout)
                .response_timeout(self.response_timeout)
                .retries(u32::try_from(self.reconnect_attempts).unwrap_or(u32::MAX))
                .build()
                .map_err(config_error)?;
            Conn::Cluster(
                client
                    .get_async_connection()
                    .await
                    .map_err(|e| at_connect(e, &target.display))?,
            )
        } else {
            let client = ::redis::Client::open(target.nodes[0].as_str()).map_err(config_error)?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(self.connection_timeout))
                .set_response_timeout(Some(self.response_timeout))
                .set_number_of_retries(self.reconnect_attempts)
                .set_min_delay(Duration::from_millis(50))
                .set_max_delay(Duration::from_secs(1));
            Conn::Single(
                ConnectionManager::new_with_config(client, config)
                    .await
                    .map_err(|e| at_connect(e, &target.display))?,
            )
        };
        Ok(conn)
    }
}

/// A failure to connect: a refusal that the URL causes ([`refused_setup`]), or else as any
/// other error of the driver.
fn at_connect(e: RedisError, display: &str) -> Error {
    refused_setup(&e, &format!("Redis at {display}")).unwrap_or_else(|| to_error(e))
}

/// One connection made as a store makes its own (the URL's nodes without toolonce's own
/// parameters, TLS, the default timeouts and reconnection settings), without the store's
/// checks and scripts. For programs that send their own commands beside a store and want them
/// to pay what the store's commands pay, as `toolonce bench`'s raw floor does.
///
/// # Errors
///
/// As [`RedisStoreBuilder::connect`], less the refusal of a server that may evict entries.
#[doc(hidden)]
pub async fn connect_client(url: &str) -> Result<Conn> {
    RedisStore::builder(url).open(&Target::parse(url)?).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_client_connection_refuses_a_bad_url_and_an_absent_server_as_the_store_does() {
        assert!(matches!(
            connect_client("http://h").await,
            Err(Error::Config(_))
        ));
        // Port 1 on loopback: nothing listens there, so the connection is refused at once.
        assert!(matches!(
            connect_client("redis://127.0.0.1:1").await,
            Err(Error::Unavailable(_))
        ));
        assert!(matches!(
            RedisStore::connect("redis://127.0.0.1:1").await,
            Err(Error::Unavailable(_))
        ));
    }
}
