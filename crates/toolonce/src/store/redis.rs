//! The Redis store: entries are JSON values under the operation key (optionally prefixed), in
//! the wire format TypeScript workers share (see `docs/contract.md`), with Redis's own `PX` expiry. Each
//! operation is one atomic step and one round trip: a claim on Redis 7 or later is the native
//! `SET … NX GET PX` (a key found running goes on to the claim script), everything else is a Lua
//! script sent by hash. Works on a single server and on Redis Cluster (every operation touches
//! one key).

use std::fmt;
use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::redis::{Script, Value};
use async_trait::async_trait;
use serde_json::Value as Json;

use crate::store::contract::{
    Claim, ClaimRequest, Entry, Fenced, ListQuery, Page, Resolution, Resolved, Store, millis,
};
use crate::store::owner::OwnerToken;
use crate::key::OperationKey;
use crate::tool::ToolError;
use crate::{Error, Result};

mod conn;
mod error;
mod eviction;
mod list;
mod url;
mod wire;

pub use conn::RedisStoreBuilder;
#[doc(hidden)]
pub use conn::{Conn, connect_client};

use conn::has_native_claim;
use error::to_error;
use list::{ListCursor, MAX_SCANS_PER_PAGE, glob_escape};
use wire::{Wire, decode_read, entry_of, running_value};

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

fn fenced(applied: i64) -> Fenced {
    if applied == 1 {
        Fenced::Applied
    } else {
        Fenced::NotOwner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_and_retentions_are_clamped_to_what_px_accepts() {
        assert_eq!(px(Duration::ZERO), 1);
        assert_eq!(px(Duration::MAX), MAX_PX_MS);
        assert_eq!(px(Duration::from_millis(1500)), 1500);
    }
}
