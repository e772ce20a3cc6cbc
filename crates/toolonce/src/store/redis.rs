//! The Redis store: entries are JSON values under the operation key (optionally prefixed), in
//! the wire format TypeScript workers share (see `docs/contract.md`), with Redis's own `PX` expiry. Each
//! operation is one atomic step and one round trip: a claim on Redis 7 or later is the native
//! `SET … NX GET PX` (a key found running goes on to the claim script), everything else is a Lua
//! script sent by hash. Works on a single server and on Redis Cluster (every operation touches
//! one key).
//!
//! This file declares the parts, re-exports the public API and drives the operations (the
//! [`Store`] implementation); the parts never import it: the handle and the builder live in
//! `conn`, the scripts in `scripts`, the running value a claim writes in `running` and the
//! decoder of every entry read in `wire`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::redis::Value;
use async_trait::async_trait;
use serde_json::Value as Json;

use crate::key::OperationKey;
use crate::store::contract::{
    Claim, ClaimRequest, Entry, Fenced, ListQuery, Page, Removed, Resolution, Resolved, Seen,
    SeenSettled, Store, Unreadable, millis,
};
use crate::store::owner::OwnerToken;
use crate::store::removal::epoch_millis;
use crate::tool::ToolError;
use crate::{Error, Result};

mod builder;
mod conn;
mod error;
mod eviction;
mod link;
mod list;
mod members;
mod native;
mod persistence;
mod plain;
mod replicas;
mod running;
mod scripts;
mod sentinel;
mod url;
mod wire;

pub use builder::RedisStoreBuilder;
#[doc(hidden)]
pub use builder::connect_client;
pub use conn::RedisStore;
#[doc(hidden)]
pub use link::Conn;
#[cfg(test)]
pub(crate) use url::describe;

use error::to_error;
use list::{ListCursor, MAX_SCANS_PER_PAGE, glob_escape};
use native::{Held, Native, now_ms};
use replicas::{Acks, evalsha, short_claim, warn_short_settle, write_alone};
use running::running_value;
use scripts::SCRIPTS;
use wire::{decode_read, decode_unless_running};

/// Redis refuses `PX 0`, and `PX` values whose deadline overflows its clock; a lease or
/// retention is clamped into `1 ms ..= 100 years`.
const MAX_PX_MS: u64 = 100 * 365 * 24 * 60 * 60 * 1000;

fn px(d: Duration) -> u64 {
    millis(d).clamp(1, MAX_PX_MS)
}

impl RedisStore {
    /// Sends a write (`cmd`, the `EVALSHA` of `script` when it is one): under `replicas=N`
    /// with `WAIT` behind it on a write connection (see `replicas.rs`), else alone on the
    /// store's connection. Answers the reply and how many replicas acknowledged it.
    async fn write(
        &self,
        cmd: &::redis::Cmd,
        script: Option<&::redis::Script>,
    ) -> Result<(Value, Acks)> {
        match &self.replication {
            Some(replication) => replication.write(cmd, script).await,
            None => write_alone(self.conn(), cmd, script)
                .await
                .map(|v| (v, Acks::Enough)),
        }
    }

    /// Under `replicas=N`: the entry of `key` when it is settled (or not toolonce's own
    /// shape), read with one `GET` on the store's connection. A claim would find that entry
    /// and write nothing, but every claim goes over the write connections with a `WAIT` behind
    /// it; looking first keeps a replay (the common duplicate) off them, for one more round
    /// trip on a first-time write. A running entry, or none, is left to the claim: only the
    /// claim's own atomic step may decide those.
    async fn settled(&self, key: &OperationKey, redis_key: &str) -> Result<Option<Entry>> {
        let raw: Option<Vec<u8>> = ::redis::cmd("GET")
            .arg(redis_key)
            .query_async(&mut self.conn())
            .await
            .map_err(to_error)?;
        match raw {
            Some(raw) => decode_unless_running(key, &raw, SystemTime::now()),
            None => Ok(None),
        }
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
        let value = running_value(req, started, retention);
        if self.replication.is_some()
            && let Some(entry) = self.settled(req.key, &redis_key).await?
        {
            return Ok(Claim::Existing(entry));
        }
        if self.native_claim {
            // One native command decides and answers atomically: nil when the key was absent
            // (now ours), else the value that was there (and stays: NX wrote nothing). A
            // settled or foreign-shaped entry is the answer; a running one needs its PTTL and
            // perhaps a fenced write (our own lost claim, a takeover): the script below.
            // Sized up front: the command's buffer would otherwise grow (and copy the value)
            // three times as the arguments go in, on every claim, replays included.
            let mut set = ::redis::Cmd::with_capacity(7, redis_key.len() + value.len() + 40);
            set.arg("SET")
                .arg(&redis_key)
                .arg(&value)
                .arg("NX")
                .arg("GET")
                .arg("PX")
                .arg(lease + retention);
            let reply = self.write(&set, None).await;
            match reply {
                Ok((Value::Nil, Acks::Enough)) => {
                    // Exactly what the key now holds: the owner's settles compare it whole.
                    req.owner.remember_written(Some(value));
                    return Ok(Claim::Won);
                }
                Ok((Value::Nil, acks)) => return Err(short_claim(req.key, acks)),
                Ok((Value::BulkString(raw), _)) => {
                    if let Some(entry) = decode_unless_running(req.key, &raw, SystemTime::now())? {
                        return Ok(Claim::Existing(entry));
                    }
                }
                Ok(_) => return Err(Error::store("unexpected reply to SET … NX GET")),
                // A server that reported 7 and refuses the form (a look-alike) fails the claim
                // closed; `native_claim(false)` is the way round it.
                Err(e) => return Err(e),
            }
        }
        // The script may write `value` or rewrite an entry of ours (a lost claim's retry, a
        // takeover): the exact bytes are not known, so the owner's settles go by its digest.
        req.owner.remember_written(None);
        // Owner digest and fingerprint are hex digits and the about members are JSON-encoded
        // here, so the script splices them into the entry without escaping anything.
        let mut claim = evalsha(
            &SCRIPTS.claim,
            &redis_key,
            7,
            req.owner.as_str().len() + req.fingerprint.as_str().len() + value.len() + 60,
        );
        claim
            .arg(lease)
            .arg(retention)
            .arg(req.owner.as_str())
            .arg(req.fingerprint.as_str())
            .arg(value)
            .arg(if req.takeover { "1" } else { "0" })
            .arg(started);
        let (reply, acks) = self.write(&claim, Some(&SCRIPTS.claim)).await?;
        match reply {
            // A claim, or a takeover, that too few replicas have: the tool is not run.
            Value::Int(1 | 2) if acks != Acks::Enough => Err(short_claim(req.key, acks)),
            Value::Int(1) => Ok(Claim::Won),
            Value::Int(2) => Ok(Claim::TookOver),
            other => decode_read(req.key, other).map(Claim::Existing),
        }
    }

    async fn renew(&self, key: &OperationKey, owner: &OwnerToken, lease: Duration) -> Result<bool> {
        let redis_key = self.redis_key(key);
        let lease = px(lease);
        let written = owner.written();
        let held = written.as_deref().and_then(Held::parse);
        if let Some(held) = &held
            && self.native_fence
        {
            // The same value again under a new expiry: the lease plus the retention.
            let expiry = lease.saturating_add(held.retention).min(MAX_PX_MS);
            if let Native::Applied = self
                .set_ifeq(&redis_key, held.value, held.value, expiry)
                .await?
            {
                return Ok(true);
            }
        }
        let mut invocation = SCRIPTS.renew.key(redis_key);
        invocation.arg(owner.as_str()).arg(lease);
        if let Some(held) = &held {
            invocation.arg(held.value).arg(held.retention);
        }
        let applied: i64 = invocation
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
        let head = settled_head(r#"{"status":"done","result":"#, result)?;
        let settle = Settle {
            head,
            at_field: "completedAt",
            retention: Some(px(retention)),
            what: "result",
        };
        self.settle(key, owner, settle, &SCRIPTS.complete).await
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
                let head = settled_head(r#"{"status":"failed","error":"#, error)?;
                (Some(px(retention)), head)
            }
            None => (None, String::new()),
        };
        let settle = Settle {
            head,
            at_field: "failedAt",
            retention,
            what: "failure",
        };
        self.settle(key, owner, settle, &SCRIPTS.fail).await
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
        let mut unreadable = Vec::new();
        let mut scans = 0;
        loop {
            // Read the pending candidates, a page's worth at a time (concurrently: the
            // multiplexed connection pipelines them), keeping the live ones in the state asked.
            // One entry another writer garbled is reported beside the page, not the page
            // failed; it counts towards the page size, so a page stays bounded.
            while !cursor.pending.is_empty() && entries.len() + unreadable.len() < size {
                let take = (size - entries.len() - unreadable.len()).min(cursor.pending.len());
                let chunk: Vec<OperationKey> = cursor.pending.drain(..take).collect();
                let read = futures_util::future::join_all(chunk.iter().map(|k| self.read(k)));
                for entry in read.await {
                    match entry {
                        Ok(Some(entry)) if query.admits(&entry) => entries.push(entry),
                        Ok(_) => {}
                        Err(e) => unreadable.push(Unreadable::from_error(e)?),
                    }
                }
            }
            if entries.len() + unreadable.len() >= size {
                let more = !cursor.pending.is_empty() || cursor.node < nodes.len();
                return Ok(Page::new(entries, more.then(|| cursor.encode(&nodes)))
                    .with_unreadable(unreadable));
            }
            if cursor.node >= nodes.len() {
                return Ok(Page::new(entries, None).with_unreadable(unreadable));
            }
            if scans == MAX_SCANS_PER_PAGE {
                // A sparse keyspace: hand back a short page rather than walk it all in one call.
                return Ok(
                    Page::new(entries, Some(cursor.encode(&nodes))).with_unreadable(unreadable)
                );
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
        seen: &Seen,
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
                let head = settled_head(r#"{"status":"failed","error":"#, error)?;
                (head, "failedAt")
            }
            Resolution::Release => (String::new(), ""),
        };
        let mut resolve = evalsha(&SCRIPTS.resolve, &self.redis_key(key), 6, head.len() + 80);
        resolve
            .arg(px(retention))
            .arg(head)
            .arg(at)
            .arg(seen.owner().map_or(String::new(), |o| format!("={o}")))
            .arg(seen.attempts())
            .arg(if seen.acts_while_live() { "1" } else { "0" });
        let (reply, acks) = self.write(&resolve, Some(&SCRIPTS.resolve)).await?;
        match reply {
            Value::Int(1) => {
                warn_short_settle(key, "resolution", acks);
                Ok(Resolved::Applied)
            }
            Value::Int(0) => Ok(Resolved::Absent),
            // Refused: the entry the script found, judged again to say why.
            other => decode_read(key, other).map(|entry| seen.refusal(entry)),
        }
    }

    /// One script (`remove.lua`) compares the entry with the settled entry seen and deletes
    /// it only if they are the same; a refused entry comes back as the read script gives it.
    async fn remove(&self, key: &OperationKey, seen: &SeenSettled) -> Result<Removed> {
        let mut remove = evalsha(&SCRIPTS.remove, &self.redis_key(key), 5, 64);
        remove
            .arg(seen.state().as_str())
            .arg(seen.attempts())
            .arg(
                seen.settled_at()
                    .map_or(String::new(), |t| epoch_millis(t).to_string()),
            )
            .arg(epoch_millis(seen.started_at()))
            .arg(seen.settled_by().map_or("", |b| b.as_str()));
        let (reply, acks) = self.write(&remove, Some(&SCRIPTS.remove)).await?;
        match reply {
            Value::Int(1) => {
                warn_short_settle(key, "removal", acks);
                Ok(Removed::Applied)
            }
            Value::Int(0) => Ok(Removed::Absent),
            other => decode_read(key, other).map(Removed::Changed),
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

/// The 1 or 0 a fenced script answers.
fn applied(reply: Value) -> Result<i64> {
    match reply {
        Value::Int(n) => Ok(n),
        _ => Err(Error::store("unexpected reply from a fenced script")),
    }
}

/// A fenced settle: the head of the settled entry (empty when released), the member its
/// settling time goes under, its retention (`None`: release the entry), and what it records,
/// for the warning when too few replicas acknowledged it.
struct Settle {
    head: String,
    at_field: &'static str,
    retention: Option<u64>,
    what: &'static str,
}

/// `prefix`, then `member` as JSON: written into one buffer, where building the member's text
/// and then appending it allocated twice and copied it once more, on every settle.
fn settled_head(prefix: &str, member: &impl serde::Serialize) -> Result<String> {
    let mut head = Vec::with_capacity(prefix.len() + 128);
    head.extend_from_slice(prefix.as_bytes());
    serde_json::to_writer(&mut head, member).map_err(Error::store)?;
    // serde_json writes nothing but UTF-8; checking it costs a pass, not an allocation.
    String::from_utf8(head).map_err(Error::store)
}

impl RedisStore {
    /// Settles `key` for `owner`: with one native `SET … IFEQ` where the server has it and the
    /// owner holds the exact value its claim wrote, else with `script` (complete.lua or
    /// fail.lua), which compares that whole value first when the owner has it and falls back
    /// to the owner's digest. A release is always the script: `SET` cannot delete (`DELEX`,
    /// Redis 8.4's, is not in Valkey 8.1). With `replicas=N` the native fence is off (see
    /// `connect`): every settle is the script, followed by its `WAIT`.
    async fn settle(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        settle: Settle,
        script: &::redis::Script,
    ) -> Result<Fenced> {
        let redis_key = self.redis_key(key);
        let written = owner.written();
        let held = written.as_deref().and_then(Held::parse);
        let settled = match (&held, settle.retention) {
            (Some(held), Some(_)) => held.settled(&settle.head, settle.at_field, now_ms()),
            _ => String::new(),
        };
        if let (Some(held), Some(retention), true) = (&held, settle.retention, self.native_fence)
            && let Native::Applied = self
                .set_ifeq(&redis_key, &settled, held.value, retention)
                .await?
        {
            return Ok(Fenced::Applied);
        }
        let held_len = held.as_ref().map_or(0, |h| h.value.len() + settled.len());
        let mut invocation = evalsha(
            script,
            &redis_key,
            5,
            owner.as_str().len() + settle.head.len() + held_len + 20,
        );
        let mut retention = itoa::Buffer::new();
        invocation
            .arg(owner.as_str())
            .arg(settle.retention.map_or("", |r| retention.format(r)))
            .arg(&settle.head);
        if let Some(held) = &held {
            invocation.arg(held.value).arg(&settled);
        }
        let (reply, acks) = self.write(&invocation, Some(script)).await?;
        let applied = fenced(applied(reply)?);
        // A release that a replica lacks leaves it the running claim: after a failover that
        // entry runs out into `unknown`, which fails closed, so only a record warns.
        if applied == Fenced::Applied
            && settle.retention.is_some()
            && let Acks::Short(short) = acks
        {
            warn_short_settle(key, settle.what, acks);
            return Ok(Fenced::AppliedUnreplicated(short));
        }
        Ok(applied)
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
