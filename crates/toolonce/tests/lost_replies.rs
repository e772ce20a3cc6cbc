//! Lost replies, on real servers behind a fault-injecting proxy: the request reaches Redis,
//! Redis Cluster or PostgreSQL and is applied, then the connection drops instead of the reply.
//! Each scenario drives the layer as an agent does (a counting tool, then duplicates) and holds
//! it to the promise: the tool runs exactly once, no caller is told `in_flight` about an
//! operation that is not running, no entry is left orphaned, and a settle that did apply is not
//! reported as a lost claim.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::json;
use toolonce::key::{self, Derived};
use toolonce::store::postgres::PostgresStore;
use toolonce::store::redis::RedisStore;
use toolonce::{Layer, Outcome, Store, WriteAnswer, WriteOptions};
use toolonce_testsupport::{FaultProxy, Logs, RedisCluster, RedisServer, shared_postgres};

/// One operation, unique to the test.
fn op(name: &str) -> Derived {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let scope = format!("lost-{}-{n}", std::process::id());
    key::derive(&scope, name, &json!({"amount": 5}), None).unwrap()
}

/// A write tool that counts its runs; `during` runs inside the tool, while it holds the claim.
async fn call<F: Future<Output = ()> + Send>(
    layer: &Layer,
    op: &Derived,
    options: &WriteOptions,
    runs: &AtomicU32,
    during: impl FnOnce() -> F + Send,
) -> WriteAnswer {
    layer
        .run("charge", op, options, |_| async move {
            let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
            during().await;
            Ok(json!({"receipt": "r_5", "run": n}))
        })
        .await
}

/// Which proxy carries `key`'s requests: the one whose reply count grows when it is read.
async fn proxy_of<'a>(
    store: &dyn Store,
    op: &Derived,
    proxies: &'a [FaultProxy],
) -> &'a FaultProxy {
    let before: Vec<u64> = proxies.iter().map(FaultProxy::replies).collect();
    store.get(&op.key).await.unwrap();
    proxies
        .iter()
        .zip(before)
        .find(|(p, b)| p.replies() > *b)
        .map(|(p, _)| p)
        .expect("no proxy carried the read")
}

/// The claim is applied and its reply lost. The caller is told the store was unavailable (and
/// the layer released the claim) or, where the driver re-sends the claim by itself, that it
/// ran; never `in_flight`, and a retry runs the tool exactly once.
async fn a_lost_claim_reply(store: Arc<dyn Store>, proxies: &[FaultProxy]) {
    let layer = Layer::new(store.clone());
    let op = op("claim");
    let options = WriteOptions::new();
    let runs = AtomicU32::new(0);
    let proxy = proxy_of(&*store, &op, proxies).await;

    proxy.drop_reply(1);
    let first = call(&layer, &op, &options, &runs, || async {}).await;
    assert_eq!(proxy.dropped(), 1, "the claim's reply was dropped");
    assert_ne!(
        first.outcome,
        Outcome::InFlight,
        "in_flight for an operation that is not running: {first:?}"
    );
    if first.outcome == Outcome::StoreUnavailable {
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        // A one-shot caller (`toolonce exec`) stops here: nothing may stay behind.
        assert_eq!(
            store.get(&op.key).await.unwrap(),
            None,
            "the claim whose reply was lost is left running"
        );
        let retry = call(&layer, &op, &options, &runs, || async {}).await;
        assert_eq!(retry.outcome, Outcome::Executed, "{retry:?}");
    } else {
        assert_eq!(first.outcome, Outcome::Executed, "{first:?}");
    }
    let duplicate = call(&layer, &op, &options, &runs, || async {}).await;
    assert_eq!(duplicate.outcome, Outcome::Replayed, "{duplicate:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the tool ran exactly once");
}

/// The complete is applied and its reply lost: the retried complete finds the entry done with
/// this very result, which counts as recorded, not as a lost claim.
async fn a_lost_complete_reply(store: Arc<dyn Store>, proxies: &[FaultProxy]) {
    let logs = Logs::capture();
    let layer = Layer::new(store.clone());
    let op = op("complete");
    let options = WriteOptions::new();
    let runs = AtomicU32::new(0);
    let proxy = proxy_of(&*store, &op, proxies).await;

    let first = call(&layer, &op, &options, &runs, || async {
        proxy.drop_reply(1)
    })
    .await;
    assert_eq!(proxy.dropped(), 1, "the complete's reply was dropped");
    assert_eq!(first.outcome, Outcome::Executed, "{first:?}");
    assert_eq!(first.result, Ok(json!({"receipt": "r_5", "run": 1})));
    let duplicate = call(&layer, &op, &options, &runs, || async {}).await;
    assert_eq!(duplicate.outcome, Outcome::Replayed, "{duplicate:?}");
    assert_eq!(duplicate.result, first.result);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the tool ran exactly once");
    let logs = logs.about(&op.key);
    assert!(logs.contains("write call"), "the log was captured: {logs}");
    assert!(
        !logs.contains("claim was lost"),
        "a complete that applied was reported as a lost claim:\n{logs}"
    );
}

/// A renew is applied and its reply lost while the tool runs past its first lease: the
/// heartbeat carries on and the lease holds. Duplicates, once the reply was dropped (so that
/// theirs are not the reply dropped), are truly in flight and never run; afterwards the result
/// replays, and nobody reports the lease or the claim lost.
async fn a_lost_renew_reply(store: Arc<dyn Store>, proxies: &[FaultProxy]) {
    let logs = Logs::capture();
    let layer = Layer::new(store.clone());
    let op = op("renew");
    // Renewed every second; the tool runs for more than two leases.
    let options = WriteOptions::new().lease(Duration::from_secs(3));
    let runs = AtomicU32::new(0);
    let proxy = proxy_of(&*store, &op, proxies).await;

    let owner = call(&layer, &op, &options, &runs, || async {
        // The first renew, a second from now, is the next request on the key's connection.
        proxy.drop_reply(1);
        tokio::time::sleep(Duration::from_secs(7)).await;
    });
    let duplicates = async {
        while proxy.dropped() == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut seen = Vec::new();
        // Until the owner has surely finished (its duplicates then replay).
        for _ in 0..300 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let answer = call(&layer, &op, &options, &runs, || async {}).await;
            seen.push(answer.outcome);
            if answer.outcome == Outcome::Replayed {
                break;
            }
        }
        seen
    };
    let (first, seen) = tokio::join!(owner, duplicates);
    assert_eq!(proxy.dropped(), 1, "a renew's reply was dropped");
    assert_eq!(first.outcome, Outcome::Executed, "{first:?}");
    assert!(
        seen.iter()
            .all(|o| matches!(o, Outcome::InFlight | Outcome::Replayed)),
        "a duplicate ran or failed while the owner held the lease: {seen:?}"
    );
    assert_eq!(seen.last(), Some(&Outcome::Replayed), "{seen:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the tool ran exactly once");
    let logs = logs.about(&op.key);
    assert!(logs.contains("write call"), "the log was captured: {logs}");
    assert!(
        !logs.contains("lease lost") && !logs.contains("claim was lost"),
        "the lease lapsed:\n{logs}"
    );
}

/// A takeover is applied and its reply lost (the `nth` reply from the call's start: the claim
/// script's, behind Redis 7's native `SET … NX GET`). The earlier attempt may have taken effect,
/// so its record must survive: the caller gives the entry back `unknown`, a `hold` duplicate
/// does not run it, and only a caller that asks to rerun runs it, once.
async fn a_lost_takeover_reply(store: Arc<dyn Store>, proxies: &[FaultProxy], nth: u64) {
    let layer = Layer::new(store.clone());
    let op = op("takeover");
    let runs = AtomicU32::new(0);
    let proxy = proxy_of(&*store, &op, proxies).await;
    // A caller that claimed it and vanished: its lease runs out, the entry is `unknown`.
    let crashed = toolonce::OwnerToken::generate();
    let lease = Duration::from_millis(300);
    let request = toolonce::ClaimRequest::new(&op.key, &op.fingerprint, &crashed, lease);
    assert!(matches!(
        store.claim(&request).await.unwrap(),
        toolonce::Claim::Won
    ));
    while store.get(&op.key).await.unwrap().unwrap().state() != toolonce::State::Unknown {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rerun = WriteOptions::new().on_expired(toolonce::OnExpired::Rerun);
    let hold = WriteOptions::new();

    proxy.drop_reply(nth);
    let first = call(&layer, &op, &rerun, &runs, || async {}).await;
    assert_eq!(proxy.dropped(), 1, "the takeover's reply was dropped");
    if first.outcome == Outcome::StoreUnavailable {
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        let entry = store.get(&op.key).await.unwrap();
        let entry = entry.expect("the earlier attempt's record was deleted");
        assert_eq!(entry.attempts, 2, "the dropped reply was the takeover's");
        tokio::time::sleep(Duration::from_millis(20)).await;
        let held = call(&layer, &op, &hold, &runs, || async {}).await;
        assert_eq!(held.outcome, Outcome::Unknown, "{held:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 0, "a hold caller ran it");
        let again = call(&layer, &op, &rerun, &runs, || async {}).await;
        assert_eq!(again.outcome, Outcome::Executed, "{again:?}");
    } else {
        // The driver re-sent the takeover by itself (Redis Cluster): its caller ran it.
        assert_eq!(first.outcome, Outcome::Executed, "{first:?}");
    }
    let duplicate = call(&layer, &op, &hold, &runs, || async {}).await;
    assert_eq!(duplicate.outcome, Outcome::Replayed, "{duplicate:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the tool ran exactly once");
}

async fn redis_behind_proxy(proxy: &FaultProxy) -> Arc<dyn Store> {
    Arc::new(RedisStore::connect(&proxy.url("redis")).await.unwrap())
}

async fn cluster_behind_proxies(proxies: &[FaultProxy]) -> Arc<dyn Store> {
    let seeds: Vec<String> = proxies
        .iter()
        .map(|p| format!("127.0.0.1:{}", p.port()))
        .collect();
    let url = format!("redis+cluster://{}/", seeds.join(","));
    Arc::new(RedisStore::connect(&url).await.unwrap())
}

async fn postgres_behind_proxy() -> (Arc<dyn Store>, FaultProxy) {
    let pg = shared_postgres();
    let url = pg.create_unique_database();
    let proxy = FaultProxy::start(pg.addr());
    let url = url.replace(
        &format!("127.0.0.1:{}/", pg.port()),
        &format!("127.0.0.1:{}/", proxy.port()),
    );
    let store = PostgresStore::connect(&url).await.unwrap();
    (Arc::new(store), proxy)
}

// ---------------------------------------------------------------------------------------------
// Redis

#[tokio::test(flavor = "current_thread")]
async fn redis_a_lost_claim_reply_runs_the_tool_once_and_is_never_in_flight() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    a_lost_claim_reply(
        redis_behind_proxy(&proxy).await,
        std::slice::from_ref(&proxy),
    )
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn redis_a_lost_complete_reply_counts_as_recorded() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let store = redis_behind_proxy(&proxy).await;
    a_lost_complete_reply(store, std::slice::from_ref(&proxy)).await;
}

#[tokio::test(flavor = "current_thread")]
async fn redis_a_lost_renew_reply_keeps_the_lease() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let store = redis_behind_proxy(&proxy).await;
    a_lost_renew_reply(store, std::slice::from_ref(&proxy)).await;
}

#[tokio::test(flavor = "current_thread")]
async fn redis_a_lost_takeover_reply_keeps_the_earlier_attempt_unknown() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    // Redis 7: the native claim's reply, then the claim script's.
    let store = redis_behind_proxy(&proxy).await;
    a_lost_takeover_reply(store, std::slice::from_ref(&proxy), 2).await;
}

#[tokio::test(flavor = "current_thread")]
async fn redis_a_lost_takeover_reply_by_the_script_alone_keeps_the_earlier_attempt_unknown() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let store = RedisStore::builder(proxy.url("redis"))
        .native_claim(false)
        .connect()
        .await
        .unwrap();
    a_lost_takeover_reply(Arc::new(store), std::slice::from_ref(&proxy), 1).await;
}

#[tokio::test(flavor = "current_thread")]
async fn valkey_a_lost_takeover_reply_keeps_the_earlier_attempt_unknown() {
    let server = RedisServer::start_valkey(
        &toolonce_testsupport::installed_valkey(env!("CARGO_TARGET_TMPDIR")),
        "run scripts/install-test-deps, which installs it (scripts/install-valkey)",
    );
    let proxy = FaultProxy::start(server.addr());
    let store = redis_behind_proxy(&proxy).await;
    a_lost_takeover_reply(store, std::slice::from_ref(&proxy), 2).await;
}

// ---------------------------------------------------------------------------------------------
// Redis Cluster: redis-rs re-sends a script whose connection dropped, unseen by the layer.

#[tokio::test(flavor = "current_thread")]
async fn cluster_a_lost_claim_reply_runs_the_tool_once_and_is_never_in_flight() {
    let (_cluster, proxies) = RedisCluster::start_behind_proxies();
    a_lost_claim_reply(cluster_behind_proxies(&proxies).await, &proxies).await;
}

#[tokio::test(flavor = "current_thread")]
async fn cluster_a_lost_complete_reply_counts_as_recorded() {
    let (_cluster, proxies) = RedisCluster::start_behind_proxies();
    let store = cluster_behind_proxies(&proxies).await;
    a_lost_complete_reply(store, &proxies).await;
}

#[tokio::test(flavor = "current_thread")]
async fn cluster_a_lost_renew_reply_keeps_the_lease() {
    let (_cluster, proxies) = RedisCluster::start_behind_proxies();
    let store = cluster_behind_proxies(&proxies).await;
    a_lost_renew_reply(store, &proxies).await;
}

#[tokio::test(flavor = "current_thread")]
async fn cluster_a_lost_takeover_reply_keeps_the_earlier_attempt_unknown() {
    let (_cluster, proxies) = RedisCluster::start_behind_proxies();
    a_lost_takeover_reply(cluster_behind_proxies(&proxies).await, &proxies, 2).await;
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL

#[tokio::test(flavor = "current_thread")]
async fn postgres_a_lost_claim_reply_runs_the_tool_once_and_is_never_in_flight() {
    let (store, proxy) = postgres_behind_proxy().await;
    a_lost_claim_reply(store, std::slice::from_ref(&proxy)).await;
}

#[tokio::test(flavor = "current_thread")]
async fn postgres_a_lost_complete_reply_counts_as_recorded() {
    let (store, proxy) = postgres_behind_proxy().await;
    a_lost_complete_reply(store, std::slice::from_ref(&proxy)).await;
}

#[tokio::test(flavor = "current_thread")]
async fn postgres_a_lost_renew_reply_keeps_the_lease() {
    let (store, proxy) = postgres_behind_proxy().await;
    a_lost_renew_reply(store, std::slice::from_ref(&proxy)).await;
}

#[tokio::test(flavor = "current_thread")]
async fn postgres_a_lost_takeover_reply_keeps_the_earlier_attempt_unknown() {
    let (store, proxy) = postgres_behind_proxy().await;
    a_lost_takeover_reply(store, std::slice::from_ref(&proxy), 1).await;
}
