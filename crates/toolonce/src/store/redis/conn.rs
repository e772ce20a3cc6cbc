//! Connecting: the store handle ([`RedisStore`], what it holds and how it names keys), the
//! builder (URL, prefix, TLS, eviction check, claim mode), the connection to a single server or
//! a cluster behind one type, and what connecting asks the servers (the masters of a cluster,
//! whether each has the native claim).

use std::fmt;
use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster::ClusterClientBuilder;
use ::redis::cluster_async::ClusterConnection;
use ::redis::{Cmd, RedisError, RedisFuture, Value};

use crate::key::OperationKey;
use crate::store::url::redact_url;
use crate::{Error, Result};

use super::error::{config_error, refused_setup, to_error};
use super::scripts::SCRIPTS;
use super::url::Target;

/// A [`Store`](crate::store::Store) on Redis or Redis Cluster.
///
/// # Data
///
/// The entry of `idem:…` is a string value under `<prefix>idem:…`: a JSON object in the wire
/// format that TypeScript workers of the reference design read and write (they read `status`
/// and `result` and ignore the rest) —
///
/// ```text
/// {"status":"running","startedAt":…,"owner":"<SHA-1 of the token>","retention":…,"fingerprint":"3a…","firstStartedAt":…,"attempts":1,"scope":"run-1","tool":"charge"}
/// {"status":"done","result":{…},"startedAt":…,"completedAt":…,"settledAt":…,"fingerprint":"3a…","firstStartedAt":…,"attempts":1,"scope":…,"tool":…}
/// {"status":"failed","error":{"message":…,"class":"permanent"},"startedAt":…,"failedAt":…,"settledAt":…,"fingerprint":"3a…",…}
/// ```
///
/// with Redis's own expiry (`PX`). A running entry's key lives for the lease **plus** the
/// retention it records: its lease is live while the key's `PTTL` is above that retention, and
/// once it is down to it without a complete or fail, the entry reads as
/// [`Unknown`](crate::store::EntryState::Unknown) and stays so until the key expires. A settled entry lives
/// for its retention. `scope`, `tool` and `detail` (what the entry says it is, each only when
/// recorded), `firstStartedAt` and `attempts` are written by the claim and kept by a takeover
/// and by the settle; `settledAt` by the settle. Unknown fields are ignored; entries written by
/// the reference design (only `status`, `startedAt` and `result`) read as entries without
/// owner or fingerprint, running entries without `retention` or `leaseUntil` (the reference
/// design's, and those of early versions of this store) are running for as long as their key
/// lives, and the previous version's, with the server's lease deadline `leaseUntil`, are judged
/// by it on the server's clock.
///
/// # Atomicity and clocks
///
/// Every operation is one atomic step and one round trip (a first-time write call two: claim
/// and complete; a replay one). On Redis 7 or later a claim is the native
/// `SET … NX GET PX`, which writes the new entry only if the key is absent and answers the
/// value that was there in the same step; a settled value is the answer, and only a running
/// one (in flight, unknown, or the caller's own after a lost reply) goes on to the claim
/// script, a second round trip that decides on what it finds then, takeovers included. Before
/// Redis 7 every claim is that script (see [`RedisStoreBuilder::native_claim`]). Everything else
/// is one Lua script sent by hash (`EVALSHA`): Redis runs scripts one at a time, so a script's
/// reads and writes are one atomic step. The entry keeps the SHA-1 of the owner token, never
/// the token, since every duplicate's claim reads the value; the fencing scripts hash the token
/// they are sent and compare (fencing by owner: a late owner still settles its entry, live or
/// unknown, as long as nobody took it over). Expiry is Redis's (`PX`), and the lease is the
/// key's time to live, so every worker, whatever its own clock says, agrees on when a lease
/// ends, on the clock that also expires the keys. `startedAt` and `firstStartedAt` come from
/// the claiming machine's clock (informational); the settling times from the server's `TIME`.
/// (An [`Entry::expires_at`](crate::store::Entry::expires_at) is the remaining time on the server's clock added to this
/// machine's, since that is the clock a caller compares it with; a claim that finds a settled
/// entry with the native command reports none.) Scripts calling `TIME` before writing need
/// effect replication, the default since Redis 5, the oldest version this store supports.
///
/// Results and errors are encoded to JSON here, in Rust, and passed to the scripts as text that
/// they splice in unchanged. The scripts never use `cjson` (it would round numbers to 14
/// significant digits, and can raise on odd input): they recognise a running entry of ours by
/// its exact shape, the settling ones by its fencing members at fixed places.
///
/// # URLs
///
/// `redis://[[user]:password@]host[:port][/db][?prefix=NS][&allow_eviction=true]`,
/// `rediss://…` (TLS, feature `redis-tls`), and for a cluster
/// `redis+cluster://[[user]:password@]host:port,host:port,…` (or `rediss+cluster://…`): a few
/// seed nodes, from which the client learns the rest. `prefix` and `allow_eviction` are the
/// builder's [`prefix`](RedisStoreBuilder::prefix) and
/// [`allow_eviction`](RedisStoreBuilder::allow_eviction).
///
/// # Eviction
///
/// Connecting refuses a server whose `maxmemory-policy` is not `noeviction`: it could delete
/// live entries under memory pressure (see [`RedisStoreBuilder::allow_eviction`]). The check is
/// made on connect; a policy changed later is not noticed.
///
/// # Listing and purging
///
/// [`list`](crate::store::Store::list) walks the keyspace with `SCAN … MATCH <prefix>idem:*` (on a cluster,
/// each master in turn, in address order) and reads each candidate with the same script as
/// [`get`](crate::store::Store::get), filtering by state, scope and tool here (Redis has no index of them). The cursor is Redis's `SCAN` cursor plus the
/// keys of the last batch that did not fit in the page; entries are ordered by key within a
/// page only; pages may be short, and an entry created or deleted during the walk may or may
/// not appear (`SCAN`'s guarantees: an entry live throughout is listed). On a cluster whose
/// slots move during the walk, entries may be missed or repeated.
///
/// [`purge_expired`](crate::store::Store::purge_expired) returns 0: Redis deletes expired keys itself.
#[derive(Clone)]
pub struct RedisStore {
    pub(super) conn: Conn,
    pub(super) prefix: String,
    pub(super) display: String,
    /// Whether claims start with the native `SET … NX GET PX` (every master was Redis 7 or
    /// later on connect).
    pub(super) native_claim: bool,
    /// Whether the owner's settles and renewals are one native `SET … IFEQ` (the server took
    /// the option when probed on connect; see `native`).
    pub(super) native_fence: bool,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.display)
            .field("prefix", &self.prefix)
            .field("native_claim", &self.native_claim)
            .field("native_fence", &self.native_fence)
            .finish()
    }
}

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

    /// The namespace prefix of every key ("" when none).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The Redis key of an entry.
    pub fn redis_key(&self, key: &OperationKey) -> String {
        let mut k = String::with_capacity(self.prefix.len() + key.as_str().len());
        k.push_str(&self.prefix);
        k.push_str(key.as_str());
        k
    }

    pub(super) fn conn(&self) -> Conn {
        self.conn.clone()
    }

    /// Whether the server, or every master of a cluster, is Redis 7 or later, where `SET` takes
    /// `NX` and `GET` together (6.2 refuses the combination). A master whose version cannot be
    /// read counts as older: the script claims the same, only at a higher cost.
    pub(super) async fn every_master_claims_natively(&self) -> Result<bool> {
        for node in self.scan_nodes().await? {
            match self.info(&node, "server").await {
                Ok(info) if has_native_claim(&info) => {}
                Ok(_) => return Ok(false),
                Err(e) => {
                    let error = to_error(e);
                    if error.is_retryable() {
                        return Err(error);
                    }
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }
}

/// One connection, to a single server or to a cluster. Both multiplex every request of the
/// store over their connections and reconnect by themselves, so cloning one per request is
/// cheap (an `Arc`) and a store survives a server restart without being rebuilt. Public only
/// for [`connect_client`].
#[doc(hidden)]
#[derive(Clone)]
pub enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a ::redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
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
            .finish()
    }
}

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
        }
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
    /// [`connect`](Self::connect) probes the command once; without it (or with `false`) they
    /// are scripts, which compare the same whole value first. The entries and every answer
    /// are the same either way; `false` is for comparing the two.
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
        let prefix = self.prefix.or(target.prefix).unwrap_or_default();
        let allow_eviction = self
            .allow_eviction
            .or(target.allow_eviction)
            .unwrap_or(false);
        let mut store = RedisStore {
            conn,
            prefix,
            display: target.display,
            native_claim: false,
            native_fence: false,
        };
        store.check_eviction(allow_eviction).await?;
        store.native_claim = self.native_claim && store.every_master_claims_natively().await?;
        store.native_fence = self.native_fence && store.probe_set_ifeq().await?;
        let scripts = &*SCRIPTS;
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
        let conn = if target.cluster {
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

/// The distinct master addresses in a `CLUSTER SLOTS` reply.
pub(super) fn cluster_masters(reply: Value) -> Result<Vec<(String, u16)>> {
    let bad = || Error::store("unexpected CLUSTER SLOTS reply");
    let Value::Array(ranges) = reply else {
        return Err(bad());
    };
    let mut masters = Vec::new();
    for range in ranges {
        let Value::Array(fields) = range else {
            return Err(bad());
        };
        let Some(Value::Array(master)) = fields.get(2) else {
            return Err(bad());
        };
        let host = match master.first() {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::SimpleString(s)) => s.clone(),
            _ => return Err(bad()),
        };
        let port = match master.get(1) {
            Some(Value::Int(p)) => u16::try_from(*p).map_err(|_| bad())?,
            _ => return Err(bad()),
        };
        masters.push((host, port));
    }
    Ok(masters)
}

/// Whether an `INFO server` reply reports Redis 7 or later (`redis_version:7.0.15`).
pub(super) fn has_native_claim(info: &str) -> bool {
    info.lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .and_then(|version| version.trim().split('.').next()?.parse::<u32>().ok())
        .is_some_and(|major| major >= 7)
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

    #[test]
    fn the_native_claim_needs_redis_7() {
        for (info, native) in [
            (
                "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n",
                true,
            ),
            ("redis_version:8.2.1\r\n", true),
            ("redis_version:6.2.14\r\n", false),
            ("redis_version:5.0.7\r\n", false),
            ("redis_version:garbage\r\n", false),
            ("# Server\r\n", false),
        ] {
            assert_eq!(has_native_claim(info), native, "{info}");
        }
    }
}
