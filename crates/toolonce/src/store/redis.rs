//! The Redis store: entries are JSON values under the operation key (optionally prefixed), in
//! the wire format TypeScript workers share (see `docs/contract.md`), with Redis's own `PX` expiry. Each
//! operation is one Lua script sent by hash, so each is one atomic step and one round trip.
//! Works on a single server and on Redis Cluster (every operation touches one key).

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
    Claim, ClaimRequest, Entry, EntryState, Fenced, ListQuery, OwnerToken, Page, Resolution,
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
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    claim: Script::new(concat!(
        include_str!("redis/now.lua"),
        include_str!("redis/owned.lua"),
        include_str!("redis/claim.lua")
    )),
    read: Script::new(include_str!("redis/read.lua")),
    renew: Script::new(concat!(
        include_str!("redis/owned.lua"),
        include_str!("redis/renew.lua")
    )),
    complete: Script::new(concat!(
        include_str!("redis/now.lua"),
        include_str!("redis/owned.lua"),
        include_str!("redis/complete.lua")
    )),
    fail: Script::new(concat!(
        include_str!("redis/now.lua"),
        include_str!("redis/owned.lua"),
        include_str!("redis/fail.lua")
    )),
});

/// Redis refuses `PX 0`, and `PX` values whose deadline overflows its clock; a lease or
/// retention is clamped into `1 ms ..= 100 years`.
const MAX_PX_MS: u64 = 100 * 365 * 24 * 60 * 60 * 1000;

fn px(d: Duration) -> u64 {
    millis(d).clamp(1, MAX_PX_MS)
}

/// One connection, to a single server or to a cluster. Both multiplex every request of the
/// store over their connections and reconnect by themselves, so cloning one per request is
/// cheap (an `Arc`) and a store survives a server restart without being rebuilt.
#[derive(Clone)]
enum Conn {
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

    /// Connects (to one node of a cluster at least), checks that Redis will not evict entries
    /// (see [`allow_eviction`](Self::allow_eviction)) and loads the scripts.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a malformed URL, a `rediss://` URL in a build without the
    /// `redis-tls` feature, options the driver refuses, or a server that may evict entries;
    /// [`Error::Unavailable`] when the server cannot be reached; [`Error::Store`] when it
    /// refuses us (a wrong password).
    pub async fn connect(self) -> Result<RedisStore> {
        let target = Target::parse(&self.url)?;
        let prefix = self.prefix.or(target.prefix).unwrap_or_default();
        let allow_eviction = self
            .allow_eviction
            .or(target.allow_eviction)
            .unwrap_or(false);
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
        let store = RedisStore {
            conn,
            prefix,
            display: target.display,
        };
        store.check_eviction(allow_eviction).await?;
        let scripts = &*SCRIPTS;
        for script in [
            &scripts.claim,
            &scripts.read,
            &scripts.renew,
            &scripts.complete,
            &scripts.fail,
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
}

/// A [`Store`] on Redis or Redis Cluster.
///
/// # Data
///
/// The entry of `idem:…` is a string value under `<prefix>idem:…`: a JSON object in the wire
/// format that TypeScript workers of the reference design read and write —
///
/// ```text
/// {"status":"running","startedAt":1764400000000,"owner":"9f…","fingerprint":"3a…"}
/// {"status":"done","result":{…},"startedAt":…,"completedAt":…,"fingerprint":"3a…"}
/// {"status":"failed","error":{"message":…,"class":"permanent"},"startedAt":…,"failedAt":…,"fingerprint":"3a…"}
/// ```
///
/// with Redis's own expiry (`PX`): the lease while running, the retention once settled.
/// Unknown fields are ignored; entries written by the reference design (only `status`,
/// `startedAt` and `result`) read as entries without owner or fingerprint.
///
/// # Atomicity and clocks
///
/// Every operation is one Lua script sent by hash (`EVALSHA`): Redis runs scripts one at a
/// time, so a script's reads and writes are one atomic step, and each costs one round trip (a
/// first-time write call two: claim and complete; a replay one). The owner token is compared
/// inside the script that writes (fencing). Expiry is Redis's (`PX`, `PEXPIRE`), and the
/// timestamps (`startedAt`, `completedAt`, `failedAt`) come from the server's `TIME` inside the
/// scripts: every worker, whatever its own clock says, agrees on when a lease ends, and all
/// workers' timestamps are on one clock, the one that expires the entries. (An
/// [`Entry::expires_at`] is Redis's remaining `PTTL` added to this machine's clock, since that
/// is the clock a caller compares it with.) Scripts calling `TIME` before writing need effect
/// replication, the default since Redis 5, the oldest version this store supports.
///
/// Results and errors are encoded to JSON here, in Rust, and passed to the scripts as text that
/// they splice in unchanged. The scripts never use `cjson` (it would round numbers to 14
/// significant digits, and can raise on odd input): the fencing scripts recognise a running
/// entry of ours by its exact shape, with one anchored Lua pattern.
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
/// [`get`](Store::get), filtering by state here. The cursor is Redis's `SCAN` cursor plus the
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
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.display)
            .field("prefix", &self.prefix)
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
        let (key, fingerprint, owner, lease) = (req.key, req.fingerprint, req.owner, req.lease);
        // The rest of the running entry after `startedAt` (which the script fills in from the
        // server's clock). Both values are hex digits, so they need no JSON escaping.
        let tail = format!(
            r#","owner":"{}","fingerprint":"{}"}}"#,
            owner.as_str(),
            fingerprint.as_str()
        );
        let reply: Value = SCRIPTS
            .claim
            .key(self.redis_key(key))
            .arg(px(lease))
            .arg(tail)
            .arg(owner.as_str())
            .invoke_async(&mut self.conn())
            .await
            .map_err(to_error)?;
        match reply {
            Value::Int(1) => Ok(Claim::Won),
            other => decode_read(key, other).map(Claim::Existing),
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
                        && query.state.is_none_or(|s| s == entry.state())
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
        _key: &OperationKey,
        _resolution: &Resolution,
        _retention: Duration,
    ) -> Result<Resolved> {
        Err(Error::store(
            "resolve is not implemented yet for this store",
        ))
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

/// Decodes `{value, PTTL}` from the claim and read scripts.
///
/// Redis decides the expiry; the remaining time it reports is turned into an instant on this
/// machine's clock, which is what a caller compares it with.
fn decode_read(key: &OperationKey, reply: Value) -> Result<Entry> {
    let bad = |what: &str| Error::store(format!("unexpected reply from the script: {what}"));
    let Value::Array(mut parts) = reply else {
        return Err(bad("not an array"));
    };
    if parts.len() != 2 {
        return Err(bad("not two elements"));
    }
    let pttl = match parts.pop() {
        Some(Value::Int(n)) => n,
        _ => return Err(bad("PTTL")),
    };
    let raw = match parts.pop() {
        Some(Value::BulkString(raw)) => raw,
        _ => return Err(bad("value")),
    };
    // PTTL is -1 for a key without expiry (written so by another worker).
    let expires_at = u64::try_from(pttl)
        .ok()
        .map(|ms| SystemTime::now() + Duration::from_millis(ms));
    decode_entry(key, &raw, expires_at)
}

/// An entry in the wire format. Every field but `status` is optional: workers of the reference
/// design write only `status`, `startedAt` and `result`, and fields we do not know are ignored.
#[derive(Deserialize)]
struct Wire {
    status: String,
    #[serde(rename = "startedAt", default)]
    started_at: Option<f64>,
    #[serde(rename = "completedAt", default)]
    completed_at: Option<f64>,
    #[serde(rename = "failedAt", default)]
    failed_at: Option<f64>,
    #[serde(default)]
    owner: Option<String>,
    #[serde(default)]
    fingerprint: Option<String>,
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

fn decode_entry(key: &OperationKey, raw: &[u8], expires_at: Option<SystemTime>) -> Result<Entry> {
    let wire: Wire = serde_json::from_slice(raw).map_err(|e| Error::corrupt(key, e))?;
    let fingerprint = match wire.fingerprint {
        Some(f) => Some(
            f.parse::<Fingerprint>()
                .map_err(|e| Error::corrupt(key, e))?,
        ),
        None => None,
    };
    let completed_at = wire.completed_at.map(epoch_ms);
    let failed_at = wire.failed_at.map(epoch_ms);
    let state = match wire.status.as_str() {
        "running" => EntryState::Running { owner: wire.owner },
        "done" => EntryState::Done {
            result: wire
                .result
                .ok_or_else(|| Error::corrupt(key, "a done entry without a result"))?,
            completed_at,
        },
        "failed" => EntryState::Failed {
            error: decode_error(key, wire.error)?,
            failed_at,
        },
        other => return Err(Error::corrupt(key, format!("unknown status {other:?}"))),
    };
    // `startedAt` is required of running entries only; a settled entry of another writer
    // without one reads as started when it settled (or at the epoch, if that is unknown too).
    let started_at = wire
        .started_at
        .map(epoch_ms)
        .or(completed_at)
        .or(failed_at)
        .unwrap_or(UNIX_EPOCH);
    Ok(Entry::new(
        key.clone(),
        fingerprint,
        started_at,
        expires_at,
        state,
    ))
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

    #[test]
    fn glob_characters_of_a_prefix_are_escaped() {
        assert_eq!(glob_escape(r"a*b?[c]\"), r"a\*b\?\[c\]\\");
    }

    fn key() -> OperationKey {
        "idem:0123456789abcdef0123456789abcdef".parse().unwrap()
    }

    #[test]
    fn an_entry_of_the_reference_design_decodes_without_owner_or_fingerprint() {
        let raw = br#"{"status":"done","result":{"id":"ch_1","amount":500},"startedAt":1764400000000,"worker":"ts"}"#;
        let e = decode_entry(&key(), raw, None).unwrap();
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
        let e = decode_entry(&key(), raw, None).unwrap();
        assert_eq!(e.state, EntryState::Running { owner: None });
    }

    #[test]
    fn a_null_result_is_a_result_and_a_missing_one_is_corrupt() {
        let e = decode_entry(&key(), br#"{"status":"done","result":null}"#, None).unwrap();
        assert!(matches!(
            e.state,
            EntryState::Done {
                result: Json::Null,
                ..
            }
        ));
        assert!(matches!(
            decode_entry(&key(), br#"{"status":"done"}"#, None),
            Err(Error::Corrupt { .. })
        ));
    }

    #[test]
    fn garbage_and_unknown_states_are_corrupt() {
        for raw in [&b"not json"[..], b"[1]", br#"{"status":"paused"}"#, b"null"] {
            assert!(
                matches!(decode_entry(&key(), raw, None), Err(Error::Corrupt { .. })),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn errors_of_other_writers_decode_leniently() {
        let e = decode_entry(&key(), br#"{"status":"failed","error":"declined"}"#, None).unwrap();
        assert!(
            matches!(e.state, EntryState::Failed { ref error, .. } if error.message == "declined")
        );
        let e = decode_entry(
            &key(),
            br#"{"status":"failed","error":{"message":"declined","code":42}}"#,
            None,
        )
        .unwrap();
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
