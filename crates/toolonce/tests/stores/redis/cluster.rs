//! The conformance suite on a real three-master Redis Cluster, through a
//! `redis+cluster://` URL: every operation touches one key, so each script runs on the master
//! that owns the key's slot, and listings scan every master.

use crate::conformance;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use toolonce::store::redis::RedisStore;
use toolonce_testsupport::shared_redis_cluster;

/// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/?prefix=<unique to the test>`.
fn cluster_url() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let seeds: Vec<String> = shared_redis_cluster()
        .ports()
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    format!(
        "redis+cluster://{}/?prefix=test-{}-{}%3A",
        seeds.join(","),
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

store_conformance!(async { Arc::new(RedisStore::connect(&cluster_url()).await.unwrap()) }, census: false);

#[tokio::test]
async fn every_master_of_the_cluster_is_asked_and_the_native_claim_is_on_for_redis_7() {
    // The machine's Redis is 7: every master reports it, so claims are one native command.
    let store = RedisStore::connect(&cluster_url()).await.unwrap();
    assert!(
        format!("{store:?}").contains("native_claim: true"),
        "{store:?}"
    );
}
