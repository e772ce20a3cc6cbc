//! `replicas=N` on Redis Cluster, on real servers on loopback (Redis 7 and Valkey 8.1): three
//! masters with a replica each. A write waits for the replica of its key's own master (its
//! `WAIT` goes to that node, in the write's pipeline, not to every master); a claim that
//! replica lacks is not run; and across the failover of a master whose replica was stalled,
//! `replicas=1` runs every operation at most once, where without it the same failover runs
//! some twice.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::json;
use toolonce::key::{self, Derived};
use toolonce::store::redis::RedisStore;
use toolonce::{Layer, Outcome, Store};
use toolonce_testsupport::RedisCluster;

#[path = "support/storm.rs"]
mod storm;
use storm::{Storm, at_most_once, call, some_twice, until_available, valkey};

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

/// How long a write waits for its replica where the replica is healthy: a generous bound, since
/// on a loaded two-core CI machine a healthy replica's acknowledgement has taken over 200 ms
/// (and a call answered `store_unavailable` for that is tried again, [`until_available`]).
const HEALTHY: Duration = Duration::from_secs(5);

/// How long a write waits where the test stalls the replica (and expects the wait to end
/// unanswered), kept short so the test is quick.
const STALLED: Duration = Duration::from_millis(200);

async fn store(cluster: &RedisCluster, replicas: u32, replica_timeout: Duration) -> RedisStore {
    let seeds: Vec<String> = cluster
        .ports()
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    RedisStore::builder(format!("redis+cluster://{}/", seeds.join(",")))
        .replicas(replicas)
        .replica_timeout(replica_timeout)
        .reconnect_attempts(1)
        .connect()
        .await
        .unwrap()
}

/// `replicas=1`: the call runs once, and once answered its entry is already on the replica of
/// its key's master (read there with `READONLY`, no waiting).
async fn a_write_is_on_its_masters_replica_once_answered(cluster: RedisCluster) {
    let store = store(&cluster, 1, HEALTHY).await;
    let layer = Layer::new(Arc::new(store.clone()));
    for n in 0..6 {
        let op = op("on-replica", n);
        let runs = AtomicU32::new(0);
        let first = until_available(|| call(&layer, &op, &runs)).await;
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
    let store = store(&cluster, 1, STALLED).await;
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
    // The retry may wait as long as a healthy replica needs.
    let layer = Layer::new(Arc::new(self::store(&cluster, 1, HEALTHY).await));
    let retry = until_available(|| call(&layer, &op, &runs)).await;
    assert_eq!(retry.outcome, Outcome::Executed, "{retry:?}");
    let duplicate = call(&layer, &op, &runs).await;
    assert_eq!(duplicate.outcome, Outcome::Replayed, "{duplicate:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// Each write's `WAIT` runs on the master of the write's key, and only there: the writes of
/// calls on one shard count one `WAIT` each on its master and none on the other nodes.
async fn the_wait_goes_to_the_keys_own_node(cluster: RedisCluster) {
    let store = store(&cluster, 1, HEALTHY).await;
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

/// The storm of `storm.rs` on a cluster: shard 0's replica stalls, then its master is
/// SIGKILLed, the replica promoted and the old master brought back as its replica (the
/// operations fall on every shard).
async fn storm_across_a_failover(cluster: RedisCluster, replicas: u32) -> Storm {
    // Short, as the storm stalls a replica; the verdict (at most once) holds for any timeout.
    let store = store(&cluster, replicas, STALLED).await;
    let ops = (0..240).map(|n| op("storm", n)).collect();
    storm::across_a_failover(
        Arc::new(Layer::new(Arc::new(store))),
        ops,
        || cluster.stall_replica(0),
        || {
            cluster.fail_over(0);
            cluster.rejoin(0);
        },
    )
    .await
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
