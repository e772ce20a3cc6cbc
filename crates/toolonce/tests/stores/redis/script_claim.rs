//! The conformance suite on the claim script alone: what servers older than Redis 7 (no
//! `SET … NX GET`) run for every claim, forced here on the machine's Redis with
//! `RedisStoreBuilder::native_claim(false)`.

use crate::conformance;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use toolonce::store::redis::RedisStore;
use toolonce_testsupport::shared_redis;

async fn script_store() -> RedisStore {
    static N: AtomicU64 = AtomicU64::new(0);
    RedisStore::builder(shared_redis().url())
        .prefix(format!(
            "test-script-{}-{}:",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ))
        .native_claim(false)
        .connect()
        .await
        .unwrap()
}

store_conformance!(async { Arc::new(script_store().await) }, census: false);
