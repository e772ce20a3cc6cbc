//! The Redis store: entries are JSON values under the operation key (optionally prefixed), in
//! the wire format TypeScript workers share (see `docs/contract.md`), with Redis's own `PX` expiry. Each
//! operation is one atomic step and one round trip: a claim on Redis 7 or later is the native
//! `SET … NX GET PX` (a key found running goes on to the claim script), everything else is a Lua
//! script sent by hash. Works on a single server and on Redis Cluster (every operation touches
//! one key).

use std::borrow::Cow;
use std::fmt;
use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster::ClusterClientBuilder;
use ::redis::cluster_async::ClusterConnection;
use ::redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use ::redis::{Cmd, ErrorKind, RedisError, RedisFuture, Script, ServerErrorKind, Value};
use async_trait::async_trait;
use serde::{Deserialize, Deserializer};
use serde_json::Value as Json;

use super::url::{parse_bool, percent_decode};
use super::{
    About, Claim, ClaimRequest, Entry, EntryState, Fenced, ListQuery, OwnerToken, Page, Resolution,
    Resolved, Store, millis, redact_url,
};
use crate::key::{Fingerprint, OperationKey};
use crate::tool::ToolError;
use crate::{Error, Result};

/// The scripts, each assembled from the shared helpers it needs. `Script` sends `EVALSHA` and,
/// if the server answers `NOSCRIPT` (it restarted, or `SCRIPT FLUSH` ran), loads the script and
/// retries; [`RedisStore::connect`] loads them all up front so the first calls cost one round
/// trip too.
struct Scripts {
    claim: Script,
    read: Script,
    renew: Script,
    complete: Script,
    fail: Script,
    resolve: Script,
}

/// A script: the helpers it uses, then its body. Each helper a script defines costs every call
/// (Lua builds its closures afresh), so the settling scripts, which run on every first-time
/// call, take only the fence in `owned.lua`.
macro_rules! script {
    ($name:literal: $($helper:literal),*) => {
        Script::new(concat!(
            $(include_str!(concat!("redis/", $helper, ".lua")),)*
            include_str!(concat!("redis/", $name, ".lua"))
        ))
    };
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    claim: script!("claim": "now", "entry"),
    read: script!("read": "now", "entry"),
    renew: script!("renew": "owned"),
    complete: script!("complete": "now", "owned"),
    fail: script!("fail": "now", "owned"),
    resolve: script!("resolve": "now", "entry"),
});

/// Redis refuses `PX 0`, and `PX` values whose deadline overflows its clock; a lease or
/// retention is clamped into `1 ms ..= 100 years`.
const MAX_PX_MS: u64 = 100 * 365 * 24 * 60 * 60 * 1000;

fn px(d: Duration) -> u64 {
    millis(d).clamp(1, MAX_PX_MS)
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

mod eviction;

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
            .finish()
    }
}

impl RedisStoreBuilder {
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

    /// Connects (to one node of a cluster at least), checks that Redis will not evict entries
    /// (see [`allow_eviction`](Self::allow_eviction)), reads whether every master has the
    /// native claim (see [`native_claim`](Self::native_claim)) and loads the scripts.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a malformed URL, a `rediss://` URL in a build without the
    /// `redis-tls` feature, options the driver refuses, or a server that may evict entries;
    /// [`Error::Unavailable`] when the server cannot be reached; [`Error::Store`] when it
    /// refuses us (a wrong password).
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
        };
        store.check_eviction(allow_eviction).await?;
        store.native_claim = self.native_claim && store.every_master_claims_natively().await?;
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
            Conn::Cluster(client.get_async_connection().await.map_err(to_error)?)
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
                    .map_err(to_error)?,
            )
        };
        Ok(conn)
    }
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

/// A [`Store`] on Redis or Redis Cluster.
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
/// [`Unknown`](EntryState::Unknown) and stays so until the key expires. A settled entry lives
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
/// (An [`Entry::expires_at`] is the remaining time on the server's clock added to this
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
/// [`list`](Store::list) walks the keyspace with `SCAN … MATCH <prefix>idem:*` (on a cluster,
/// each master in turn, in address order) and reads each candidate with the same script as
/// [`get`](Store::get), filtering by state, scope and tool here (Redis has no index of them). The cursor is Redis's `SCAN` cursor plus the
/// keys of the last batch that did not fit in the page; entries are ordered by key within a
/// page only; pages may be short, and an entry created or deleted during the walk may or may
/// not appear (`SCAN`'s guarantees: an entry live throughout is listed). On a cluster whose
/// slots move during the walk, entries may be missed or repeated.
///
/// [`purge_expired`](Store::purge_expired) returns 0: Redis deletes expired keys itself.
#[derive(Clone)]
pub struct RedisStore {
    conn: Conn,
    prefix: String,
    display: String,
    /// Whether claims start with the native `SET … NX GET PX` (every master was Redis 7 or
    /// later on connect).
    native_claim: bool,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.display)
            .field("prefix", &self.prefix)
            .field("native_claim", &self.native_claim)
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
        RedisStoreBuilder {
            url: url.into(),
            prefix: None,
            allow_eviction: None,
            response_timeout: Duration::from_secs(2),
            connection_timeout: Duration::from_secs(1),
            reconnect_attempts: 3,
            native_claim: true,
        }
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

    fn conn(&self) -> Conn {
        self.conn.clone()
    }

    /// Runs the read script: the live entry of `key`, if any.
    async fn read(&self, key: &OperationKey) -> Result<Option<Entry>> {
        let reply: Value = SCRIPTS
            .read
            .key(self.redis_key(key))
            .invoke_async(&mut self.conn())
            .await
            .map_err(to_error)?;
        match reply {
            Value::Nil => Ok(None),
            other => decode_read(key, other).map(Some),
        }
    }

    /// Whether the server, or every master of a cluster, is Redis 7 or later, where `SET` takes
    /// `NX` and `GET` together (6.2 refuses the combination). A master whose version cannot be
    /// read counts as older: the script claims the same, only at a higher cost.
    async fn every_master_claims_natively(&self) -> Result<bool> {
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

    /// The masters to scan, in a stable order: `[None]` for a single server.
    async fn scan_nodes(&self) -> Result<Vec<Option<(String, u16)>>> {
        match &self.conn {
            Conn::Single(_) => Ok(vec![None]),
            Conn::Cluster(_) => {
                let reply: Value = ::redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query_async(&mut self.conn())
                    .await
                    .map_err(to_error)?;
                let mut masters = cluster_masters(reply)?;
                masters.sort();
                masters.dedup();
                Ok(masters.into_iter().map(Some).collect())
            }
        }
    }

    /// One `SCAN` step on `node`: the next cursor and the keys found.
    async fn scan(
        &self,
        node: &Option<(String, u16)>,
        cursor: u64,
        pattern: &str,
        count: usize,
    ) -> Result<(u64, Vec<String>)> {
        let mut cmd = ::redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(count);
        let reply = match (&self.conn, node) {
            (Conn::Cluster(c), Some((host, port))) => c
                .clone()
                .route_command(
                    cmd,
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                        host: host.clone(),
                        port: *port,
                    }),
                )
                .await
                .map_err(to_error)?,
            _ => cmd.query_async(&mut self.conn()).await.map_err(to_error)?,
        };
        ::redis::from_redis_value::<(u64, Vec<String>)>(reply)
            .map_err(|e| Error::store(RedisError::from(e)))
    }
}

#[async_trait]
impl Store for RedisStore {
    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<Claim> {
        let redis_key = self.redis_key(req.key);
        let (lease, retention) = (px(req.lease), px(req.retention));
        // The start is informational, from this machine's clock: the lease is the key's TTL,
        // on the server's.
        let started = millis(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
        );
        let value = running_value(req, started, retention)?;
        if self.native_claim {
            // One native command decides and answers atomically: nil when the key was absent
            // (now ours), else the value that was there (and stays: NX wrote nothing). A
            // settled or foreign-shaped entry is the answer; a running one needs its PTTL and
            // perhaps a fenced write (our own lost claim, a takeover): the script below.
            let reply = ::redis::cmd("SET")
                .arg(&redis_key)
                .arg(&value)
                .arg("NX")
                .arg("GET")
                .arg("PX")
                .arg(lease + retention)
                .query_async::<Value>(&mut self.conn())
                .await;
            match reply {
                Ok(Value::Nil) => return Ok(Claim::Won),
                Ok(Value::BulkString(raw)) => {
                    let wire: Wire =
                        serde_json::from_slice(&raw).map_err(|e| Error::corrupt(req.key, e))?;
                    if wire.status != "running" {
                        return entry_of(req.key, wire, None, None, SystemTime::now())
                            .map(Claim::Existing);
                    }
                }
                Ok(_) => return Err(Error::store("unexpected reply to SET … NX GET")),
                // A server that reported 7 and refuses the form (a look-alike) fails the claim
                // closed; `native_claim(false)` is the way round it.
                Err(e) => return Err(to_error(e)),
            }
        }
        // Owner digest and fingerprint are hex digits and the about members are JSON-encoded
        // here, so the script splices them into the entry without escaping anything.
        let reply: Value = SCRIPTS
            .claim
            .key(redis_key)
            .arg(lease)
            .arg(retention)
            .arg(req.owner.as_str())
            .arg(req.fingerprint.as_str())
            .arg(value)
            .arg(if req.takeover { "1" } else { "0" })
            .arg(started)
            .invoke_async(&mut self.conn())
            .await
            .map_err(to_error)?;
        match reply {
            Value::Int(1) => Ok(Claim::Won),
            Value::Int(2) => Ok(Claim::TookOver),
            other => decode_read(req.key, other).map(Claim::Existing),
        }
    }

    async fn renew(&self, key: &OperationKey, owner: &OwnerToken, lease: Duration) -> Result<bool> {
        let applied: i64 = SCRIPTS
            .renew
            .key(self.redis_key(key))
            .arg(owner.as_str())
            .arg(px(lease))
            .invoke_async(&mut self.conn())
            .await
            .map_err(to_error)?;
        Ok(applied == 1)
    }

    async fn complete(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        result: &Json,
        retention: Duration,
    ) -> Result<Fenced> {
        let mut head = String::from(r#"{"status":"done","result":"#);
        head.push_str(&serde_json::to_string(result).map_err(Error::store)?);
        let applied: i64 = SCRIPTS
            .complete
            .key(self.redis_key(key))
            .arg(owner.as_str())
            .arg(px(retention))
            .arg(head)
            .invoke_async(&mut self.conn())
            .await
            .map_err(to_error)?;
        Ok(fenced(applied))
    }

    async fn fail(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        error: &ToolError,
        sticky: Option<Duration>,
    ) -> Result<Fenced> {
        let (retention, head) = match sticky {
            Some(retention) => {
                let mut head = String::from(r#"{"status":"failed","error":"#);
                head.push_str(&serde_json::to_string(error).map_err(Error::store)?);
                (px(retention).to_string(), head)
            }
            None => (String::new(), String::new()),
        };
        let applied: i64 = SCRIPTS
            .fail
            .key(self.redis_key(key))
            .arg(owner.as_str())
            .arg(retention)
            .arg(head)
            .invoke_async(&mut self.conn())
            .await
            .map_err(to_error)?;
        Ok(fenced(applied))
    }

    async fn get(&self, key: &OperationKey) -> Result<Option<Entry>> {
        self.read(key).await
    }

    async fn list(&self, query: &ListQuery) -> Result<Page> {
        let size = query.page_size();
        let nodes = self.scan_nodes().await?;
        let mut cursor = match &query.cursor {
            Some(text) => ListCursor::parse(text, &nodes)?,
            None => ListCursor::default(),
        };
        let pattern = format!("{}idem:*", glob_escape(&self.prefix));
        let mut count = (size * 2).clamp(16, 1_000);
        let mut entries = Vec::with_capacity(size.min(256));
        let mut scans = 0;
        loop {
            // Read the pending candidates, a page's worth at a time (concurrently: the
            // multiplexed connection pipelines them), keeping the live ones in the state asked.
            while !cursor.pending.is_empty() && entries.len() < size {
                let take = (size - entries.len()).min(cursor.pending.len());
                let chunk: Vec<OperationKey> = cursor.pending.drain(..take).collect();
                let read = futures_util::future::join_all(chunk.iter().map(|k| self.read(k)));
                for entry in read.await {
                    if let Some(entry) = entry?
                        && query.admits(&entry)
                    {
                        entries.push(entry);
                    }
                }
            }
            if entries.len() >= size {
                let more = !cursor.pending.is_empty() || cursor.node < nodes.len();
                return Ok(Page::new(entries, more.then(|| cursor.encode(&nodes))));
            }
            if cursor.node >= nodes.len() {
                return Ok(Page::new(entries, None));
            }
            if scans == MAX_SCANS_PER_PAGE {
                // A sparse keyspace: hand back a short page rather than walk it all in one call.
                return Ok(Page::new(entries, Some(cursor.encode(&nodes))));
            }
            let (next, keys) = self
                .scan(&nodes[cursor.node], cursor.scan, &pattern, count)
                .await?;
            scans += 1;
            let mut keys: Vec<OperationKey> = keys
                .iter()
                .filter_map(|k| k.strip_prefix(self.prefix.as_str())?.parse().ok())
                .collect();
            if keys.is_empty() {
                count = (count * 2).min(10_000);
            }
            keys.sort();
            cursor.pending = keys;
            if next == 0 {
                cursor.node += 1;
                cursor.scan = 0;
            } else {
                cursor.scan = next;
            }
        }
    }

    async fn resolve(
        &self,
        key: &OperationKey,
        resolution: &Resolution,
        retention: Duration,
    ) -> Result<Resolved> {
        let (head, at) = match resolution {
            Resolution::Done(result) => {
                let mut head = String::from(r#"{"status":"done","result":"#);
                head.push_str(&serde_json::to_string(result).map_err(Error::store)?);
                (head, "completedAt")
            }
            Resolution::Failed(error) => {
                let mut head = String::from(r#"{"status":"failed","error":"#);
                head.push_str(&serde_json::to_string(error).map_err(Error::store)?);
                (head, "failedAt")
            }
            Resolution::Release => (String::new(), ""),
        };
        let reply: Value = SCRIPTS
            .resolve
            .key(self.redis_key(key))
            .arg(px(retention))
            .arg(head)
            .arg(at)
            .invoke_async(&mut self.conn())
            .await
            .map_err(to_error)?;
        match reply {
            Value::Int(1) => Ok(Resolved::Applied),
            Value::Int(0) => Ok(Resolved::Absent),
            other => decode_read(key, other).map(Resolved::Settled),
        }
    }

    async fn delete(&self, key: &OperationKey) -> Result<bool> {
        // DEL counts only live keys: Redis treats an expired key as absent here too.
        let deleted: i64 = ::redis::cmd("DEL")
            .arg(self.redis_key(key))
            .query_async(&mut self.conn())
            .await
            .map_err(to_error)?;
        Ok(deleted > 0)
    }

    async fn purge_expired(&self) -> Result<u64> {
        // Redis expires keys itself (PX): there is never anything for us to purge.
        Ok(0)
    }
}

/// How many `SCAN` calls one [`Store::list`] call makes at most.
const MAX_SCANS_PER_PAGE: usize = 64;

fn fenced(applied: i64) -> Fenced {
    if applied == 1 {
        Fenced::Applied
    } else {
        Fenced::NotOwner
    }
}

/// Where a listing stands: the node being scanned (an index into the sorted masters; the
/// number of masters once all are done), its `SCAN` cursor (0 = not started), and the keys
/// already found that the previous page had no room for.
#[derive(Default)]
struct ListCursor {
    node: usize,
    scan: u64,
    pending: Vec<OperationKey>,
}

impl ListCursor {
    /// `NODE/SCAN/HEX,HEX,…` where NODE is `host:port` on a cluster, `0` on a single server,
    /// `-` when every node is scanned; HEX are the pending keys without their `idem:`.
    fn encode(&self, nodes: &[Option<(String, u16)>]) -> String {
        let node = match nodes.get(self.node) {
            None => "-".to_owned(),
            Some(None) => "0".to_owned(),
            Some(Some((host, port))) => format!("{host}:{port}"),
        };
        let pending: Vec<&str> = self
            .pending
            .iter()
            .map(|k| k.as_str().trim_start_matches("idem:"))
            .collect();
        format!("{node}/{}/{}", self.scan, pending.join(","))
    }

    fn parse(text: &str, nodes: &[Option<(String, u16)>]) -> Result<ListCursor> {
        let invalid = || Error::Config(format!("invalid list cursor {text:?}"));
        let mut parts = text.splitn(3, '/');
        let (Some(node), Some(scan), Some(pending)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid());
        };
        let scan: u64 = scan.parse().map_err(|_| invalid())?;
        let node = match node {
            "-" => nodes.len(),
            "0" if nodes.first() == Some(&None) => 0,
            addr => {
                // A cluster master by address. If it is gone (the topology changed), go on with
                // the next one in address order, from its start.
                let (host, port) = addr.rsplit_once(':').ok_or_else(invalid)?;
                let port: u16 = port.parse().map_err(|_| invalid())?;
                let wanted = Some((host.to_owned(), port));
                match nodes.iter().position(|n| *n == wanted) {
                    Some(i) => i,
                    None => {
                        let next = nodes
                            .iter()
                            .position(|n| *n > wanted)
                            .unwrap_or(nodes.len());
                        return Ok(ListCursor {
                            node: next,
                            scan: 0,
                            pending: parse_pending(pending).ok_or_else(invalid)?,
                        });
                    }
                }
            }
        };
        Ok(ListCursor {
            node,
            scan,
            pending: parse_pending(pending).ok_or_else(invalid)?,
        })
    }
}

fn parse_pending(text: &str) -> Option<Vec<OperationKey>> {
    text.split(',')
        .filter(|h| !h.is_empty())
        .map(|h| format!("idem:{h}").parse().ok())
        .collect()
}

/// Escapes the glob characters of `SCAN … MATCH` in a literal prefix.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The distinct master addresses in a `CLUSTER SLOTS` reply.
fn cluster_masters(reply: Value) -> Result<Vec<(String, u16)>> {
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

/// The about members of a new entry as the claim script splices them in: `}` when nothing is
/// recorded, else `,"scope":…,"tool":…,"detail":…}` with the members that are set, JSON-encoded.
#[cfg(test)]
fn about_members(about: &About) -> Result<String> {
    let mut out = String::new();
    about_members_into(about, &mut out)?;
    Ok(out)
}

/// Appends [`about_members`] to `out`.
fn about_members_into(about: &About, out: &mut String) -> Result<()> {
    for (name, value) in [
        ("scope", &about.scope),
        ("tool", &about.tool),
        ("detail", &about.detail),
    ] {
        if let Some(value) = value {
            out.push_str(",\"");
            out.push_str(name);
            out.push_str("\":");
            out.push_str(&serde_json::to_string(value).map_err(Error::store)?);
        }
    }
    out.push('}');
    Ok(())
}

/// The SHA-1 of an owner token as 40 lowercase hex digits, as the scripts compute it with
/// `redis.sha1hex`: what a running entry stores instead of the token, so that whoever reads the
/// entry cannot settle it.
fn owner_digest(owner: &OwnerToken) -> [u8; 40] {
    let mut hex = [0u8; 40];
    crate::key::hex_into(
        &sha1_smol::Sha1::from(owner.as_str()).digest().bytes(),
        &mut hex,
    );
    hex
}

/// The running entry a claim writes for `req` (in the shape `ours` in entry.lua and `owned` in
/// owned.lua read): started at `started_ms` on this machine's clock, first attempt, kept
/// `retention_ms` after its lease. Built by hand, not with `format!`: it is made for every
/// claim, replays included, since the native claim sends it before it knows.
fn running_value(req: &ClaimRequest<'_>, started_ms: u64, retention_ms: u64) -> Result<String> {
    let digest = owner_digest(req.owner);
    let mut started = itoa::Buffer::new();
    let started = started.format(started_ms);
    let mut retention = itoa::Buffer::new();
    let mut out = String::with_capacity(256);
    out.push_str(r#"{"status":"running","startedAt":"#);
    out.push_str(started);
    out.push_str(r#","owner":""#);
    out.push_str(std::str::from_utf8(&digest).expect("hex is ASCII"));
    out.push_str(r#"","retention":"#);
    out.push_str(retention.format(retention_ms));
    out.push_str(r#","fingerprint":""#);
    out.push_str(req.fingerprint.as_str());
    out.push_str(r#"","firstStartedAt":"#);
    out.push_str(started);
    out.push_str(r#","attempts":1"#);
    about_members_into(req.about, &mut out)?;
    Ok(out)
}

/// Whether an `INFO server` reply reports Redis 7 or later (`redis_version:7.0.15`).
fn has_native_claim(info: &str) -> bool {
    info.lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .and_then(|version| version.trim().split('.').next()?.parse::<u32>().ok())
        .is_some_and(|major| major >= 7)
}

/// Decodes `{value, PTTL, now}` from the claim, read and resolve scripts.
///
/// Redis decides the expiry and the server's clock (`now`) whether a lease ran out; the
/// remaining times it reports are turned into instants on this machine's clock, which is what
/// a caller compares them with.
fn decode_read(key: &OperationKey, reply: Value) -> Result<Entry> {
    let bad = |what: &str| Error::store(format!("unexpected reply from the script: {what}"));
    let Value::Array(parts) = reply else {
        return Err(bad("not an array"));
    };
    // The server's clock comes only with a value that has a `leaseUntil` (see `existing` in
    // entry.lua).
    let mut parts = parts.into_iter();
    let (Some(raw), Some(pttl), now, None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("not two or three elements"));
    };
    let Value::BulkString(raw) = raw else {
        return Err(bad("value"));
    };
    let Value::Int(pttl) = pttl else {
        return Err(bad("PTTL"));
    };
    let now = match now {
        None => None,
        Some(Value::Int(now)) => Some(now),
        Some(_) => return Err(bad("TIME")),
    };
    decode_entry(key, &raw, Some(pttl), now, SystemTime::now())
}

/// An entry in the wire format. Every field but `status` is optional: workers of the reference
/// design write only `status`, `startedAt` and `result`, today's version of toolonce writes no
/// `leaseUntil` and none of what an entry says it is, and fields we do not know are ignored.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Wire<'a> {
    /// Borrowed from the value unless it has escapes (then owned), like `fingerprint`: one
    /// allocation less each on every replay.
    #[serde(borrow)]
    status: Cow<'a, str>,
    #[serde(default)]
    started_at: Option<f64>,
    /// The lease deadline of a running entry of the previous version, on the server's clock.
    #[serde(default)]
    lease_until: Option<f64>,
    /// How long a running entry of today's shape is kept after its lease (ms): its lease is
    /// live while the key's PTTL is above this.
    #[serde(default)]
    retention: Option<f64>,
    #[serde(default)]
    completed_at: Option<f64>,
    #[serde(default)]
    failed_at: Option<f64>,
    #[serde(default)]
    settled_at: Option<f64>,
    #[serde(default)]
    first_started_at: Option<f64>,
    #[serde(default)]
    attempts: Option<f64>,
    #[serde(default)]
    owner: Option<String>,
    #[serde(default, borrow)]
    fingerprint: Option<Cow<'a, str>>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    tool: Option<String>,
    #[serde(default)]
    detail: Option<String>,
    /// `Some(Null)` for a stored `null` result, `None` when the field is missing.
    #[serde(default, deserialize_with = "present")]
    result: Option<Json>,
    #[serde(default)]
    error: Option<Json>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<Json>, D::Error> {
    Json::deserialize(d).map(Some)
}

/// Milliseconds since the epoch to a time (negative or non-finite values clamp to the epoch).
fn epoch_ms(ms: f64) -> SystemTime {
    if ms.is_finite() && ms > 0.0 {
        UNIX_EPOCH + Duration::from_micros((ms * 1000.0).round() as u64)
    } else {
        UNIX_EPOCH
    }
}

/// `local_now` moved by `ms` (negative: back), saturating at the epoch.
fn shifted(local_now: SystemTime, ms: f64) -> SystemTime {
    let by = Duration::from_millis(ms.abs().min(u64::MAX as f64) as u64);
    if ms >= 0.0 {
        local_now.checked_add(by).unwrap_or(local_now)
    } else {
        local_now.checked_sub(by).unwrap_or(UNIX_EPOCH)
    }
}

/// Decodes the value `raw` of `key`, read when its key had `pttl` ms left (-1: no expiry;
/// `None`: not read, as by the native claim, which never decodes a running entry) and the
/// server's clock said `server_now` (ms since the epoch), on this machine at `local_now`.
///
/// A running entry with a `retention` is `unknown` once its key's PTTL is down to it; one with
/// a `leaseUntil` (the previous version's) once `server_now` reached it; one with neither
/// (a TypeScript worker's, or older) is running for as long as its key lives, as its writer
/// meant.
fn decode_entry(
    key: &OperationKey,
    raw: &[u8],
    pttl: Option<i64>,
    server_now: Option<i64>,
    local_now: SystemTime,
) -> Result<Entry> {
    let wire: Wire = serde_json::from_slice(raw).map_err(|e| Error::corrupt(key, e))?;
    entry_of(key, wire, pttl, server_now, local_now)
}

/// The entry of a decoded value: see [`decode_entry`].
fn entry_of(
    key: &OperationKey,
    wire: Wire<'_>,
    pttl: Option<i64>,
    server_now: Option<i64>,
    local_now: SystemTime,
) -> Result<Entry> {
    let fingerprint = match &wire.fingerprint {
        Some(f) => Some(
            f.parse::<Fingerprint>()
                .map_err(|e| Error::corrupt(key, e))?,
        ),
        None => None,
    };
    let key_expiry = pttl
        .and_then(|ms| u64::try_from(ms).ok())
        .map(|ms| shifted(local_now, ms as f64));
    let completed_at = wire.completed_at.map(epoch_ms);
    let failed_at = wire.failed_at.map(epoch_ms);
    let (state, expires_at) = match &*wire.status {
        "running" => match (wire.retention, wire.lease_until) {
            (Some(retention), _) => {
                let pttl = pttl
                    .ok_or_else(|| Error::store("a running entry read without its key's expiry"))?;
                // The key lives for the lease plus the retention: what is left above the
                // retention is what is left of the lease (-1, no expiry, is not ours: unknown).
                let left = if pttl < 0 {
                    0.0
                } else {
                    pttl as f64 - retention
                };
                let deadline = Some(shifted(local_now, left));
                if left > 0.0 {
                    (EntryState::Running { owner: wire.owner }, deadline)
                } else {
                    (EntryState::Unknown { owner: wire.owner }, deadline)
                }
            }
            (None, Some(until)) => {
                let server_now = server_now.ok_or_else(|| {
                    Error::store("unexpected reply from the script: a leaseUntil without TIME")
                })?;
                let left = until - server_now as f64;
                let deadline = Some(shifted(local_now, left));
                if left > 0.0 {
                    (EntryState::Running { owner: wire.owner }, deadline)
                } else {
                    (EntryState::Unknown { owner: wire.owner }, deadline)
                }
            }
            (None, None) => (EntryState::Running { owner: wire.owner }, key_expiry),
        },
        "done" => (
            EntryState::Done {
                result: wire
                    .result
                    .ok_or_else(|| Error::corrupt(key, "a done entry without a result"))?,
                completed_at,
            },
            key_expiry,
        ),
        "failed" => (
            EntryState::Failed {
                error: decode_error(key, wire.error)?,
                failed_at,
            },
            key_expiry,
        ),
        other => return Err(Error::corrupt(key, format!("unknown status {other:?}"))),
    };
    let settled_at = wire.settled_at.map(epoch_ms).or(completed_at).or(failed_at);
    // `startedAt` is required of running entries only; a settled entry of another writer
    // without one reads as started when it settled (or at the epoch, if that is unknown too).
    let started_at = wire
        .started_at
        .map(epoch_ms)
        .or(settled_at)
        .unwrap_or(UNIX_EPOCH);
    let attempts = wire
        .attempts
        .filter(|n| n.is_finite() && *n >= 0.0)
        .map_or(0, |n| n.min(f64::from(u32::MAX)) as u32);
    Ok(
        Entry::new(key.clone(), fingerprint, started_at, expires_at, state)
            .with_about(
                About::default()
                    .with_scope(wire.scope)
                    .with_tool(wire.tool)
                    .with_detail(wire.detail),
            )
            .with_first_started_at(wire.first_started_at.map(epoch_ms))
            .with_attempts(attempts)
            .with_settled_at(settled_at),
    )
}

/// Our `{"message","class","detail"?}`, or, from other writers, a bare message or an object
/// with a `message` (read as permanent: it was stored to be replayed).
fn decode_error(key: &OperationKey, error: Option<Json>) -> Result<ToolError> {
    match error {
        Some(Json::String(message)) => Ok(ToolError::permanent(message)),
        Some(value) => match serde_json::from_value::<ToolError>(value.clone()) {
            Ok(error) => Ok(error),
            Err(e) => match value.get("message").and_then(Json::as_str) {
                Some(message) => Ok(ToolError::permanent(message).with_detail(value.clone())),
                None => Err(Error::corrupt(key, format!("undecodable error: {e}"))),
            },
        },
        None => Err(Error::corrupt(key, "a failed entry without an error")),
    }
}

/// Whether an error means the server could not be reached or cannot serve right now (a retry
/// may help), as opposed to refusing the request.
fn is_unavailable(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.kind(),
            ErrorKind::ClusterConnectionNotFound
                | ErrorKind::Server(
                    ServerErrorKind::BusyLoading
                        | ServerErrorKind::TryAgain
                        | ServerErrorKind::ClusterDown
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::ReadOnly
                )
        )
        // Another client's script is running too long.
        || e.code() == Some("BUSY")
}

/// Whether the TLS handshake failed (an unknown certificate authority, a wrong host name):
/// the driver reports it as an I/O error, but retrying will not fix it.
fn is_tls_refusal(e: &RedisError) -> bool {
    #[cfg(feature = "redis-tls")]
    {
        use std::error::Error as _;
        let mut next: Option<&(dyn std::error::Error + 'static)> = e.source();
        while let Some(err) = next {
            // The driver keeps its cause in an `Arc`, which is itself the error `source` gives.
            let err: &(dyn std::error::Error + 'static) =
                match err.downcast_ref::<std::sync::Arc<dyn std::error::Error + Send + Sync>>() {
                    Some(inner) => &**inner,
                    None => err,
                };
            if err.is::<rustls::Error>() {
                return true;
            }
            if let Some(io) = err.downcast_ref::<std::io::Error>()
                && io
                    .get_ref()
                    .is_some_and(|inner| inner.is::<rustls::Error>())
            {
                return true;
            }
            next = err.source();
        }
    }
    #[cfg(not(feature = "redis-tls"))]
    let _ = e;
    false
}

fn to_error(e: RedisError) -> Error {
    if is_tls_refusal(&e) {
        Error::store(e)
    } else if is_unavailable(&e) {
        Error::unavailable(e)
    } else if e.kind() == ErrorKind::InvalidClientConfig {
        config_error(e)
    } else {
        Error::store(e)
    }
}

fn config_error(e: RedisError) -> Error {
    Error::Config(format!("redis: {e}"))
}

/// A store URL taken apart.
struct Target {
    cluster: bool,
    #[cfg_attr(not(feature = "redis-tls"), allow(dead_code))]
    tls: bool,
    /// The URL for the redis client (one), or one per seed node of a cluster.
    nodes: Vec<String>,
    prefix: Option<String>,
    allow_eviction: Option<bool>,
    /// The URL without its password, for `Debug`.
    display: String,
}

impl Target {
    fn parse(url: &str) -> Result<Target> {
        let invalid =
            |why: &str| Error::Config(format!("invalid Redis URL {}: {why}", redact_url(url)));
        let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid("no scheme"))?;
        let (tls, cluster) = match scheme {
            "redis" => (false, false),
            "rediss" => (true, false),
            "redis+cluster" => (false, true),
            "rediss+cluster" => (true, true),
            _ => {
                return Err(invalid(
                    "expected redis, rediss, redis+cluster or rediss+cluster",
                ));
            }
        };
        if tls && !cfg!(feature = "redis-tls") {
            return Err(Error::Config(format!(
                "{scheme}:// needs the `redis-tls` feature, which this build of toolonce was compiled without"
            )));
        }
        // Take our own `prefix` parameter out of the query; the rest goes to the driver.
        let (rest, fragment) = match rest.split_once('#') {
            Some((r, f)) => (r, Some(f)),
            None => (rest, None),
        };
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let mut prefix = None;
        let mut allow_eviction = None;
        let mut kept = Vec::new();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("prefix", value)) => {
                    prefix = Some(percent_decode(value).ok_or_else(|| invalid("bad prefix"))?);
                }
                Some(("allow_eviction", value)) => {
                    allow_eviction = Some(
                        parse_bool(value)
                            .ok_or_else(|| invalid("allow_eviction takes true or false"))?,
                    );
                }
                _ => kept.push(pair),
            }
        }
        let suffix = format!(
            "{}{}",
            if kept.is_empty() {
                String::new()
            } else {
                format!("?{}", kept.join("&"))
            },
            fragment.map(|f| format!("#{f}")).unwrap_or_default()
        );
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let node_scheme = if tls { "rediss" } else { "redis" };
        let auth = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
        let host_list: Vec<&str> = if cluster {
            hosts.split(',').filter(|h| !h.is_empty()).collect()
        } else {
            vec![hosts]
        };
        if host_list.is_empty() || host_list.iter().any(|h| h.is_empty()) {
            return Err(invalid("no host"));
        }
        let nodes = host_list
            .iter()
            .map(|h| format!("{node_scheme}://{auth}{h}{path}{suffix}"))
            .collect();
        Ok(Target {
            cluster,
            tls,
            nodes,
            prefix,
            allow_eviction,
            display: redact_url(url),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_url_becomes_one_node_url_per_seed_with_the_credentials() {
        let t = Target::parse("redis+cluster://:pw@10.0.0.1:7000,10.0.0.2:7001/?prefix=app%3A")
            .unwrap();
        assert!(t.cluster && !t.tls);
        assert_eq!(
            t.nodes,
            vec!["redis://:pw@10.0.0.1:7000/", "redis://:pw@10.0.0.2:7001/"]
        );
        assert_eq!(t.prefix.as_deref(), Some("app:"));
        assert_eq!(
            t.display,
            "redis+cluster://:***@10.0.0.1:7000,10.0.0.2:7001/?prefix=app%3A"
        );
    }

    #[test]
    fn a_single_url_keeps_its_database_and_other_parameters() {
        let t = Target::parse("redis://user:secret@host:6380/2?protocol=resp3&prefix=x").unwrap();
        assert!(!t.cluster);
        assert_eq!(
            t.nodes,
            vec!["redis://user:secret@host:6380/2?protocol=resp3"]
        );
        assert_eq!(t.prefix.as_deref(), Some("x"));
        assert!(!format!("{:?}", t.display).contains("secret"));
    }

    #[test]
    fn an_unknown_scheme_or_a_missing_host_is_a_configuration_error() {
        assert!(matches!(Target::parse("http://h"), Err(Error::Config(_))));
        assert!(matches!(
            Target::parse("redis+cluster://"),
            Err(Error::Config(_))
        ));
        assert!(matches!(Target::parse("redis://"), Err(Error::Config(_))));
    }

    #[cfg(not(feature = "redis-tls"))]
    #[test]
    fn a_tls_url_without_the_tls_feature_names_the_feature() {
        match Target::parse("rediss://h:6380") {
            Err(Error::Config(m)) => assert!(m.contains("redis-tls"), "{m}"),
            _ => panic!("expected a configuration error"),
        }
    }

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
    fn glob_characters_of_a_prefix_are_escaped() {
        assert_eq!(glob_escape(r"a*b?[c]\"), r"a\*b\?\[c\]\\");
    }

    fn key() -> OperationKey {
        "idem:0123456789abcdef0123456789abcdef".parse().unwrap()
    }

    /// The server's clock in the decoding tests.
    const SERVER_NOW: i64 = 1_764_400_010_000;

    /// Decodes `raw` read with a minute of `PTTL` left at [`SERVER_NOW`].
    fn decode(raw: &[u8]) -> Result<Entry> {
        decode_entry(
            &key(),
            raw,
            Some(60_000),
            Some(SERVER_NOW),
            SystemTime::now(),
        )
    }

    #[test]
    fn a_running_entry_past_its_lease_deadline_on_the_server_clock_is_unknown() {
        let raw = br#"{"status":"running","startedAt":1764400000000,"leaseUntil":1764400010000,"owner":"ab","fingerprint":"0000000000000000000000000000000000000000000000000000000000000000","firstStartedAt":1764390000000,"attempts":2,"scope":"run-1","tool":"send_email","detail":"smtp \"x\""}"#;
        let local = UNIX_EPOCH + Duration::from_secs(2_000_000_000);
        let e = decode_entry(&key(), raw, Some(86_400_000), Some(SERVER_NOW), local).unwrap();
        assert_eq!(
            e.state,
            EntryState::Unknown {
                owner: Some("ab".into())
            }
        );
        assert_eq!(
            e.expires_at,
            Some(local),
            "the lease deadline, on the local clock"
        );
        assert_eq!(e.attempts, 2);
        assert_eq!(
            e.first_started_at,
            Some(UNIX_EPOCH + Duration::from_millis(1_764_390_000_000))
        );
        assert_eq!(e.about.scope.as_deref(), Some("run-1"));
        assert_eq!(e.about.tool.as_deref(), Some("send_email"));
        assert_eq!(e.about.detail.as_deref(), Some("smtp \"x\""));
        // One millisecond earlier on the server's clock it was still running.
        let e = decode_entry(&key(), raw, Some(86_400_000), Some(SERVER_NOW - 1), local).unwrap();
        assert!(matches!(e.state, EntryState::Running { .. }), "{e:?}");
        assert_eq!(e.expires_at, Some(local + Duration::from_millis(1)));
    }

    #[test]
    fn a_running_entry_of_today_is_running_while_its_key_outlives_its_retention() {
        let raw = br#"{"status":"running","startedAt":1,"owner":"ab","retention":60000,"fingerprint":"0000000000000000000000000000000000000000000000000000000000000000","firstStartedAt":1,"attempts":1}"#;
        let local = UNIX_EPOCH + Duration::from_secs(2_000_000_000);
        // No server clock needed, and the start (from a client's clock) plays no part.
        let e = decode_entry(&key(), raw, Some(60_001), None, local).unwrap();
        assert!(matches!(e.state, EntryState::Running { .. }), "{e:?}");
        assert_eq!(e.expires_at, Some(local + Duration::from_millis(1)));
        let e = decode_entry(&key(), raw, Some(60_000), None, local).unwrap();
        assert!(matches!(e.state, EntryState::Unknown { .. }), "{e:?}");
        assert_eq!(e.expires_at, Some(local));
        // Without the key's TTL it cannot be judged.
        assert!(decode_entry(&key(), raw, None, None, local).is_err());
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

    #[test]
    fn the_owner_digest_is_the_sha1_that_redis_computes() {
        // redis-cli EVAL "return redis.sha1hex(ARGV[1])" 0 0123456789abcdef0123456789abcdef
        let owner = OwnerToken::from_stored("0123456789abcdef0123456789abcdef");
        assert_eq!(
            &owner_digest(&owner),
            b"b1775a785f09a6ebaf2dc33d6eaeb98974d9cdb8"
        );
    }

    #[test]
    fn the_running_value_built_by_hand_is_the_shape_the_scripts_read() {
        let owner = OwnerToken::from_stored("0123456789abcdef0123456789abcdef");
        let fp: Fingerprint = "ab".repeat(32).parse().unwrap();
        let about = About::new("run \"1\"", "charge");
        let k = key();
        let req = ClaimRequest::new(&k, &fp, &owner, Duration::from_secs(60)).about(&about);
        let value = running_value(&req, 1_764_400_000_123, 86_400_000).unwrap();
        assert_eq!(
            value,
            format!(
                r#"{{"status":"running","startedAt":1764400000123,"owner":"b1775a785f09a6ebaf2dc33d6eaeb98974d9cdb8","retention":86400000,"fingerprint":"{}","firstStartedAt":1764400000123,"attempts":1,"scope":"run \"1\"","tool":"charge"}}"#,
                fp.as_str()
            )
        );
        let e = decode_entry(
            &key(),
            value.as_bytes(),
            Some(86_400_001),
            None,
            SystemTime::now(),
        )
        .unwrap();
        assert_eq!(e.about, about);
        assert_eq!((e.attempts, e.fingerprint), (1, Some(fp)));
    }

    #[test]
    fn a_running_entry_without_a_lease_deadline_is_running_while_its_key_lives() {
        // Today's version's shape: the key's PTTL is the lease.
        let raw = br#"{"status":"running","startedAt":1700000000000,"owner":"ab","fingerprint":"0000000000000000000000000000000000000000000000000000000000000000"}"#;
        let local = UNIX_EPOCH + Duration::from_secs(2_000_000_000);
        let e = decode_entry(&key(), raw, Some(5_000), Some(SERVER_NOW), local).unwrap();
        assert_eq!(
            e.state,
            EntryState::Running {
                owner: Some("ab".into())
            }
        );
        assert_eq!(e.expires_at, Some(local + Duration::from_secs(5)));
        assert_eq!((e.attempts, e.first_started_at), (0, None));
        assert!(e.about.is_empty());
    }

    #[test]
    fn a_settled_entry_read_without_the_server_clock_decodes_and_a_lease_without_it_is_refused() {
        let done = br#"{"status":"done","result":{"n":1},"startedAt":1764400000000,"completedAt":1764400000001,"settledAt":1764400000001,"fingerprint":"0000000000000000000000000000000000000000000000000000000000000000"}"#;
        let two =
            |raw: &[u8]| Value::Array(vec![Value::BulkString(raw.to_vec()), Value::Int(60_000)]);
        let e = decode_read(&key(), two(done)).unwrap();
        assert!(matches!(e.state, EntryState::Done { .. }), "{e:?}");
        // A running entry of another writer (no lease deadline) needs no clock either.
        let theirs = br#"{"status":"running","startedAt":1700000000000}"#;
        let e = decode_read(&key(), two(theirs)).unwrap();
        assert!(matches!(e.state, EntryState::Running { .. }), "{e:?}");
        // Ours has a lease deadline: without the server's clock it cannot be judged.
        let ours = br#"{"status":"running","startedAt":1764400000000,"leaseUntil":1764400010000,"owner":"ab","fingerprint":"0000000000000000000000000000000000000000000000000000000000000000","firstStartedAt":1764390000000,"attempts":1}"#;
        assert!(decode_read(&key(), two(ours)).is_err());
        let three = Value::Array(vec![
            Value::BulkString(ours.to_vec()),
            Value::Int(60_000),
            Value::Int(SERVER_NOW),
        ]);
        assert!(matches!(
            decode_read(&key(), three).unwrap().state,
            EntryState::Unknown { .. }
        ));
        let four = Value::Array(vec![Value::Nil, Value::Nil, Value::Nil, Value::Nil]);
        assert!(decode_read(&key(), four).is_err());
    }

    #[test]
    fn about_members_are_json_encoded_and_absent_ones_left_out() {
        assert_eq!(about_members(&About::default()).unwrap(), "}");
        let about = About::new("run \"1\"", "charge").detail("line\nbreak");
        assert_eq!(
            about_members(&about).unwrap(),
            r#","scope":"run \"1\"","tool":"charge","detail":"line\nbreak"}"#
        );
    }

    #[test]
    fn an_entry_of_the_reference_design_decodes_without_owner_or_fingerprint() {
        let raw = br#"{"status":"done","result":{"id":"ch_1","amount":500},"startedAt":1764400000000,"worker":"ts"}"#;
        let e = decode(raw).unwrap();
        assert_eq!(e.fingerprint, None);
        assert_eq!(
            e.started_at,
            UNIX_EPOCH + Duration::from_millis(1_764_400_000_000)
        );
        assert_eq!(
            e.state,
            EntryState::Done {
                result: serde_json::json!({"id": "ch_1", "amount": 500}),
                completed_at: None
            }
        );
        let raw = br#"{"status":"running","startedAt":1764400000000}"#;
        let e = decode(raw).unwrap();
        assert_eq!(e.state, EntryState::Running { owner: None });
    }

    #[test]
    fn a_null_result_is_a_result_and_a_missing_one_is_corrupt() {
        let e = decode(br#"{"status":"done","result":null}"#).unwrap();
        assert!(matches!(
            e.state,
            EntryState::Done {
                result: Json::Null,
                ..
            }
        ));
        assert!(matches!(
            decode(br#"{"status":"done"}"#),
            Err(Error::Corrupt { .. })
        ));
    }

    #[test]
    fn garbage_and_unknown_states_are_corrupt() {
        for raw in [&b"not json"[..], b"[1]", br#"{"status":"paused"}"#, b"null"] {
            assert!(
                matches!(decode(raw), Err(Error::Corrupt { .. })),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn errors_of_other_writers_decode_leniently() {
        let e = decode(br#"{"status":"failed","error":"declined"}"#).unwrap();
        assert!(
            matches!(e.state, EntryState::Failed { ref error, .. } if error.message == "declined")
        );
        let e = decode(br#"{"status":"failed","error":{"message":"declined","code":42}}"#).unwrap();
        assert!(
            matches!(e.state, EntryState::Failed { ref error, .. } if error.message == "declined")
        );
    }

    #[test]
    fn a_list_cursor_survives_encoding() {
        let nodes = vec![
            Some(("127.0.0.1".to_owned(), 7000)),
            Some(("127.0.0.1".to_owned(), 7001)),
        ];
        let c = ListCursor {
            node: 1,
            scan: 42,
            pending: vec![key()],
        };
        let text = c.encode(&nodes);
        assert_eq!(text, "127.0.0.1:7001/42/0123456789abcdef0123456789abcdef");
        let back = ListCursor::parse(&text, &nodes).unwrap();
        assert_eq!((back.node, back.scan, back.pending), (1, 42, vec![key()]));
        // A master that left: continue with the next one in address order.
        let fewer = vec![nodes[0].clone()];
        assert_eq!(ListCursor::parse(&text, &fewer).unwrap().node, 1);
        assert!(ListCursor::parse("nonsense", &nodes).is_err());
        assert!(ListCursor::parse("0/1/zz", &[None]).is_err());
    }

    #[test]
    fn leases_and_retentions_are_clamped_to_what_px_accepts() {
        assert_eq!(px(Duration::ZERO), 1);
        assert_eq!(px(Duration::MAX), MAX_PX_MS);
        assert_eq!(px(Duration::from_millis(1500)), 1500);
    }
}
