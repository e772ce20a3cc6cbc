//! The Redis store against real `redis-server` processes: the conformance suite, the wire
//! format shared with TypeScript workers and with the previous version (lease deadline and
//! what an entry says it is inside the value), `resolve` on entries of other writers, round
//! trips per operation, eight processes contending for the same operations, a process killed
//! between claim and complete (its entry becomes `unknown`: held, then taken over), and a
//! server killed while write calls are in flight.

use crate::conformance::{self, ClaimFresh, Fresh};
use crate::redis_round_trips;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use toolonce::store::redis::RedisStore;
use toolonce::{
    About, Claim, ClaimRequest, EntryState, Error, Fenced, Layer, ListQuery, OnExpired, Outcome,
    OwnerToken, Resolution, Resolved, State, Store, ToolError, Verified, WriteOptions, key,
};
use toolonce_testsupport::{RedisServer, shared_redis};

/// A key prefix no other test (or test process) uses, so listings see only their own entries.
fn unique_prefix() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "test-{}-{}:",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

async fn store_on(url: &str) -> RedisStore {
    RedisStore::builder(url)
        .prefix(unique_prefix())
        .connect()
        .await
        .unwrap()
}

// Redis keeps no index by state: counting would read every entry, so its census is `None`.
store_conformance!(async { Arc::new(store_on(&shared_redis().url()).await) }, census: false);

/// The raw Redis key of an operation key in `store`.
fn raw_key(store: &RedisStore, key: &toolonce::OperationKey) -> String {
    store.redis_key(key)
}

/// What a running entry stores instead of its owner token: the token's SHA-1, in hex.
fn owner_digest(owner: &OwnerToken) -> String {
    sha1_smol::Sha1::from(owner.as_str()).digest().to_string()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

mod config;
mod crash;
mod interop;
mod listing;
mod outage;
mod processes;
mod removal;
mod round_trips;

mod cluster;
mod old_servers;
mod script_claim;
mod valkey;
