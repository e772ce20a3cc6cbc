//! The lease heartbeat shared by the calls of a layer: many calls renewed by one task, calls
//! dropped mid-run, renewals in flight when a call settles, lost leases and renewal errors.
//! Most tests run on the paused Tokio clock, which the memory store's clock follows, so
//! leases expire without waiting and nothing depends on the machine's speed.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::Notify;
use toolonce::key::{self, Derived};
use toolonce::store::memory::Clock;
use toolonce::{
    Error, Fenced, Layer, MemoryStore, OperationKey, Outcome, OwnerToken, State, Store, ToolError,
    WriteOptions,
};
use toolonce_testsupport::{Intercept, Intercepted, Logs};

/// The store's clock, following Tokio's (paused in these tests).
#[derive(Debug)]
struct TokioClock(SystemTime, tokio::time::Instant);

impl Clock for TokioClock {
    fn now(&self) -> SystemTime {
        self.0 + self.1.elapsed()
    }
}

fn memory_on_tokio_clock() -> Arc<MemoryStore> {
    Arc::new(MemoryStore::with_clock(Arc::new(TokioClock(
        SystemTime::now(),
        tokio::time::Instant::now(),
    ))))
}

fn op(scope: &str, n: u64) -> Derived {
    key::derive(scope, "charge", &json!({"n": n}), None).unwrap()
}

/// A memory store whose renewals can be held at a gate, made to fail, and counted, and which
/// records the order of renewals and settles.
type Gated = Intercepted<Gate>;

fn gated(inner: Arc<MemoryStore>) -> Gated {
    Intercepted::new(inner, Gate::default())
}

/// The interception of [`Gated`]: renewals and settles; every other call goes straight through.
#[derive(Debug, Default)]
struct Gate {
    /// While set, a renewal waits for `open` before it reaches the store.
    hold: AtomicBool,
    open: Notify,
    /// Signalled when a renewal is waiting at the gate.
    waiting: Notify,
    /// How many renewals fail (with a retryable error) before they reach the store.
    fail_renewals: AtomicU32,
    renewals: AtomicU32,
    events: Mutex<Vec<&'static str>>,
}

impl Gate {
    fn events(&self) -> Vec<&'static str> {
        self.events.lock().unwrap().clone()
    }
}

#[async_trait]
impl Intercept for Gate {
    async fn renew(
        &self,
        inner: &dyn Store,
        key: &OperationKey,
        owner: &OwnerToken,
        lease: Duration,
    ) -> toolonce::Result<bool> {
        self.renewals.fetch_add(1, Ordering::SeqCst);
        if self
            .fail_renewals
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(Error::unavailable("connection reset by peer"));
        }
        if self.hold.load(Ordering::SeqCst) {
            self.events.lock().unwrap().push("renew started");
            let opened = self.open.notified();
            self.waiting.notify_one();
            opened.await;
            let renewed = inner.renew(key, owner, lease).await;
            self.events.lock().unwrap().push("renew answered");
            return renewed;
        }
        inner.renew(key, owner, lease).await
    }
    async fn complete(
        &self,
        inner: &dyn Store,
        key: &OperationKey,
        owner: OwnerToken,
        result: &Value,
        retention: Duration,
    ) -> toolonce::Result<Fenced> {
        self.events.lock().unwrap().push("complete");
        inner.complete(key, owner, result, retention).await
    }
    async fn fail(
        &self,
        inner: &dyn Store,
        key: &OperationKey,
        owner: OwnerToken,
        error: &ToolError,
        sticky: Option<Duration>,
    ) -> toolonce::Result<Fenced> {
        self.events.lock().unwrap().push("fail");
        inner.fail(key, owner, error, sticky).await
    }
}

async fn state_of(store: &dyn Store, key: &OperationKey) -> Option<State> {
    store.get(key).await.unwrap().map(|e| e.state())
}

#[tokio::test(start_paused = true)]
async fn a_hundred_concurrent_calls_on_one_layer_all_keep_their_short_leases_for_ten_leases() {
    let store = memory_on_tokio_clock();
    let layer = Arc::new(Layer::new(store.clone()));
    let lease = Duration::from_millis(300);
    let options = WriteOptions::new().lease(lease);
    let runs = Arc::new(AtomicU32::new(0));
    let mut calls = Vec::new();
    for n in 0..100u64 {
        let (layer, options, runs) = (layer.clone(), options.clone(), runs.clone());
        calls.push(tokio::spawn(async move {
            // Staggered starts, so renewals fall due at every moment of a period.
            tokio::time::sleep(Duration::from_millis(7 * n)).await;
            let op = op("many", n);
            layer
                .run("charge", &op, &options, |_ctx| async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(lease * 10).await;
                    Ok(json!({"n": n}))
                })
                .await
        }));
    }
    // Duplicates of every call while all of them run, again and again, from another layer.
    let other = Layer::new(store.clone());
    tokio::time::sleep(Duration::from_millis(700)).await;
    for _ in 0..8 {
        for n in 0..100u64 {
            let answer = other
                .run("charge", &op("many", n), &options, |_ctx| async {
                    Ok(json!("a duplicate ran"))
                })
                .await;
            assert_eq!(answer.outcome, Outcome::InFlight, "call {n}: {answer:?}");
        }
        tokio::time::sleep(lease / 2).await;
    }
    for call in calls {
        assert_eq!(call.await.unwrap().outcome, Outcome::Executed);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 100, "each tool ran once");
    for n in 0..100u64 {
        assert_eq!(
            state_of(&*store, &op("many", n).key).await,
            Some(State::Done)
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_mid_run_is_no_longer_renewed_while_the_others_still_are() {
    let store = memory_on_tokio_clock();
    let layer = Arc::new(Layer::new(store.clone()));
    let lease = Duration::from_secs(3);
    let options = WriteOptions::new().lease(lease);
    let start = |n: u64| {
        let (layer, options) = (layer.clone(), options.clone());
        tokio::spawn(async move {
            layer
                .run("charge", &op("dropped", n), &options, |_ctx| async {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ok(json!("done"))
                })
                .await
        })
    };
    let (kept, dropped, later) = (start(0), start(1), start(2));
    tokio::time::sleep(lease * 2).await;
    for n in 0..3 {
        assert_eq!(
            state_of(&*store, &op("dropped", n).key).await,
            Some(State::Running),
            "call {n} renewed while running"
        );
    }
    dropped.abort();
    assert!(dropped.await.unwrap_err().is_cancelled());
    // Past a full lease: the dropped call's entry is unknown, the others still run.
    tokio::time::sleep(lease + Duration::from_millis(100)).await;
    assert_eq!(
        state_of(&*store, &op("dropped", 1).key).await,
        Some(State::Unknown)
    );
    for n in [0, 2] {
        assert_eq!(
            state_of(&*store, &op("dropped", n).key).await,
            Some(State::Running),
            "call {n} is still renewed after another was dropped"
        );
    }
    // Its slot is reused by a new call, which is renewed, and the dropped one stays unknown.
    let reused = start(3);
    tokio::time::sleep(lease * 3).await;
    assert_eq!(
        state_of(&*store, &op("dropped", 3).key).await,
        Some(State::Running)
    );
    assert_eq!(
        state_of(&*store, &op("dropped", 1).key).await,
        Some(State::Unknown)
    );
    for call in [kept, later, reused] {
        call.abort();
    }
}

#[tokio::test(start_paused = true)]
async fn a_renewal_in_flight_when_the_tool_returns_is_waited_out_before_the_result_is_recorded() {
    let logs = Logs::capture();
    let store = Arc::new(gated(memory_on_tokio_clock()));
    store.hold.store(true, Ordering::SeqCst);
    let layer = Arc::new(Layer::new(store.clone()));
    let options = WriteOptions::new().lease(Duration::from_secs(3));
    let op = op("inflight", 0);
    let call = tokio::spawn({
        let (layer, store, op) = (layer.clone(), store.clone(), op.clone());
        async move {
            layer
                .run("charge", &op, &options, |_ctx| async move {
                    // Returns while its first renewal is held at the gate.
                    store.waiting.notified().await;
                    Ok(json!({"receipt": 1}))
                })
                .await
        }
    });
    // Long after the tool returned, the call still waits for the renewal.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !call.is_finished(),
        "the call settled with a renewal in flight"
    );
    assert_eq!(store.events(), ["renew started"]);
    store.open.notify_one();
    let answer = call.await.unwrap();
    assert_eq!(answer.outcome, Outcome::Executed);
    assert_eq!(answer.result.unwrap(), json!({"receipt": 1}));
    assert_eq!(
        store.events(),
        ["renew started", "renew answered", "complete"]
    );
    assert_eq!(state_of(&*store, &op.key).await, Some(State::Done));
    let lines = logs.lines_about(&op.key);
    assert!(
        lines
            .iter()
            .all(|l| !l.contains("lease lost") && !l.contains("claim was lost")),
        "{lines:#?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_with_its_renewal_in_flight_frees_its_slot_once_the_renewal_returns() {
    let store = Arc::new(gated(memory_on_tokio_clock()));
    store.hold.store(true, Ordering::SeqCst);
    let layer = Arc::new(Layer::new(store.clone()));
    let options = WriteOptions::new().lease(Duration::from_secs(3));
    let call = tokio::spawn({
        let (layer, options) = (layer.clone(), options.clone());
        async move {
            layer
                .run("charge", &op("dropinflight", 0), &options, |_ctx| async {
                    std::future::pending::<()>().await;
                    Ok(json!("never"))
                })
                .await
        }
    });
    store.waiting.notified().await;
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    store.hold.store(false, Ordering::SeqCst);
    store.open.notify_one();
    let renewals = store.renewals.load(Ordering::SeqCst);
    // The dropped call is renewed no more; a new call on the layer is, and settles.
    let answer = layer
        .run("charge", &op("dropinflight", 1), &options, |_ctx| async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            Ok(json!("done"))
        })
        .await;
    assert_eq!(answer.outcome, Outcome::Executed);
    let renewed = store.renewals.load(Ordering::SeqCst) - renewals;
    assert!(
        (9..=10).contains(&renewed),
        "10 s renewed every second, the dropped call's lease not among them: {renewed}"
    );
    assert_eq!(
        state_of(&*store, &op("dropinflight", 0).key).await,
        Some(State::Unknown)
    );
}

#[tokio::test(start_paused = true)]
async fn a_renewal_error_is_retried_at_the_next_period_and_the_lease_holds() {
    let logs = Logs::capture();
    let store = Arc::new(gated(memory_on_tokio_clock()));
    // The first renewal fails: the next, a period later, still comes before the lease ends.
    store.fail_renewals.store(1, Ordering::SeqCst);
    let layer = Layer::new(store.clone());
    let other = Layer::new(store.clone());
    let options = WriteOptions::new().lease(Duration::from_secs(3));
    let op = op("errors", 0);
    let runs = AtomicU32::new(0);
    let call = layer.run("charge", &op, &options, |_ctx| async {
        runs.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(10)).await;
        Ok(json!("done"))
    });
    let duplicates = async {
        let mut seen = Vec::new();
        for _ in 0..9 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let answer = other
                .run("charge", &op, &options, |_ctx| async { Ok(json!("twice")) })
                .await;
            seen.push(answer.outcome);
        }
        seen
    };
    let (answer, seen) = tokio::join!(call, duplicates);
    assert_eq!(answer.outcome, Outcome::Executed);
    assert!(seen.iter().all(|o| *o == Outcome::InFlight), "{seen:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let lines = logs.lines_about(&op.key);
    let retried = lines
        .iter()
        .filter(|l| l.contains("could not renew the lease"))
        .count();
    assert_eq!(retried, 1, "{lines:#?}");
}

#[tokio::test(start_paused = true)]
async fn a_lost_lease_is_logged_once_and_no_longer_renewed() {
    let logs = Logs::capture();
    let store = Arc::new(gated(memory_on_tokio_clock()));
    let layer = Layer::new(store.clone());
    let options = WriteOptions::new().lease(Duration::from_secs(3));
    let op = op("lost", 0);
    let answer = layer
        .run("charge", &op, &options, |_ctx| async {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            // An operator releases the entry under the running call.
            assert!(store.delete(&op.key).await.unwrap());
            tokio::time::sleep(Duration::from_secs(10)).await;
            Ok(json!("done"))
        })
        .await;
    assert_eq!(answer.outcome, Outcome::Executed);
    // The caller hears that its outcome was not recorded, and why.
    let notice = answer.notice.unwrap_or_default();
    assert!(
        notice.contains("not recorded") && notice.contains("claim was lost"),
        "{notice:?}"
    );
    // Renewed at 1 s, refused at 2 s, and never asked again.
    assert_eq!(store.renewals.load(Ordering::SeqCst), 2);
    let lines = logs.lines_about(&op.key);
    let lost = lines.iter().filter(|l| l.contains("lease lost")).count();
    assert_eq!(lost, 1, "{lines:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_tools_blocking_their_threads_at_once_all_keep_their_leases() {
    // Three of four workers blocked for three leases each: the one heartbeat task must run on
    // the fourth, whichever worker spawned or woke it.
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let layer = Arc::new(Layer::new(store.clone()));
    let lease = Duration::from_millis(1_500);
    let options = WriteOptions::new().lease(lease);
    let runs = Arc::new(AtomicU32::new(0));
    let calls: Vec<_> = (0..3u64)
        .map(|n| {
            let (layer, options, runs) = (layer.clone(), options.clone(), runs.clone());
            tokio::spawn(async move {
                layer
                    .run("charge", &op("blocking", n), &options, |_ctx| async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(lease * 3);
                        Ok(json!({"n": n}))
                    })
                    .await
            })
        })
        .collect();
    while runs.load(Ordering::SeqCst) < 3 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Duplicates from a thread and runtime of their own until all three have answered.
    let done = Arc::new(AtomicBool::new(false));
    let duplicates = std::thread::spawn({
        let (done, store, options) = (done.clone(), store.clone(), options.clone());
        move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let other = Layer::new(store);
                let mut seen = Vec::new();
                while !done.load(Ordering::SeqCst) {
                    for n in 0..3 {
                        let answer = other
                            .run("charge", &op("blocking", n), &options, |_ctx| async {
                                Ok(json!("twice"))
                            })
                            .await;
                        seen.push(answer.outcome);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                seen
            })
        }
    });
    for call in calls {
        assert_eq!(call.await.unwrap().outcome, Outcome::Executed);
    }
    done.store(true, Ordering::SeqCst);
    let seen = duplicates.join().unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 3, "a duplicate ran: {seen:?}");
    assert!(seen.len() >= 30, "too few duplicates were tried: {seen:?}");
    assert!(
        seen.iter()
            .all(|o| matches!(o, Outcome::InFlight | Outcome::Replayed)),
        "{seen:?}"
    );
}

#[test]
fn a_layer_used_on_one_runtime_after_another_renews_on_each() {
    // The first runtime's heartbeat task is gone with it; the second needs one of its own.
    let store = memory_on_tokio_clock();
    let layer = Layer::new(store.clone());
    let options = WriteOptions::new().lease(Duration::from_millis(60));
    for round in 0..2u64 {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let (answer, duplicate) = rt.block_on(async {
            let op = op("runtimes", round);
            let call = layer.run("charge", &op, &options, |_ctx| async {
                tokio::time::sleep(Duration::from_millis(600)).await;
                Ok(json!("done"))
            });
            let duplicate = async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                layer
                    .run("charge", &op, &options, |_ctx| async { Ok(json!("twice")) })
                    .await
            };
            tokio::join!(call, duplicate)
        });
        assert_eq!(answer.outcome, Outcome::Executed, "round {round}");
        assert_eq!(duplicate.outcome, Outcome::InFlight, "round {round}");
    }
}

#[tokio::test(start_paused = true)]
async fn dropping_the_last_clone_of_a_layer_ends_its_heartbeat_task_and_releases_the_store() {
    let store = memory_on_tokio_clock();
    let layer = Layer::new(store.clone());
    let clone = layer.clone();
    let options = WriteOptions::new().lease(Duration::from_secs(3));
    let answer = layer
        .run("charge", &op("dropped-layer", 0), &options, |_ctx| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(json!("done"))
        })
        .await;
    assert_eq!(answer.outcome, Outcome::Executed);
    drop(layer);
    tokio::task::yield_now().await;
    assert!(
        Arc::strong_count(&store) > 1,
        "a clone still holds the layer's store"
    );
    drop(clone);
    // The task ends at its next poll, and drops its handle on the store with it.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(Arc::strong_count(&store), 1);
}
