//! Failovers of a Redis primary, on real servers on loopback (Redis 7 and Valkey 8.1): a
//! primary and a replica whose replication link runs through a proxy the test stalls, so that
//! exactly the writes it means to lose reach only the primary; then SIGKILL of the primary and
//! promotion of the replica. With `replicas=1` no operation runs twice across the failover,
//! and without it the same storm runs some twice: the window that `replicas=N` closes. A
//! Sentinel trio shows that a `redis+sentinel://` store follows the master it promotes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use toolonce::key::{self, Derived};
use toolonce::store::redis::RedisStore;
use toolonce::{Layer, Outcome, Store, WriteAnswer, WriteOptions};
use toolonce_testsupport::{Logs, RedisServer, ReplicatedRedis};

#[path = "support/storm.rs"]
mod storm;
use storm::{Storm, at_most_once, some_twice, until_available, valkey};

/// An operation unique to the test run.
fn op(test: &str, n: usize) -> Derived {
    static RUN: AtomicU64 = AtomicU64::new(0);
    let scope = format!(
        "failover-{test}-{}-{}",
        std::process::id(),
        RUN.fetch_add(1, Ordering::Relaxed)
    );
    key::derive(&scope, "charge", &json!({"n": n}), None).unwrap()
}

/// A write tool that counts its runs; `during` runs inside it, while it holds the claim.
async fn call(
    layer: &Layer,
    op: &Derived,
    runs: &AtomicU32,
    during: impl FnOnce() + Send,
) -> WriteAnswer {
    let options = WriteOptions::new().lease(Duration::from_secs(2));
    layer
        .run("charge", op, &options, |_| async move {
            let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
            during();
            Ok(json!({"receipt": "r_5", "run": n}))
        })
        .await
}

/// A store on `url` whose writes wait 200 ms for `replicas` (the storms: short, so a stalled
/// replica costs little).
async fn store(url: &str, replicas: u32) -> Arc<dyn Store> {
    store_waiting(url, replicas, Duration::from_millis(200)).await
}

/// A store whose writes wait up to `wait` for `replicas`: the single-call tests give a
/// replica that is up (or has just caught up) time to answer on a loaded machine.
async fn store_waiting(url: &str, replicas: u32, wait: Duration) -> Arc<dyn Store> {
    Arc::new(
        RedisStore::builder(url)
            .replicas(replicas)
            .replica_timeout(wait)
            .reconnect_attempts(1)
            .connect()
            .await
            .unwrap(),
    )
}

/// How long the single-call tests let a write wait for its replica.
const PATIENT: Duration = Duration::from_secs(2);

/// [`call`] until the store answers something other than `store_unavailable`
/// ([`until_available`]).
async fn call_until_available(layer: &Layer, op: &Derived, runs: &AtomicU32) -> WriteAnswer {
    until_available(|| call(layer, op, runs, || {})).await
}

/// `replicas=1`, the replica's link stalled: the claim reaches only the primary, so the tool
/// is not run, the claim is released (nothing stays behind) and the caller hears
/// `store_unavailable`; once the replica catches up, the same call runs once.
async fn a_claim_the_replica_lacks_is_not_run(set: ReplicatedRedis) {
    let store = store_waiting(&set.front.url("redis"), 1, PATIENT).await;
    let layer = Layer::new(store.clone());
    let op = op("claim", 0);
    let runs = AtomicU32::new(0);

    set.link.stall();
    let first = call(&layer, &op, &runs, || {}).await;
    assert_eq!(first.outcome, Outcome::StoreUnavailable, "{first:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the tool ran");
    let detail = format!("{:?}", first.result);
    assert!(detail.contains("replicas"), "{detail}");
    assert_eq!(store.get(&op.key).await.unwrap(), None, "the claim stayed");

    set.link.heal();
    let retry = call_until_available(&layer, &op, &runs).await;
    assert_eq!(retry.outcome, Outcome::Executed, "{retry:?}");
    let duplicate = call(&layer, &op, &runs, || {}).await;
    assert_eq!(duplicate.outcome, Outcome::Replayed, "{duplicate:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// `replicas=1`, the replica's link stalled: a takeover of an `unknown` entry reaches only the
/// primary, so it is not run; but the attempt it took over may have taken effect, so the entry
/// is given back (`unknown`, its attempts kept), never deleted: a `hold` duplicate does not run
/// it, and once the replica catches up a caller that asks to rerun runs it once.
async fn a_takeover_the_replica_lacks_keeps_the_earlier_attempt(set: ReplicatedRedis) {
    let store = store_waiting(&set.front.url("redis"), 1, PATIENT).await;
    let layer = Layer::new(store.clone());
    let op = op("takeover", 0);
    let runs = AtomicU32::new(0);
    let crashed = toolonce::OwnerToken::generate();
    let request = toolonce::ClaimRequest::new(
        &op.key,
        &op.fingerprint,
        &crashed,
        Duration::from_millis(300),
    );
    assert!(matches!(
        store.claim(&request).await.unwrap(),
        toolonce::Claim::Won
    ));
    until_unknown(&*store, &op).await;
    let options = WriteOptions::new().on_expired(toolonce::OnExpired::Rerun);
    let rerun = || {
        layer.run("charge", &op, &options, |_| async {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok(json!({"receipt": "r_5"}))
        })
    };

    set.link.stall();
    let first = rerun().await;
    assert_eq!(first.outcome, Outcome::StoreUnavailable, "{first:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the tool ran");
    let entry = store.get(&op.key).await.unwrap();
    let entry = entry.expect("the earlier attempt's record was deleted");
    assert_eq!(entry.attempts, 2, "the takeover is counted and kept");
    until_unknown(&*store, &op).await;
    let held = call(&layer, &op, &runs, || {}).await;
    assert_eq!(held.outcome, Outcome::Unknown, "{held:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "a hold caller ran it");

    set.link.heal();
    let again = until_available(rerun).await;
    assert_eq!(again.outcome, Outcome::Executed, "{again:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// Waits (at most 10 s) until `op`'s entry is `unknown`.
async fn until_unknown(store: &dyn Store, op: &Derived) {
    for _ in 0..200 {
        let entry = store
            .get(&op.key)
            .await
            .unwrap()
            .expect("the entry is there");
        if entry.state() == toolonce::State::Unknown {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the entry never became unknown");
}

/// `replicas=1`, the replica's link stalls while the tool runs: the result is the caller's,
/// the entry stays done on the primary, and both the answer's notice and the log say it may
/// not survive a failover.
async fn a_result_the_replica_lacks_is_returned_and_kept(set: ReplicatedRedis) {
    let logs = Logs::capture();
    let store = store_waiting(&set.front.url("redis"), 1, PATIENT).await;
    let layer = Layer::new(store.clone());
    let (healthy, op) = (op("result", 1), op("result", 0));
    let runs = AtomicU32::new(0);

    // With the replica in step, the answer carries no notice.
    let acknowledged = call_until_available(&layer, &healthy, &AtomicU32::new(0)).await;
    assert_eq!(acknowledged.outcome, Outcome::Executed, "{acknowledged:?}");
    assert_eq!(acknowledged.notice, None);

    let first = call(&layer, &op, &runs, || set.link.stall()).await;
    assert_eq!(first.outcome, Outcome::Executed, "{first:?}");
    assert_eq!(first.result, Ok(json!({"receipt": "r_5", "run": 1})));
    let notice = first.notice.clone().unwrap_or_default();
    assert!(
        notice.contains("only 0 of the 1 replicas asked (replicas=1) acknowledged the write")
            && notice.contains("the record may be lost"),
        "the answer does not say the result may not survive a failover: {first:?}"
    );
    let duplicate = call(&layer, &op, &runs, || {}).await;
    assert_eq!(duplicate.outcome, Outcome::Replayed, "{duplicate:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let logs = logs.about(&op.key);
    assert!(
        logs.contains("may not survive a failover") || logs.contains("may be lost"),
        "no warning about the unreplicated result:\n{logs}"
    );
    set.link.heal();
}

/// `replicas=1`: a duplicate of a recorded operation is answered from one `GET` on the
/// store's own connection. It does not claim, so it sends no `WAIT` and never queues on the
/// write connections behind writes waiting for their replicas.
async fn a_replay_sends_no_wait(set: ReplicatedRedis) {
    let store = store_waiting(&set.front.url("redis"), 1, PATIENT).await;
    let layer = Layer::new(store.clone());
    let op = op("replay", 0);
    let runs = AtomicU32::new(0);
    let first = call_until_available(&layer, &op, &runs).await;
    assert_eq!(first.outcome, Outcome::Executed, "{first:?}");

    assert_eq!(set.primary.command(&["CONFIG", "RESETSTAT"]), "OK");
    let duplicate = call(&layer, &op, &runs, || {}).await;
    assert_eq!(duplicate.outcome, Outcome::Replayed, "{duplicate:?}");
    assert_eq!(duplicate.result, first.result);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // (The replica's own `REPLCONF ACK`, once a second, is not the store's.)
    let mut commands = set.primary.commands_run();
    commands.retain(|c| !c.starts_with("replconf="));
    assert_eq!(commands, ["get=1"]);
}

/// The storm of `storm.rs` on a primary and its replica: the replication link stalls, then
/// the primary is SIGKILLed, the replica promoted and the old primary brought back as its
/// replica.
async fn storm_across_a_failover(set: ReplicatedRedis, replicas: u32) -> Storm {
    let store = store(&set.front.url("redis"), replicas).await;
    let ops = (0..240).map(|n| op("storm", n)).collect();
    storm::across_a_failover(
        Arc::new(Layer::new(store)),
        ops,
        || set.link.stall(),
        || {
            set.fail_over();
            set.rejoin();
        },
    )
    .await
}

// ---------------------------------------------------------------------------------------------
// Redis 7

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_claim_the_replica_lacks_is_not_run_and_is_released() {
    a_claim_the_replica_lacks_is_not_run(ReplicatedRedis::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_takeover_the_replica_lacks_is_not_run_and_keeps_the_earlier_attempt() {
    a_takeover_the_replica_lacks_keeps_the_earlier_attempt(ReplicatedRedis::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_result_the_replica_lacks_is_returned_kept_and_logged() {
    a_result_the_replica_lacks_is_returned_and_kept(ReplicatedRedis::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_with_replicas_1_a_replay_is_one_get_and_sends_no_wait() {
    a_replay_sends_no_wait(ReplicatedRedis::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_with_replicas_1_a_replay_is_one_get_and_sends_no_wait() {
    a_replay_sends_no_wait(ReplicatedRedis::start_program(&valkey())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_with_replicas_1_every_operation_runs_at_most_once_across_a_failover() {
    at_most_once(&storm_across_a_failover(ReplicatedRedis::start(), 1).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_without_replicas_the_same_failover_runs_operations_twice() {
    some_twice(&storm_across_a_failover(ReplicatedRedis::start(), 0).await);
}

// ---------------------------------------------------------------------------------------------
// Valkey 8.1

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_a_claim_the_replica_lacks_is_not_run_and_is_released() {
    a_claim_the_replica_lacks_is_not_run(ReplicatedRedis::start_program(&valkey())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_a_takeover_the_replica_lacks_is_not_run_and_keeps_the_earlier_attempt() {
    a_takeover_the_replica_lacks_keeps_the_earlier_attempt(ReplicatedRedis::start_program(
        &valkey(),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_a_result_the_replica_lacks_is_returned_kept_and_logged() {
    a_result_the_replica_lacks_is_returned_and_kept(ReplicatedRedis::start_program(&valkey()))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_with_replicas_1_every_operation_runs_at_most_once_across_a_failover() {
    at_most_once(&storm_across_a_failover(ReplicatedRedis::start_program(&valkey()), 1).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_without_replicas_the_same_failover_runs_operations_twice() {
    some_twice(&storm_across_a_failover(ReplicatedRedis::start_program(&valkey()), 0).await);
}

// ---------------------------------------------------------------------------------------------
// Sentinel

/// Three Sentinels watching `set`'s primary, quick to act.
fn sentinels(set: &ReplicatedRedis) -> Vec<RedisServer> {
    let conf = [
        // Not much lower: on a loaded machine a Sentinel stalled for a moment takes the new
        // master for dead and fails over again, to the old primary, which returns empty and
        // has not synced yet: everything would be lost, as it would with real servers
        // restarting without persistence.
        "sentinel down-after-milliseconds toolonce 4000".to_owned(),
        "sentinel failover-timeout toolonce 4000".to_owned(),
        "sentinel parallel-syncs toolonce 1".to_owned(),
    ];
    (0..3)
        .map(|_| {
            RedisServer::start_sentinel(set.program(), "toolonce", set.primary.addr(), 2, &conf)
        })
        .collect()
}

/// The failovers the Sentinels' logs show (what a failed assertion needs to be understood).
fn sentinel_events(sentinels: &[RedisServer]) -> String {
    sentinels
        .iter()
        .flat_map(|s| {
            s.log()
                .lines()
                .filter(|l| l.contains("+sdown master") || l.contains("+switch-master"))
                .map(|l| format!("sentinel {}: {l}", s.port()))
                .collect::<Vec<_>>()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The master the Sentinels name, once they all name the same one and it is not `old`.
fn wait_for_new_master(sentinels: &[RedisServer], old: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let named: Vec<String> = sentinels
            .iter()
            .map(|s| s.command(&["SENTINEL", "get-master-addr-by-name", "toolonce"]))
            .collect();
        if named.iter().all(|n| n == &named[0]) && !named[0].contains(&old.to_string()) {
            return named[0].clone();
        }
        assert!(
            Instant::now() < deadline,
            "the Sentinels promoted nobody: {named:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

async fn a_sentinel_store_follows_the_master(set: ReplicatedRedis) {
    let logs = Logs::capture();
    let sentinels = sentinels(&set);
    let url = format!(
        "redis+sentinel://{}/toolonce?replicas=1&replica_timeout_ms=500",
        sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect::<Vec<_>>()
            .join(",")
    );
    let store: Arc<dyn Store> = Arc::new(
        RedisStore::builder(&url)
            .reconnect_attempts(1)
            .connect()
            .await
            .unwrap(),
    );
    assert!(
        logs.all().contains("keeps nothing on disk"),
        "the persistence check did not warn about a server with save \"\" and appendonly no"
    );
    let layer = Layer::new(store.clone());
    let (before, after) = (op("sentinel", 0), op("sentinel", 1));
    let (runs_before, runs_after) = (AtomicU32::new(0), AtomicU32::new(0));
    let first = call(&layer, &before, &runs_before, || {}).await;
    assert_eq!(first.outcome, Outcome::Executed, "{first:?}");

    let old = set.primary.port();
    set.primary.kill();
    let promoted = wait_for_new_master(&sentinels, old);
    assert!(
        promoted.contains(&set.replica.port().to_string()),
        "{promoted}"
    );
    // The old primary returns, empty; the Sentinels make it a replica of the new master.
    set.primary.restart();

    // The acknowledged result survived on the promoted replica, through the same store.
    let replay = call_until_available(&layer, &before, &runs_before).await;
    assert_eq!(
        replay.outcome,
        Outcome::Replayed,
        "{replay:?}\nwhat the Sentinels did (a second failover to the old primary, promoted \
         before it had synced, would have lost everything):\n{}",
        sentinel_events(&sentinels)
    );
    assert_eq!(runs_before.load(Ordering::SeqCst), 1);
    // New writes reach the new master, and wait for the rejoined replica.
    let fresh = call_until_available(&layer, &after, &runs_after).await;
    assert_eq!(fresh.outcome, Outcome::Executed, "{fresh:?}");
    assert_eq!(runs_after.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_sentinel_store_follows_the_master_it_promotes_and_keeps_what_was_acknowledged() {
    a_sentinel_store_follows_the_master(ReplicatedRedis::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_a_sentinel_store_follows_the_master_it_promotes_and_keeps_what_was_acknowledged() {
    a_sentinel_store_follows_the_master(ReplicatedRedis::start_program(&valkey())).await;
}
