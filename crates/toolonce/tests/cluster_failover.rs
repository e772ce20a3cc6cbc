//! `replicas=N` on Redis Cluster, on real servers on loopback (Redis 7 and Valkey 8.1): three
//! masters with a replica each. A write waits for the replica of its key's own master (its
//! `WAIT` goes to that node, in the write's pipeline, not to every master); a claim that
//! replica lacks is not run; and across the failover of a master whose replica was stalled,
//! `replicas=1` runs every operation at most once, where without it the same failover runs
//! some twice.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use toolonce::key::{self, Derived};
use toolonce::store::redis::RedisStore;
use toolonce::{Layer, Outcome, Store, WriteAnswer, WriteOptions};
use toolonce_testsupport::RedisCluster;

/// Where `scripts/install-valkey` (run by `scripts/install-test-deps`) puts `valkey-server`.
fn valkey() -> PathBuf {
    let program = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("valkey")
        .join("valkey-server");
    assert!(
        program.exists(),
        "{} is missing: run scripts/install-test-deps, which installs it (scripts/install-valkey)",
        program.display()
    );
    program
}

fn redis_cluster() -> RedisCluster {
    RedisCluster::start_with_replicas()
}

fn valkey_cluster() -> RedisCluster {
    RedisCluster::start_program_with_replicas(&valkey())
}

/// An operation unique to the test run.
fn op(test: &str, n: usize) -> Derived {
    static RUN: AtomicU64 = AtomicU64::new(0);
    let scope = format!(
        "cluster-failover-{test}-{}-{}",
        std::process::id(),
        RUN.fetch_add(1, Ordering::Relaxed)
    );
    key::derive(&scope, "charge", &json!({"n": n}), None).unwrap()
}

/// A write tool that counts its runs.
async fn call(layer: &Layer, op: &Derived, runs: &AtomicU32) -> WriteAnswer {
    let options = WriteOptions::new().lease(Duration::from_secs(2));
    layer
        .run("charge", op, &options, |_| async move {
            let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(json!({"receipt": "r_5", "run": n}))
        })
        .await
}

async fn store(cluster: &RedisCluster, replicas: u32) -> RedisStore {
    let seeds: Vec<String> = cluster
        .ports()
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    RedisStore::builder(format!("redis+cluster://{}/", seeds.join(",")))
        .replicas(replicas)
        .replica_timeout(Duration::from_millis(200))
        .reconnect_attempts(1)
        .connect()
        .await
        .unwrap()
}

/// `replicas=1`: the call runs once, and once answered its entry is already on the replica of
/// its key's master (read there with `READONLY`, no waiting).
async fn a_write_is_on_its_masters_replica_once_answered(cluster: RedisCluster) {
    let store = store(&cluster, 1).await;
    let layer = Layer::new(Arc::new(store.clone()));
    for n in 0..6 {
        let op = op("on-replica", n);
        let runs = AtomicU32::new(0);
        let first = call(&layer, &op, &runs).await;
        assert_eq!(first.outcome, Outcome::Executed, "{first:?}");
        let key = store.redis_key(&op.key);
        let shard = cluster.shard_of(&key);
        let copy = cluster.get_on_replica(shard, &key);
        assert!(
            copy.as_deref().is_some_and(|e| e.contains("done")),
            "the replica of shard {shard} has {copy:?} for {key}"
        );
        let duplicate = call(&layer, &op, &runs).await;
        assert_eq!(duplicate.outcome, Outcome::Replayed, "{duplicate:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }
}

/// `replicas=1`, the replica of the key's master stalled: the tool is not run, the claim is
/// released and the caller hears `store_unavailable`; once the replica is back, the same call
/// runs once.
async fn a_claim_its_masters_replica_lacks_is_not_run(cluster: RedisCluster) {
    let store = store(&cluster, 1).await;
    let layer = Layer::new(Arc::new(store.clone()));
    let op = op("stalled", 0);
    let shard = cluster.shard_of(&store.redis_key(&op.key));
    let runs = AtomicU32::new(0);

    cluster.stall_replica(shard);
    let first = call(&layer, &op, &runs).await;
    assert_eq!(first.outcome, Outcome::StoreUnavailable, "{first:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the tool ran");
    let detail = format!("{:?}", first.result);
    assert!(detail.contains("replicas"), "{detail}");
    assert_eq!(store.get(&op.key).await.unwrap(), None, "the claim stayed");

    cluster.resume_replica(shard);
    let retry = call(&layer, &op, &runs).await;
    assert_eq!(retry.outcome, Outcome::Executed, "{retry:?}");
    let duplicate = call(&layer, &op, &runs).await;
    assert_eq!(duplicate.outcome, Outcome::Replayed, "{duplicate:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// Each write's `WAIT` runs on the master of the write's key, and only there: the writes of
/// calls on one shard count one `WAIT` each on its master and none on the other nodes.
async fn the_wait_goes_to_the_keys_own_node(cluster: RedisCluster) {
    let store = store(&cluster, 1).await;
    let layer = Layer::new(Arc::new(store.clone()));
    let mut ops = Vec::new();
    for n in 0.. {
        let op = op("wait-node", n);
        if cluster.shard_of(&store.redis_key(&op.key)) == 1 {
            ops.push(op);
            if ops.len() == 5 {
                break;
            }
        }
    }
    let nodes: Vec<_> = cluster.nodes().iter().chain(cluster.replicas()).collect();
    for node in &nodes {
        assert_eq!(node.command(&["CONFIG", "RESETSTAT"]), "OK");
    }
    for op in &ops {
        let runs = AtomicU32::new(0);
        assert_eq!(call(&layer, op, &runs).await.outcome, Outcome::Executed);
    }
    let waits = |node: &toolonce_testsupport::RedisServer| {
        node.commands_run()
            .iter()
            .find_map(|c| c.strip_prefix("wait=").map(|n| n.parse::<u32>().unwrap()))
            .unwrap_or(0)
    };
    let master = cluster.master(1);
    // A claim and a result each: two writes, two WAITs, per call.
    assert_eq!(waits(master), 10, "{:?}", master.commands_run());
    for node in nodes.iter().filter(|n| n.port() != master.port()) {
        assert_eq!(
            waits(node),
            0,
            "node {}: {:?}",
            node.port(),
            node.commands_run()
        );
    }
}

/// What a storm saw: the runs of each operation, and how many calls were refused.
struct Storm {
    runs: Vec<u32>,
    refused: usize,
}

/// A storm of duplicates across the failover of shard 0's master, as in `failover.rs`:
/// operations (on every shard) come in one every 4 ms and eight callers keep calling the ten
/// newest. After 300 ms shard 0's replica stalls; 300 ms later its master is SIGKILLed and the
/// replica promoted; the old master rejoins as its replica and the storm goes on for another
/// 300 ms. Then every operation is called once more, until the store answers.
async fn storm_across_a_failover(cluster: RedisCluster, replicas: u32) -> Storm {
    const OPS: usize = 240;
    let store = store(&cluster, replicas).await;
    let layer = Arc::new(Layer::new(Arc::new(store)));
    let ops: Arc<Vec<Derived>> = Arc::new((0..OPS).map(|n| op("storm", n)).collect());
    let runs: Arc<Vec<AtomicU32>> = Arc::new((0..OPS).map(|_| AtomicU32::new(0)).collect());
    let frontier = Arc::new(AtomicUsize::new(1));
    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicUsize::new(0));
    let mut callers = Vec::new();
    for caller in 0..8u64 {
        let (layer, ops, runs) = (layer.clone(), ops.clone(), runs.clone());
        let (frontier, stop, refused) = (frontier.clone(), stop.clone(), refused.clone());
        callers.push(tokio::spawn(async move {
            let mut seed = caller.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            while !stop.load(Ordering::SeqCst) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let newest = frontier.load(Ordering::SeqCst).min(OPS);
                let i = newest - 1 - (seed as usize % newest.min(10));
                let answer = call(&layer, &ops[i], &runs[i]).await;
                if answer.outcome == Outcome::StoreUnavailable {
                    refused.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }));
    }
    let advance = |ms: u64| {
        let frontier = frontier.clone();
        async move {
            let end = Instant::now() + Duration::from_millis(ms);
            while Instant::now() < end {
                tokio::time::sleep(Duration::from_millis(4)).await;
                frontier.fetch_add(1, Ordering::SeqCst);
            }
        }
    };
    advance(300).await;
    tokio::task::block_in_place(|| cluster.stall_replica(0));
    advance(300).await;
    tokio::task::block_in_place(|| {
        cluster.fail_over(0);
        cluster.rejoin(0);
    });
    advance(300).await;
    stop.store(true, Ordering::SeqCst);
    for caller in callers {
        caller.await.unwrap();
    }
    let last = frontier.load(Ordering::SeqCst).min(OPS);
    for i in 0..last {
        for _ in 0..100 {
            let answer = call(&layer, &ops[i], &runs[i]).await;
            if answer.outcome != Outcome::StoreUnavailable {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Storm {
        runs: runs[..last]
            .iter()
            .map(|r| r.load(Ordering::SeqCst))
            .collect(),
        refused: refused.load(Ordering::SeqCst),
    }
}

fn at_most_once(storm: &Storm) {
    let twice: Vec<usize> = (0..storm.runs.len())
        .filter(|&i| storm.runs[i] > 1)
        .collect();
    assert!(
        twice.is_empty(),
        "operations ran more than once across the failover with replicas=1: {twice:?}"
    );
    assert!(
        storm.refused > 0,
        "no claim was refused while the replica was stalled: the stall did not happen"
    );
    let ran = storm.runs.iter().filter(|&&r| r == 1).count();
    assert!(
        ran * 10 >= storm.runs.len() * 9,
        "only {ran} of {} operations ran at all",
        storm.runs.len()
    );
}

fn some_twice(storm: &Storm) {
    let twice = storm.runs.iter().filter(|&&r| r > 1).count();
    assert!(
        twice > 0,
        "no operation ran twice without replicas: the test does not reach the window it closes \
         ({:?})",
        storm.runs
    );
}

// ---------------------------------------------------------------------------------------------
// Redis 7

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_with_replicas_1_a_write_on_a_cluster_runs_once_and_is_on_its_masters_replica() {
    a_write_is_on_its_masters_replica_once_answered(redis_cluster()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_claim_whose_masters_replica_is_stalled_is_not_run_until_the_replica_is_back() {
    a_claim_its_masters_replica_lacks_is_not_run(redis_cluster()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_the_wait_of_a_write_goes_to_its_keys_master_and_no_other_node() {
    the_wait_goes_to_the_keys_own_node(redis_cluster()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_with_replicas_1_every_operation_runs_at_most_once_across_a_masters_failover() {
    at_most_once(&storm_across_a_failover(redis_cluster(), 1).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_without_replicas_the_same_cluster_failover_runs_operations_twice() {
    some_twice(&storm_across_a_failover(redis_cluster(), 0).await);
}

// ---------------------------------------------------------------------------------------------
// Valkey 8.1

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_with_replicas_1_a_write_on_a_cluster_runs_once_and_is_on_its_masters_replica() {
    a_write_is_on_its_masters_replica_once_answered(valkey_cluster()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_a_claim_whose_masters_replica_is_stalled_is_not_run_until_the_replica_is_back() {
    a_claim_its_masters_replica_lacks_is_not_run(valkey_cluster()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_the_wait_of_a_write_goes_to_its_keys_master_and_no_other_node() {
    the_wait_goes_to_the_keys_own_node(valkey_cluster()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_with_replicas_1_every_operation_runs_at_most_once_across_a_masters_failover() {
    at_most_once(&storm_across_a_failover(valkey_cluster(), 1).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_without_replicas_the_same_cluster_failover_runs_operations_twice() {
    some_twice(&storm_across_a_failover(valkey_cluster(), 0).await);
}
