//! The store handle ([`RedisStore`], what it holds and how it names keys) and what connecting
//! asks the servers (the masters of a cluster, whether each has the native claim). The builder,
//! which makes it, is in `builder`; the connection it holds in `link`.

use std::fmt;
use std::sync::Arc;

use ::redis::Value;

use crate::key::OperationKey;
use crate::{Error, Result};

use super::error::to_error;
use super::link::Conn;
use super::replicas::Replication;

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
/// {"status":"done","result":{…},"startedAt":…,"completedAt":…,"settledAt":…,"owner":"<40 hex>","fingerprint":"3a…","firstStartedAt":…,"attempts":1,"scope":…,"tool":…}
/// {"status":"failed","error":{"message":…,"class":"permanent"},"startedAt":…,"failedAt":…,"settledAt":…,"owner":"<40 hex>","fingerprint":"3a…",…}
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
/// `redis://[[user]:password@]host[:port][/db][?OPTIONS]`, `rediss://…` (TLS, feature
/// `redis-tls`); for a cluster `redis+cluster://[[user]:password@]host:port,host:port,…` (or
/// `rediss+cluster://…`): a few seed nodes, from which the client learns the rest; behind
/// Sentinel `redis+sentinel://[[user]:password@]host:port,host:port,…/MASTER-NAME[/db]` (or
/// `rediss+sentinel://…`): the Sentinels, asked for the master of that name again whenever the
/// connection to it breaks or it answers `READONLY` (it was demoted), so the store follows the
/// master across a failover; the userinfo logs in to the master, the Sentinels are asked
/// without. The options: `prefix`, `allow_eviction`, `native_claim`, `replicas` and
/// `replica_timeout_ms` (the builder's [`prefix`](super::RedisStoreBuilder::prefix),
/// [`allow_eviction`](super::RedisStoreBuilder::allow_eviction),
/// [`native_claim`](super::RedisStoreBuilder::native_claim),
/// [`replicas`](super::RedisStoreBuilder::replicas) and
/// [`replica_timeout`](super::RedisStoreBuilder::replica_timeout)), and the driver's
/// `protocol`.
/// Any other option is refused ([`Error::Config`]) naming the ones that exist: an option
/// nobody reads must not look set.
///
/// # Replicas and failover
///
/// Redis replicates asynchronously: without [`replicas`](super::RedisStoreBuilder::replicas), a
/// primary that dies after acknowledging a claim, before a replica received it, loses the claim
/// when the replica is promoted, and a duplicate runs the tool again. With `replicas=N` every write
/// waits (`WAIT N timeout`) until `N` replicas have it; a claim they do not all acknowledge in time
/// is not run. What survives what, with `replicas=1`: a claim the tool ran under, and a result its
/// caller was given without a warning, survive the loss of the primary if the promoted replica is
/// one that acknowledged them. Sentinel and Cluster promote the most up-to-date replica they can
/// reach, which is usually one that acknowledged, not certainly (a partition can leave only a stale
/// replica reachable, and `WAIT` is not an `fsync`: a replica that restarts without persistence
/// forgets). A result that too few replicas acknowledged is still its caller's, with a warning in
/// the log: it may be lost in a failover and then run again by a duplicate.
///
/// # Persistence
///
/// Connecting warns (once, never refusing) when the server keeps nothing on disk (`save ""`
/// and `appendonly no`): a restart forgets every entry.
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
///
/// [`RedisStoreBuilder::native_claim`]: super::RedisStoreBuilder::native_claim
/// [`RedisStoreBuilder::allow_eviction`]: super::RedisStoreBuilder::allow_eviction
#[derive(Clone)]
pub struct RedisStore {
    pub(super) conn: Conn,
    pub(super) prefix: String,
    pub(super) display: String,
    /// Whether claims start with the native `SET … NX GET PX` (every master was Redis 7 or
    /// later on connect).
    pub(super) native_claim: bool,
    /// `replicas=N`: how many replicas each write waits for, and the connections those writes
    /// go over (see `replicas.rs`). `None` for `replicas=0`.
    pub(super) replication: Option<Arc<Replication>>,
    /// Whether the owner's settles and renewals are one native `SET … IFEQ` (the server took
    /// the option when probed on connect; see `native`). Off with `replicas=N`.
    pub(super) native_fence: bool,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.display)
            .field("prefix", &self.prefix)
            .field("native_claim", &self.native_claim)
            .field(
                "replicas",
                &self.replication.as_ref().map_or(0, |r| r.replicas),
            )
            .field("native_fence", &self.native_fence)
            .finish()
    }
}

impl RedisStore {
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
