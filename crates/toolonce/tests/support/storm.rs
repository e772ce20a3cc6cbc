//! The storm of duplicate calls across a failover that `failover.rs` (a primary and its
//! replica) and `cluster_failover.rs` (a cluster's master) both run, and what each asserts of
//! it: with `replicas=1` every operation runs at most once, without it some run twice. Each
//! test file brings its own store and its own way to stall a replica and fail a master over.

#![allow(dead_code)] // Each test file uses a different part.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use toolonce::key::Derived;
use toolonce::{Layer, Outcome, WriteAnswer, WriteOptions};

/// Where `scripts/install-valkey` (run by `scripts/install-test-deps`) puts `valkey-server`.
pub(crate) fn valkey() -> PathBuf {
    toolonce_testsupport::installed_valkey(env!("CARGO_TARGET_TMPDIR"))
}

/// A write tool that counts its runs, with a 2 s lease.
pub(crate) async fn call(layer: &Layer, op: &Derived, runs: &AtomicU32) -> WriteAnswer {
    let options = WriteOptions::new().lease(Duration::from_secs(2));
    layer
        .run("charge", op, &options, |_| async move {
            let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(json!({"receipt": "r_5", "run": n}))
        })
        .await
}

/// `attempt` again while the store answers `store_unavailable` (nothing ran: retrying is what
/// that answer says is safe), for at most 30 s: a replica that is slow to acknowledge on a
/// loaded machine, or was just healed, catches up. The last answer otherwise.
pub(crate) async fn until_available<F, Fut>(mut attempt: F) -> WriteAnswer
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = WriteAnswer>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = attempt().await;
        if answer.outcome != Outcome::StoreUnavailable || Instant::now() > deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What a storm saw: the runs of each operation, and how many calls were refused.
pub(crate) struct Storm {
    pub(crate) runs: Vec<u32>,
    pub(crate) refused: usize,
}

/// A storm of duplicates across a failover. Operations (`ops`, in order) come in one every
/// 4 ms; eight callers keep calling the ten newest, so each is called many times over. After
/// 300 ms `stall` stops a replica from receiving writes; 300 ms later `fail_over` kills its
/// master, promotes it and brings the old master back as its replica, and the storm goes on
/// for another 300 ms. Then every operation is called once more, until the store answers.
pub(crate) async fn across_a_failover(
    layer: Arc<Layer>,
    ops: Vec<Derived>,
    stall: impl FnOnce(),
    fail_over: impl FnOnce(),
) -> Storm {
    let count = ops.len();
    let ops = Arc::new(ops);
    let runs: Arc<Vec<AtomicU32>> = Arc::new((0..count).map(|_| AtomicU32::new(0)).collect());
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
                let newest = frontier.load(Ordering::SeqCst).min(count);
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
    tokio::task::block_in_place(stall);
    advance(300).await;
    tokio::task::block_in_place(fail_over);
    advance(300).await;
    stop.store(true, Ordering::SeqCst);
    for caller in callers {
        caller.await.unwrap();
    }
    // The sweep: every operation once more, as a caller that retries until it is answered.
    let last = frontier.load(Ordering::SeqCst).min(count);
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

/// With `replicas=1`: nothing ran twice, claims were refused while the replica was stalled
/// (so the stall happened), and nine in ten operations ran.
pub(crate) fn at_most_once(storm: &Storm) {
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

/// Without replicas: the same failover ran some operation twice (the window the option
/// closes is really reached).
pub(crate) fn some_twice(storm: &Storm) {
    let twice = storm.runs.iter().filter(|&&r| r > 1).count();
    assert!(
        twice > 0,
        "no operation ran twice without replicas: the test does not reach the window it closes \
         ({:?})",
        storm.runs
    );
}
