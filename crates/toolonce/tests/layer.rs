//! The layer's behaviour (`docs/contract.md`, "The layer"), on `MemoryStore` and a store that fails on demand.

mod blocking;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde_json::{Value, json};
use toolonce::{
    Claim, ClaimRequest, Entry, Error, Fenced, InFlight, Layer, ListQuery, ManualClock,
    MemoryStore, OnExpired, OperationKey, Outcome, OwnerToken, Page, ReadTool, Resolution,
    Resolved, State, Store, ToolError, Toolbox, WriteContext, WriteOptions, WriteTool, key,
};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct ChargeArgs {
    payment: Payment,
    #[serde(default)]
    note: Option<String>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Payment {
    card: String,
    cents: u64,
}

/// A payment tool that counts its charges and can be told to stall, fail or panic.
#[derive(Clone, Default)]
struct Charge {
    charges: Arc<AtomicU32>,
    delay: Option<Duration>,
    fail_with: Option<ToolError>,
    panic: bool,
    keys_seen: Arc<std::sync::Mutex<Vec<String>>>,
    key_fields: Vec<String>,
}

impl WriteTool for Charge {
    type Args = ChargeArgs;
    type Output = Value;
    fn name(&self) -> &str {
        "charge_card"
    }
    fn description(&self) -> &str {
        "Charge a card."
    }
    fn key_fields(&self) -> Vec<String> {
        self.key_fields.clone()
    }
    async fn call(&self, ctx: WriteContext, args: ChargeArgs) -> Result<Value, ToolError> {
        let n = self.charges.fetch_add(1, Ordering::SeqCst) + 1;
        self.keys_seen
            .lock()
            .unwrap()
            .push(ctx.idempotency_header().1.to_owned());
        if let Some(d) = self.delay {
            tokio::time::sleep(d).await;
        }
        if self.panic {
            panic!("the payment client crashed");
        }
        if let Some(e) = &self.fail_with {
            return Err(e.clone());
        }
        Ok(json!({
            "receipt": format!("rcpt_{n}"),
            "card": args.payment.card,
            "cents": args.payment.cents,
            "note": args.note,
        }))
    }
}

struct Balance;

impl ReadTool for Balance {
    type Args = Value;
    type Output = u64;
    fn name(&self) -> &str {
        "balance"
    }
    fn description(&self) -> &str {
        "Read a balance."
    }
    async fn call(&self, _args: Value) -> Result<u64, ToolError> {
        Ok(42)
    }
}

fn toolbox(store: Arc<dyn Store>, tool: Charge, options: WriteOptions) -> Toolbox {
    Toolbox::builder(store)
        .scope("run-1")
        .read(Balance)
        .write_with(tool, options)
        .build()
        .unwrap()
}

fn args(card: &str) -> Value {
    json!({"payment": {"card": card, "cents": 500}})
}

#[tokio::test]
async fn the_same_call_twice_executes_once_and_both_get_the_same_result() {
    let tool = Charge::default();
    let tb = toolbox(
        Arc::new(MemoryStore::new()),
        tool.clone(),
        WriteOptions::new(),
    );
    let first = tb.call("charge_card", args("A")).await;
    let second = tb.call("charge_card", args("A")).await;
    assert_eq!(first.outcome, Outcome::Executed);
    assert_eq!(second.outcome, Outcome::Replayed);
    assert!(!first.is_error && !second.is_error);
    assert_eq!(first.content, second.content);
    assert_eq!(first.key, second.key);
    assert_eq!(tool.charges.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_tool_sees_the_operation_key_as_its_idempotency_key() {
    let tool = Charge::default();
    let tb = toolbox(
        Arc::new(MemoryStore::new()),
        tool.clone(),
        WriteOptions::new(),
    );
    let answer = tb.call("charge_card", args("A")).await;
    let expected = key::derive("run-1", "charge_card", &args("A"), None)
        .unwrap()
        .key;
    assert_eq!(answer.key.as_ref(), Some(&expected));
    assert_eq!(
        *tool.keys_seen.lock().unwrap(),
        vec![expected.as_str().to_owned()]
    );
}

#[tokio::test]
async fn a_different_scope_is_a_different_operation() {
    let tool = Charge::default();
    let tb = toolbox(
        Arc::new(MemoryStore::new()),
        tool.clone(),
        WriteOptions::new(),
    );
    tb.call("charge_card", args("A")).await;
    let other = tb.call_in("run-2", "charge_card", args("A")).await;
    assert_eq!(other.outcome, Outcome::Executed);
    assert_eq!(tool.charges.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn nested_arguments_that_differ_never_share_a_key() {
    let tool = Charge::default();
    let tb = toolbox(
        Arc::new(MemoryStore::new()),
        tool.clone(),
        WriteOptions::new(),
    );
    let a = tb.call("charge_card", args("A")).await;
    let b = tb.call("charge_card", args("B")).await;
    assert_eq!(a.outcome, Outcome::Executed);
    assert_eq!(b.outcome, Outcome::Executed);
    assert_ne!(a.key, b.key);
    assert!(b.content.contains("\"card\":\"B\""), "{}", b.content);
    assert_eq!(tool.charges.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_duplicates_execute_once_and_the_other_is_told_it_is_in_flight() {
    let tool = Charge {
        delay: Some(Duration::from_millis(200)),
        ..Charge::default()
    };
    let tb = Arc::new(toolbox(
        Arc::new(MemoryStore::new()),
        tool.clone(),
        WriteOptions::new(),
    ));
    let (a, b) = tokio::join!(
        tb.call("charge_card", args("A")),
        tb.call("charge_card", args("A"))
    );
    let mut outcomes = [a.outcome, b.outcome];
    outcomes.sort_by_key(|o| o.as_str());
    assert_eq!(outcomes, [Outcome::Executed, Outcome::InFlight]);
    let rejected = if a.outcome == Outcome::InFlight {
        &a
    } else {
        &b
    };
    assert!(rejected.is_error);
    assert!(
        rejected.content.contains("must not retry"),
        "{}",
        rejected.content
    );
    assert_eq!(tool.charges.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_a_concurrent_duplicate_gets_the_same_result() {
    let tool = Charge {
        delay: Some(Duration::from_millis(200)),
        ..Charge::default()
    };
    let options = WriteOptions::new().in_flight(InFlight::Wait(Duration::from_secs(5)));
    let tb = Arc::new(toolbox(Arc::new(MemoryStore::new()), tool.clone(), options));
    let (a, b) = tokio::join!(
        tb.call("charge_card", args("A")),
        tb.call("charge_card", args("A"))
    );
    let mut outcomes = [a.outcome, b.outcome];
    outcomes.sort_by_key(|o| o.as_str());
    assert_eq!(outcomes, [Outcome::Executed, Outcome::Replayed]);
    assert_eq!(a.content, b.content);
    assert_eq!(tool.charges.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_takes_over_when_the_owner_fails_transiently() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let failing = Charge {
        delay: Some(Duration::from_millis(150)),
        fail_with: Some(ToolError::transient("provider timed out")),
        ..Charge::default()
    };
    let healthy = Charge::default();
    let options = WriteOptions::new().in_flight(InFlight::Wait(Duration::from_secs(5)));
    let owner_box = toolbox(store.clone(), failing.clone(), options.clone());
    let waiter_box = toolbox(store, healthy.clone(), options);
    let owner = owner_box.call("charge_card", args("A"));
    let waiter = async {
        tokio::time::sleep(Duration::from_millis(30)).await;
        waiter_box.call("charge_card", args("A")).await
    };
    let (owner, waiter) = tokio::join!(owner, waiter);
    assert_eq!(owner.outcome, Outcome::Executed);
    assert!(owner.is_error);
    assert_eq!(waiter.outcome, Outcome::Executed, "{}", waiter.content);
    assert!(!waiter.is_error);
    assert_eq!(healthy.charges.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gives_up_with_in_flight_after_its_timeout() {
    let tool = Charge {
        delay: Some(Duration::from_millis(500)),
        ..Charge::default()
    };
    let options = WriteOptions::new().in_flight(InFlight::Wait(Duration::from_millis(100)));
    let tb = Arc::new(toolbox(Arc::new(MemoryStore::new()), tool.clone(), options));
    let (a, b) = tokio::join!(tb.call("charge_card", args("A")), async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        tb.call("charge_card", args("A")).await
    });
    assert_eq!(a.outcome, Outcome::Executed);
    assert_eq!(b.outcome, Outcome::InFlight);
    assert_eq!(tool.charges.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn same_key_fields_with_a_different_fingerprint_is_a_conflict_and_not_executed() {
    let tool = Charge {
        key_fields: vec!["/payment/card".into(), "/payment/cents".into()],
        ..Charge::default()
    };
    let tb = toolbox(
        Arc::new(MemoryStore::new()),
        tool.clone(),
        WriteOptions::new(),
    );
    let mut with_note = args("A");
    with_note["note"] = json!("for the October invoice");
    let first = tb.call("charge_card", with_note.clone()).await;
    let same = tb.call("charge_card", with_note).await;
    let mut reworded = args("A");
    reworded["note"] = json!("October invoice");
    let conflict = tb.call("charge_card", reworded).await;
    assert_eq!(first.outcome, Outcome::Executed);
    assert_eq!(same.outcome, Outcome::Replayed);
    assert_eq!(conflict.outcome, Outcome::Conflict);
    assert!(conflict.is_error);
    assert!(
        conflict.content.contains("not executed"),
        "{}",
        conflict.content
    );
    assert_eq!(first.key, conflict.key);
    assert_eq!(tool.charges.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn invalid_arguments_name_the_field_and_never_claim() {
    let store = Arc::new(MemoryStore::new());
    let tool = Charge::default();
    let tb = toolbox(store.clone(), tool.clone(), WriteOptions::new());
    let answer = tb
        .call(
            "charge_card",
            json!({"payment": {"card": "A", "cents": "five"}}),
        )
        .await;
    assert_eq!(answer.outcome, Outcome::InvalidArguments);
    assert!(answer.is_error);
    assert!(
        answer.content.contains("payment.cents"),
        "{}",
        answer.content
    );
    assert!(answer.content.contains("Nothing was executed"));
    let missing = tb
        .call("charge_card", json!({"payment": {"card": "A"}}))
        .await;
    assert!(missing.content.contains("cents"), "{}", missing.content);
    let text = tb.call_json("charge_card", "{\"payment\": ").await;
    assert_eq!(text.outcome, Outcome::InvalidArguments);
    assert!(text.content.contains("line 1"), "{}", text.content);
    assert_eq!(tool.charges.load(Ordering::SeqCst), 0);
    assert!(
        store
            .list(&ListQuery::new())
            .await
            .unwrap()
            .entries
            .is_empty()
    );
}

#[tokio::test]
async fn an_unknown_tool_is_a_tool_result_naming_the_available_ones() {
    let tb = toolbox(
        Arc::new(MemoryStore::new()),
        Charge::default(),
        WriteOptions::new(),
    );
    let answer = tb.call("refund", json!({})).await;
    assert_eq!(answer.outcome, Outcome::UnknownTool);
    assert!(answer.is_error);
    assert!(
        answer.content.contains("balance, charge_card"),
        "{}",
        answer.content
    );
}

#[tokio::test]
async fn a_permanent_failure_is_stored_and_replayed_without_running_again() {
    let tool = Charge {
        fail_with: Some(ToolError::permanent("card declined")),
        ..Charge::default()
    };
    let tb = toolbox(
        Arc::new(MemoryStore::new()),
        tool.clone(),
        WriteOptions::new(),
    );
    let first = tb.call("charge_card", args("A")).await;
    let again = tb.call("charge_card", args("A")).await;
    assert_eq!(first.outcome, Outcome::Executed);
    assert_eq!(again.outcome, Outcome::ReplayedFailure);
    assert!(first.is_error && again.is_error);
    assert_eq!(first.content, "card declined");
    assert_eq!(first.content, again.content);
    assert_eq!(tool.charges.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_transient_failure_is_released_so_a_duplicate_runs_again() {
    let tool = Charge {
        fail_with: Some(ToolError::transient("provider timed out")),
        ..Charge::default()
    };
    let tb = toolbox(
        Arc::new(MemoryStore::new()),
        tool.clone(),
        WriteOptions::new(),
    );
    let first = tb.call("charge_card", args("A")).await;
    let again = tb.call("charge_card", args("A")).await;
    assert_eq!(first.outcome, Outcome::Executed);
    assert_eq!(again.outcome, Outcome::Executed);
    assert_eq!(tool.charges.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn read_tools_run_every_time_and_never_touch_the_store() {
    let store = Arc::new(MemoryStore::new());
    let tb = toolbox(store.clone(), Charge::default(), WriteOptions::new());
    for _ in 0..2 {
        let answer = tb.call("balance", json!({})).await;
        assert_eq!(answer.outcome, Outcome::Executed);
        assert_eq!(answer.content, "42");
    }
    assert!(
        store
            .list(&ListQuery::new())
            .await
            .unwrap()
            .entries
            .is_empty()
    );
}

/// A store that can be switched off, as if its server went away.
#[derive(Debug)]
struct Flaky {
    inner: MemoryStore,
    down: AtomicBool,
}

impl Flaky {
    fn check(&self) -> toolonce::Result<()> {
        if self.down.load(Ordering::SeqCst) {
            Err(Error::unavailable("connection refused"))
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl Store for Flaky {
    async fn claim(&self, req: &ClaimRequest<'_>) -> toolonce::Result<Claim> {
        self.check()?;
        self.inner.claim(req).await
    }
    async fn renew(
        &self,
        key: &OperationKey,
        owner: &OwnerToken,
        lease: Duration,
    ) -> toolonce::Result<bool> {
        self.check()?;
        self.inner.renew(key, owner, lease).await
    }
    async fn complete(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        result: &Value,
        retention: Duration,
    ) -> toolonce::Result<Fenced> {
        self.check()?;
        self.inner.complete(key, owner, result, retention).await
    }
    async fn fail(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        error: &ToolError,
        sticky: Option<Duration>,
    ) -> toolonce::Result<Fenced> {
        self.check()?;
        self.inner.fail(key, owner, error, sticky).await
    }
    async fn get(&self, key: &OperationKey) -> toolonce::Result<Option<Entry>> {
        self.check()?;
        self.inner.get(key).await
    }
    async fn list(&self, q: &ListQuery) -> toolonce::Result<Page> {
        self.check()?;
        self.inner.list(q).await
    }
    async fn resolve(
        &self,
        key: &OperationKey,
        resolution: &Resolution,
        retention: Duration,
    ) -> toolonce::Result<Resolved> {
        self.check()?;
        self.inner.resolve(key, resolution, retention).await
    }
    async fn delete(&self, key: &OperationKey) -> toolonce::Result<bool> {
        self.check()?;
        self.inner.delete(key).await
    }
    async fn purge_expired(&self) -> toolonce::Result<u64> {
        self.check()?;
        self.inner.purge_expired().await
    }
}

#[tokio::test]
async fn a_store_that_errors_means_the_write_tool_is_not_executed() {
    let store = Arc::new(Flaky {
        inner: MemoryStore::new(),
        down: AtomicBool::new(true),
    });
    let tool = Charge::default();
    let tb = toolbox(store.clone(), tool.clone(), WriteOptions::new());
    let answer = tb.call("charge_card", args("A")).await;
    assert_eq!(answer.outcome, Outcome::StoreUnavailable);
    assert!(answer.is_error);
    assert!(
        answer.content.contains("Not executed"),
        "{}",
        answer.content
    );
    assert!(
        answer.content.contains("connection refused"),
        "{}",
        answer.content
    );
    assert_eq!(tool.charges.load(Ordering::SeqCst), 0);
    // Reads do not need the store.
    assert_eq!(
        tb.call("balance", json!({})).await.outcome,
        Outcome::Executed
    );
    // Once the store is back, the same call runs.
    store.down.store(false, Ordering::SeqCst);
    assert_eq!(
        tb.call("charge_card", args("A")).await.outcome,
        Outcome::Executed
    );
    assert_eq!(tool.charges.load(Ordering::SeqCst), 1);
}

/// A store whose replies get lost: the write is applied, then the caller gets an
/// `Unavailable` error, as when the connection drops after the server acted.
#[derive(Debug, Default)]
struct LosesReplies {
    inner: MemoryStore,
    /// How many of the next claims lose their reply.
    claims: AtomicU32,
    /// How many of the next completes lose their reply.
    completes: AtomicU32,
    /// How many of the next fails are refused before reaching the store (still down).
    fails_refused: AtomicU32,
}

fn take_one(n: &AtomicU32) -> bool {
    n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1))
        .is_ok()
}

fn reset() -> Error {
    Error::unavailable("connection reset by peer")
}

#[async_trait]
impl Store for LosesReplies {
    async fn claim(&self, req: &ClaimRequest<'_>) -> toolonce::Result<Claim> {
        let claim = self.inner.claim(req).await?;
        if take_one(&self.claims) {
            return Err(reset());
        }
        Ok(claim)
    }
    async fn renew(
        &self,
        key: &OperationKey,
        owner: &OwnerToken,
        lease: Duration,
    ) -> toolonce::Result<bool> {
        self.inner.renew(key, owner, lease).await
    }
    async fn complete(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        result: &Value,
        retention: Duration,
    ) -> toolonce::Result<Fenced> {
        let fenced = self.inner.complete(key, owner, result, retention).await?;
        if take_one(&self.completes) {
            return Err(reset());
        }
        Ok(fenced)
    }
    async fn fail(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        error: &ToolError,
        sticky: Option<Duration>,
    ) -> toolonce::Result<Fenced> {
        if take_one(&self.fails_refused) {
            return Err(Error::unavailable("connection refused"));
        }
        self.inner.fail(key, owner, error, sticky).await
    }
    async fn get(&self, key: &OperationKey) -> toolonce::Result<Option<Entry>> {
        self.inner.get(key).await
    }
    async fn list(&self, q: &ListQuery) -> toolonce::Result<Page> {
        self.inner.list(q).await
    }
    async fn resolve(
        &self,
        key: &OperationKey,
        resolution: &Resolution,
        retention: Duration,
    ) -> toolonce::Result<Resolved> {
        self.inner.resolve(key, resolution, retention).await
    }
    async fn delete(&self, key: &OperationKey) -> toolonce::Result<bool> {
        self.inner.delete(key).await
    }
    async fn purge_expired(&self) -> toolonce::Result<u64> {
        self.inner.purge_expired().await
    }
}

#[tokio::test]
async fn a_claim_whose_reply_is_lost_is_released_so_a_retry_runs_the_tool_once() {
    let store = Arc::new(LosesReplies::default());
    store.claims.store(1, Ordering::SeqCst);
    // The store is still unreachable for the first two releases: the layer keeps trying.
    store.fails_refused.store(2, Ordering::SeqCst);
    let tool = Charge::default();
    let tb = toolbox(store.clone(), tool.clone(), WriteOptions::new());

    let first = tb.call("charge_card", args("A")).await;
    assert_eq!(
        first.outcome,
        Outcome::StoreUnavailable,
        "{}",
        first.content
    );
    assert!(
        first.content.contains("safe to try again"),
        "{}",
        first.content
    );
    assert_eq!(store.fails_refused.load(Ordering::SeqCst), 0);
    // Nothing is left behind for a one-shot caller that stops here.
    assert!(
        store
            .inner
            .list(&ListQuery::new())
            .await
            .unwrap()
            .entries
            .is_empty(),
        "the claim whose reply was lost is left running"
    );
    let retry = tb.call("charge_card", args("A")).await;
    assert_eq!(retry.outcome, Outcome::Executed, "{}", retry.content);
    let duplicate = tb.call("charge_card", args("A")).await;
    assert_eq!(
        duplicate.outcome,
        Outcome::Replayed,
        "{}",
        duplicate.content
    );
    assert_eq!(tool.charges.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_claim_retried_by_the_driver_with_the_same_token_runs_the_tool() {
    // What redis-rs does on a cluster: the claim is applied, the reply lost, and the same
    // request is sent again, which must find the caller's own entry and win.
    #[derive(Debug, Default)]
    struct Resends(MemoryStore);
    #[async_trait]
    impl Store for Resends {
        async fn claim(&self, req: &ClaimRequest<'_>) -> toolonce::Result<Claim> {
            let _lost = self.0.claim(req).await?;
            self.0.claim(req).await
        }
        async fn renew(
            &self,
            key: &OperationKey,
            owner: &OwnerToken,
            lease: Duration,
        ) -> toolonce::Result<bool> {
            self.0.renew(key, owner, lease).await
        }
        async fn complete(
            &self,
            key: &OperationKey,
            owner: OwnerToken,
            result: &Value,
            retention: Duration,
        ) -> toolonce::Result<Fenced> {
            self.0.complete(key, owner, result, retention).await
        }
        async fn fail(
            &self,
            key: &OperationKey,
            owner: OwnerToken,
            error: &ToolError,
            sticky: Option<Duration>,
        ) -> toolonce::Result<Fenced> {
            self.0.fail(key, owner, error, sticky).await
        }
        async fn get(&self, key: &OperationKey) -> toolonce::Result<Option<Entry>> {
            self.0.get(key).await
        }
        async fn list(&self, q: &ListQuery) -> toolonce::Result<Page> {
            self.0.list(q).await
        }
        async fn resolve(
            &self,
            key: &OperationKey,
            resolution: &Resolution,
            retention: Duration,
        ) -> toolonce::Result<Resolved> {
            self.0.resolve(key, resolution, retention).await
        }
        async fn delete(&self, key: &OperationKey) -> toolonce::Result<bool> {
            self.0.delete(key).await
        }
        async fn purge_expired(&self) -> toolonce::Result<u64> {
            self.0.purge_expired().await
        }
    }
    let tool = Charge::default();
    let tb = toolbox(
        Arc::new(Resends::default()),
        tool.clone(),
        WriteOptions::new(),
    );
    let first = tb.call("charge_card", args("A")).await;
    assert_eq!(first.outcome, Outcome::Executed, "{}", first.content);
    let duplicate = tb.call("charge_card", args("A")).await;
    assert_eq!(
        duplicate.outcome,
        Outcome::Replayed,
        "{}",
        duplicate.content
    );
    assert_eq!(tool.charges.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_complete_whose_reply_is_lost_is_recorded_and_replayed() {
    log_buffer();
    let store = Arc::new(LosesReplies::default());
    store.completes.store(1, Ordering::SeqCst);
    let layer = Layer::new(store.clone());
    // A scope of its own, so the log lines of this test's key are only this test's.
    let op = key::derive("lost-complete", "charge", &json!({"n": 1}), None).unwrap();
    let runs = AtomicU32::new(0);
    let options = WriteOptions::new();
    let charge = || {
        layer.run("charge", &op, &options, |_| async {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok(json!({"receipt": "r_1"}))
        })
    };
    let first = charge().await;
    assert_eq!(first.outcome, Outcome::Executed, "{first:?}");
    assert_eq!(
        store.completes.load(Ordering::SeqCst),
        0,
        "the reply was lost"
    );
    let duplicate = charge().await;
    assert_eq!(duplicate.outcome, Outcome::Replayed, "{duplicate:?}");
    assert_eq!(duplicate.result, first.result);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // The operator's log must not say the result was lost when it was recorded.
    let logs = logged_about(&op.key);
    assert!(logs.contains("write call"), "the log was captured: {logs}");
    assert!(!logs.contains("claim was lost"), "{logs}");
}

/// The log lines of this test binary that name `key`. A global subscriber (installed on first
/// use) sees every thread's events, which a thread-local one set by one test would not always
/// do, since tracing caches per call site whether anybody listens.
fn logged_about(key: &OperationKey) -> String {
    logs_text()
        .lines()
        .filter(|line| line.contains(key.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn logs_text() -> String {
    String::from_utf8_lossy(&log_buffer().lock().unwrap()).into_owned()
}

fn log_buffer() -> &'static Arc<std::sync::Mutex<Vec<u8>>> {
    static LOGS: std::sync::OnceLock<Arc<std::sync::Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = logs.clone();
        tracing_subscriber::fmt()
            .with_writer(move || LogSink(sink.clone()))
            .with_ansi(false)
            .init();
        logs
    })
}

/// Collects log output for the tests.
struct LogSink(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_owner_token_never_reaches_a_duplicate_or_the_model() {
    let store = Arc::new(MemoryStore::new());
    let layer = Layer::new(store.clone());
    let op = key::derive("token", "charge", &json!({"n": 1}), None).unwrap();
    let release = Arc::new(tokio::sync::Notify::new());
    let (held, go) = (release.clone(), op.clone());
    let owner_call = {
        let layer = layer.clone();
        tokio::spawn(async move {
            layer
                .run("charge", &go, &WriteOptions::new(), |_| async move {
                    held.notified().await;
                    Ok(json!({"ok": true}))
                })
                .await
        })
    };
    let token = loop {
        if let Some(entry) = store.get(&op.key).await.unwrap()
            && let toolonce::EntryState::Running { owner: Some(t) } = entry.state
        {
            break t;
        }
        tokio::task::yield_now().await;
    };
    let duplicate = layer
        .run("charge", &op, &WriteOptions::new(), |_| async {
            Ok(json!({"ran": "twice"}))
        })
        .await;
    assert_eq!(duplicate.outcome, Outcome::InFlight);
    let shown = format!(
        "{duplicate:?} {}",
        serde_json::to_string(&duplicate.result).unwrap()
    );
    assert!(!shown.contains(&token), "{shown}");
    release.notify_one();
    let executed = owner_call.await.unwrap();
    assert_eq!(executed.outcome, Outcome::Executed);
    assert!(!format!("{executed:?}").contains(&token));
}

#[tokio::test]
async fn a_panicking_tool_leaves_a_running_entry_that_expires_and_is_then_reclaimed() {
    let clock = ManualClock::new(SystemTime::now());
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(clock.clone()));
    let crashing = Charge {
        panic: true,
        ..Charge::default()
    };
    let healthy = Charge::default();
    let lease = Duration::from_secs(60);
    let tb = toolbox(
        store.clone(),
        crashing.clone(),
        WriteOptions::new().lease(lease),
    );
    let answer = tb.call("charge_card", args("A")).await;
    assert!(answer.is_error);
    assert!(answer.content.contains("panicked"), "{}", answer.content);
    let key = answer.key.clone().unwrap();
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().state(),
        State::Running
    );

    // Under `rerun` (the tool's downstream honours the key); `hold` refuses to run it again.
    let tb2 = toolbox(
        store.clone(),
        healthy.clone(),
        WriteOptions::new()
            .lease(lease)
            .on_expired(OnExpired::Rerun),
    );
    assert_eq!(
        tb2.call("charge_card", args("A")).await.outcome,
        Outcome::InFlight
    );
    clock.advance(lease + Duration::from_secs(1));
    let holding = toolbox(
        store.clone(),
        healthy.clone(),
        WriteOptions::new().lease(lease),
    );
    assert_eq!(
        holding.call("charge_card", args("A")).await.outcome,
        Outcome::Unknown
    );
    assert_eq!(healthy.charges.load(Ordering::SeqCst), 0);
    let resumed = tb2.call("charge_card", args("A")).await;
    assert_eq!(resumed.outcome, Outcome::Executed);
    assert_eq!(
        resumed.key.as_ref(),
        Some(&key),
        "the same key goes downstream again"
    );
    assert_eq!(healthy.charges.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_cancelled_call_leaves_a_running_entry_that_expires_and_is_then_reclaimed() {
    let clock = ManualClock::new(SystemTime::now());
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(clock.clone()));
    let slow = Charge {
        delay: Some(Duration::from_secs(3600)),
        ..Charge::default()
    };
    let lease = Duration::from_secs(60);
    let tb = toolbox(
        store.clone(),
        slow.clone(),
        WriteOptions::new().lease(lease),
    );
    let cancelled =
        tokio::time::timeout(Duration::from_millis(50), tb.call("charge_card", args("A"))).await;
    assert!(cancelled.is_err(), "the call was cancelled by the timeout");
    let key = key::derive("run-1", "charge_card", &args("A"), None)
        .unwrap()
        .key;
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().state(),
        State::Running
    );

    let healthy = Charge::default();
    let tb2 = toolbox(
        store.clone(),
        healthy.clone(),
        WriteOptions::new()
            .lease(lease)
            .on_expired(OnExpired::Rerun),
    );
    assert_eq!(
        tb2.call("charge_card", args("A")).await.outcome,
        Outcome::InFlight
    );
    clock.advance(lease + Duration::from_secs(1));
    let holding = toolbox(
        store.clone(),
        healthy.clone(),
        WriteOptions::new().lease(lease),
    );
    assert_eq!(
        holding.call("charge_card", args("A")).await.outcome,
        Outcome::Unknown
    );
    assert_eq!(healthy.charges.load(Ordering::SeqCst), 0);
    assert_eq!(
        tb2.call("charge_card", args("A")).await.outcome,
        Outcome::Executed
    );
    assert_eq!(healthy.charges.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn the_heartbeat_keeps_a_long_running_tool_claimed_past_its_lease() {
    // The paused tokio clock drives the heartbeat; the store's clock follows it.
    #[derive(Debug)]
    struct TokioClock(SystemTime, tokio::time::Instant);
    impl toolonce::store::memory::Clock for TokioClock {
        fn now(&self) -> SystemTime {
            self.0 + self.1.elapsed()
        }
    }
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(Arc::new(TokioClock(
        SystemTime::now(),
        tokio::time::Instant::now(),
    ))));
    let slow = Charge {
        delay: Some(Duration::from_secs(10)),
        ..Charge::default()
    };
    let options = WriteOptions::new().lease(Duration::from_secs(3));
    let tb = Arc::new(toolbox(store.clone(), slow.clone(), options));
    let running = tokio::spawn({
        let tb = tb.clone();
        async move { tb.call("charge_card", args("A")).await }
    });
    tokio::time::sleep(Duration::from_secs(7)).await;
    let dup = tb.call("charge_card", args("A")).await;
    assert_eq!(
        dup.outcome,
        Outcome::InFlight,
        "lease was renewed, not expired"
    );
    let first = running.await.unwrap();
    assert_eq!(first.outcome, Outcome::Executed);
    assert_eq!(
        tb.call("charge_card", args("A")).await.outcome,
        Outcome::Replayed
    );
    assert_eq!(slow.charges.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn tool_definitions_come_in_the_anthropic_and_openai_formats() {
    let tb = toolbox(
        Arc::new(MemoryStore::new()),
        Charge::default(),
        WriteOptions::new(),
    );
    let anthropic = tb.anthropic_tools();
    let charge = &anthropic[1];
    assert_eq!(charge["name"], "charge_card");
    assert_eq!(charge["input_schema"]["type"], "object");
    assert!(charge["input_schema"]["properties"]["payment"].is_object());
    assert!(charge["input_schema"].get("$schema").is_none());
    let openai = tb.openai_tools();
    assert_eq!(openai[1]["type"], "function");
    assert_eq!(openai[1]["function"]["name"], "charge_card");
    assert_eq!(openai[1]["function"]["parameters"], charge["input_schema"]);
}

#[tokio::test]
async fn anthropic_and_openai_tool_calls_are_answered_in_their_own_format() {
    let tool = Charge::default();
    let tb = toolbox(
        Arc::new(MemoryStore::new()),
        tool.clone(),
        WriteOptions::new(),
    );
    let first = tb
        .call_anthropic(&json!({
            "type": "tool_use", "id": "toolu_1", "name": "charge_card", "input": args("A")
        }))
        .await;
    assert_eq!(first["type"], "tool_result");
    assert_eq!(first["tool_use_id"], "toolu_1");
    assert!(first.get("is_error").is_none());
    // The model calls again with a new id, and OpenAI-style with the arguments as text.
    let again = tb
        .call_openai(&json!({
            "id": "call_9", "type": "function",
            "function": {"name": "charge_card", "arguments": args("A").to_string()}
        }))
        .await;
    assert_eq!(again["role"], "tool");
    assert_eq!(again["tool_call_id"], "call_9");
    assert_eq!(again["content"], first["content"]);
    assert_eq!(tool.charges.load(Ordering::SeqCst), 1);
    let bad = tb
        .call_anthropic(&json!({"type": "tool_use", "id": "toolu_2", "name": "nope", "input": {}}))
        .await;
    assert_eq!(bad["is_error"], true);
}

#[test]
fn a_toolbox_without_a_scope_or_with_a_nul_in_a_name_is_refused() {
    let err = Toolbox::builder(Arc::new(MemoryStore::new()))
        .write(Charge::default())
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("scope"), "{err}");
    let err = Toolbox::builder(Arc::new(MemoryStore::new()))
        .scope("a\0b")
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("NUL"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_blocking_its_thread_keeps_its_lease_on_the_memory_store() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    blocking::a_tool_blocking_its_thread_for_three_leases_runs_once(store.clone(), store).await;
}

#[tokio::test(start_paused = true)]
async fn dropping_a_running_call_stops_its_heartbeat_and_the_lease_expires() {
    #[derive(Debug)]
    struct TokioClock(SystemTime, tokio::time::Instant);
    impl toolonce::store::memory::Clock for TokioClock {
        fn now(&self) -> SystemTime {
            self.0 + self.1.elapsed()
        }
    }
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(Arc::new(TokioClock(
        SystemTime::now(),
        tokio::time::Instant::now(),
    ))));
    let stuck = Charge {
        delay: Some(Duration::from_secs(3600)),
        ..Charge::default()
    };
    // `rerun`, so the retry below may take over once the lease is gone.
    let options = WriteOptions::new()
        .lease(Duration::from_secs(3))
        .on_expired(OnExpired::Rerun);
    let tb = Arc::new(toolbox(store, stuck.clone(), options));
    let running = tokio::spawn({
        let tb = tb.clone();
        async move { tb.call("charge_card", args("A")).await }
    });
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(
        tb.call("charge_card", args("A")).await.outcome,
        Outcome::InFlight,
        "the heartbeat renews while the call runs"
    );
    running.abort();
    assert!(running.await.unwrap_err().is_cancelled());
    // Past a full lease with nobody renewing it, the operation can be taken over.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let retry = tokio::spawn({
        let tb = tb.clone();
        async move { tb.call("charge_card", args("A")).await }
    });
    let taken_over = tokio::time::timeout(Duration::from_secs(60), async {
        while stuck.charges.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    retry.abort();
    assert!(
        taken_over.is_ok(),
        "the dropped call's lease was still renewed a minute later"
    );
}

// --- `unknown` operations: the policies, the verify probe, the toolbox's declarations and the
// metrics. Each test makes an operation `unknown` the way a crash does: a claim whose lease
// expires (on a manual clock) without a complete or fail.

/// A store on a manual clock holding `op` as `unknown`: claimed by a caller that then vanished,
/// its lease expired. Returns that caller's token (a late owner) too.
async fn unknown_op(name: &str) -> (Arc<MemoryStore>, Arc<ManualClock>, key::Derived, OwnerToken) {
    let clock = ManualClock::new(SystemTime::now());
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let op = key::derive("unknown", name, &json!({"to": "ada@example.com"}), None).unwrap();
    let crashed = OwnerToken::generate();
    let about = toolonce::About::new("unknown", name);
    let request = ClaimRequest::new(&op.key, &op.fingerprint, &crashed, Duration::from_secs(60))
        .about(&about);
    assert!(matches!(store.claim(&request).await.unwrap(), Claim::Won));
    clock.advance(Duration::from_secs(61));
    assert_eq!(
        store.get(&op.key).await.unwrap().unwrap().state(),
        State::Unknown
    );
    (store, clock, op, crashed)
}

/// What one call saw: whether the tool ran, with which `may_have_run_before`, and whether the
/// probe was asked.
#[derive(Clone, Default)]
struct Seen {
    runs: Arc<AtomicU32>,
    probes: Arc<AtomicU32>,
    may_have_run_before: Arc<std::sync::Mutex<Vec<bool>>>,
}

impl Seen {
    async fn call(
        &self,
        layer: &Layer,
        op: &key::Derived,
        options: &WriteOptions,
        probe: toolonce::Verified,
    ) -> toolonce::WriteAnswer {
        let about = toolonce::About::new("unknown", "send_email");
        let (runs, probes, seen) = (
            self.runs.clone(),
            self.probes.clone(),
            self.may_have_run_before.clone(),
        );
        layer
            .run_with_verify(
                "send_email",
                op,
                &about,
                options,
                move |ctx| async move {
                    assert!(
                        ctx.may_have_run_before(),
                        "the probe runs after an interruption"
                    );
                    probes.fetch_add(1, Ordering::SeqCst);
                    probe
                },
                move |ctx| async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    seen.lock().unwrap().push(ctx.may_have_run_before());
                    Ok(json!({"sent": ctx.key().as_str()}))
                },
            )
            .await
    }
}

#[tokio::test]
async fn hold_answers_unknown_without_running_and_tells_the_model_a_person_must_check() {
    let (store, _clock, op, crashed) = unknown_op("send_email").await;
    let layer = Layer::new(store.clone());
    let seen = Seen::default();
    let answer = seen
        .call(
            &layer,
            &op,
            &WriteOptions::new(),
            toolonce::Verified::NotDone,
        )
        .await;
    assert_eq!(answer.outcome, Outcome::Unknown);
    assert_eq!(answer.outcome.as_str(), "unknown");
    let text = answer.result.clone().unwrap_err().message;
    for phrase in [
        "may already have taken effect",
        "must not retry",
        "A person must check",
        "toolonce resolve",
        "send_email",
        op.key.as_str(),
    ] {
        assert!(text.contains(phrase), "{phrase:?} missing from {text:?}");
    }
    assert!(
        !text.contains(crashed.as_str()),
        "the token never reaches the model"
    );
    assert!(!format!("{answer:?}").contains(crashed.as_str()));
    assert_eq!(seen.runs.load(Ordering::SeqCst), 0);
    assert_eq!(seen.probes.load(Ordering::SeqCst), 0, "hold never probes");
    // Held again and again, until a person settles it: then the settled answer is replayed.
    let again = seen
        .call(
            &layer,
            &op,
            &WriteOptions::new(),
            toolonce::Verified::NotDone,
        )
        .await;
    assert_eq!(again.outcome, Outcome::Unknown);
    assert_eq!(
        store
            .resolve(
                &op.key,
                &Resolution::Done(json!("sent by hand")),
                Duration::from_secs(60)
            )
            .await
            .unwrap(),
        Resolved::Applied
    );
    let settled = seen
        .call(
            &layer,
            &op,
            &WriteOptions::new(),
            toolonce::Verified::NotDone,
        )
        .await;
    assert_eq!(settled.outcome, Outcome::Replayed);
    assert_eq!(settled.result, Ok(json!("sent by hand")));
    assert_eq!(seen.runs.load(Ordering::SeqCst), 0);
}

/// Counts the claims a store is sent.
#[derive(Debug)]
struct CountsClaims {
    inner: Arc<dyn Store>,
    claims: AtomicU32,
}

#[async_trait]
impl Store for CountsClaims {
    async fn claim(&self, req: &ClaimRequest<'_>) -> toolonce::Result<Claim> {
        self.claims.fetch_add(1, Ordering::SeqCst);
        self.inner.claim(req).await
    }
    async fn renew(
        &self,
        key: &OperationKey,
        owner: &OwnerToken,
        lease: Duration,
    ) -> toolonce::Result<bool> {
        self.inner.renew(key, owner, lease).await
    }
    async fn complete(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        result: &Value,
        retention: Duration,
    ) -> toolonce::Result<Fenced> {
        self.inner.complete(key, owner, result, retention).await
    }
    async fn fail(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        error: &ToolError,
        sticky: Option<Duration>,
    ) -> toolonce::Result<Fenced> {
        self.inner.fail(key, owner, error, sticky).await
    }
    async fn get(&self, key: &OperationKey) -> toolonce::Result<Option<Entry>> {
        self.inner.get(key).await
    }
    async fn list(&self, q: &ListQuery) -> toolonce::Result<Page> {
        self.inner.list(q).await
    }
    async fn resolve(
        &self,
        key: &OperationKey,
        resolution: &Resolution,
        retention: Duration,
    ) -> toolonce::Result<Resolved> {
        self.inner.resolve(key, resolution, retention).await
    }
    async fn delete(&self, key: &OperationKey) -> toolonce::Result<bool> {
        self.inner.delete(key).await
    }
    async fn purge_expired(&self) -> toolonce::Result<u64> {
        self.inner.purge_expired().await
    }
}

#[tokio::test]
async fn rerun_takes_over_in_one_claim_and_the_tool_knows_it_may_have_run_before() {
    let (store, _clock, op, crashed) = unknown_op("send_email").await;
    let counting = Arc::new(CountsClaims {
        inner: store.clone(),
        claims: AtomicU32::new(0),
    });
    let layer = Layer::new(counting.clone());
    let seen = Seen::default();
    let options = WriteOptions::new().on_expired(OnExpired::Rerun);
    let answer = seen
        .call(&layer, &op, &options, toolonce::Verified::CannotTell)
        .await;
    assert_eq!(answer.outcome, Outcome::Executed);
    assert_eq!(
        answer.result,
        Ok(json!({"sent": op.key.as_str()})),
        "the same key again"
    );
    assert_eq!(counting.claims.load(Ordering::SeqCst), 1, "one round trip");
    assert_eq!(seen.probes.load(Ordering::SeqCst), 0, "rerun never probes");
    assert_eq!(*seen.may_have_run_before.lock().unwrap(), vec![true]);
    let entry = store.get(&op.key).await.unwrap().unwrap();
    assert_eq!(entry.state(), State::Done);
    assert_eq!(entry.attempts, 2);
    // The crashed caller, back late, is fenced out.
    assert_eq!(
        store
            .complete(&op.key, crashed, &json!("late"), Duration::from_secs(60))
            .await
            .unwrap(),
        Fenced::NotOwner
    );
    // A fresh operation under rerun is an ordinary first run.
    let fresh = key::derive("unknown", "send_email", &json!({"to": "bob"}), None).unwrap();
    let first = seen
        .call(&layer, &fresh, &options, toolonce::Verified::CannotTell)
        .await;
    assert_eq!(first.outcome, Outcome::Executed);
    assert_eq!(*seen.may_have_run_before.lock().unwrap(), vec![true, false]);
}

#[tokio::test]
async fn each_policy_with_each_verify_answer() {
    use toolonce::Verified;
    let found = json!({"message_id": "m-1"});
    let cases = [
        // (policy, probe answer, outcome, runs, probes)
        (
            OnExpired::Hold,
            Verified::Done(found.clone()),
            Outcome::Unknown,
            0,
            0,
        ),
        (OnExpired::Hold, Verified::NotDone, Outcome::Unknown, 0, 0),
        (
            OnExpired::Hold,
            Verified::CannotTell,
            Outcome::Unknown,
            0,
            0,
        ),
        (
            OnExpired::Rerun,
            Verified::Done(found.clone()),
            Outcome::Executed,
            1,
            0,
        ),
        (OnExpired::Rerun, Verified::NotDone, Outcome::Executed, 1, 0),
        (
            OnExpired::Rerun,
            Verified::CannotTell,
            Outcome::Executed,
            1,
            0,
        ),
        (
            OnExpired::Verify,
            Verified::Done(found.clone()),
            Outcome::Replayed,
            0,
            1,
        ),
        (
            OnExpired::Verify,
            Verified::NotDone,
            Outcome::Executed,
            1,
            1,
        ),
        (
            OnExpired::Verify,
            Verified::CannotTell,
            Outcome::Unknown,
            0,
            1,
        ),
    ];
    for (policy, probe, outcome, runs, probes) in cases {
        let case = format!("{policy} with the probe answering {probe:?}");
        let (store, _clock, op, _) = unknown_op("send_email").await;
        let layer = Layer::new(store.clone());
        let seen = Seen::default();
        let options = WriteOptions::new().on_expired(policy);
        let answer = seen.call(&layer, &op, &options, probe.clone()).await;
        assert_eq!(answer.outcome, outcome, "{case}");
        assert_eq!(seen.runs.load(Ordering::SeqCst), runs, "{case}");
        assert_eq!(seen.probes.load(Ordering::SeqCst), probes, "{case}");
        let entry = store.get(&op.key).await.unwrap().unwrap();
        match outcome {
            Outcome::Unknown => assert_eq!(entry.state(), State::Unknown, "{case}"),
            Outcome::Executed => {
                assert_eq!(
                    seen.may_have_run_before.lock().unwrap().as_slice(),
                    [true],
                    "{case}"
                );
                assert_eq!(entry.state(), State::Done, "{case}");
                assert_eq!(entry.attempts, 2, "{case}: a takeover");
            }
            Outcome::Replayed => {
                assert_eq!(answer.result, Ok(found.clone()), "{case}");
                // Recorded: the next duplicate replays it without asking again.
                assert_eq!(entry.attempts, 1, "{case}: nothing was run again");
                let next = seen.call(&layer, &op, &options, Verified::NotDone).await;
                assert_eq!(next.outcome, Outcome::Replayed, "{case}");
                assert_eq!(next.result, Ok(found.clone()), "{case}");
                assert_eq!(seen.probes.load(Ordering::SeqCst), 1, "{case}");
            }
            other => panic!("{case}: unexpected {other}"),
        }
    }
}

#[tokio::test]
async fn verify_without_a_probe_holds() {
    let (store, _clock, op, _) = unknown_op("send_email").await;
    let layer = Layer::new(store);
    let answer = layer
        .run(
            "send_email",
            &op,
            &WriteOptions::new().on_expired(OnExpired::Verify),
            |_| async { Ok(json!("ran")) },
        )
        .await;
    assert_eq!(answer.outcome, Outcome::Unknown);
}

#[tokio::test]
async fn a_probe_that_finds_it_done_never_overwrites_an_entry_settled_meanwhile() {
    let (store, _clock, op, crashed) = unknown_op("send_email").await;
    let layer = Layer::new(store.clone());
    let about = toolonce::About::new("unknown", "send_email");
    let late_owner = store.clone();
    let key = op.key.clone();
    let answer = layer
        .run_with_verify(
            "send_email",
            &op,
            &about,
            &WriteOptions::new().on_expired(OnExpired::Verify),
            move |_| async move {
                // While the probe asks downstream, the late owner records its own result.
                let applied = late_owner
                    .complete(
                        &key,
                        crashed,
                        &json!("the owner's"),
                        Duration::from_secs(60),
                    )
                    .await
                    .unwrap();
                assert_eq!(applied, Fenced::Applied);
                toolonce::Verified::Done(json!("the probe's"))
            },
            |_| async { Ok(json!("ran")) },
        )
        .await;
    assert_eq!(answer.outcome, Outcome::Replayed);
    assert_eq!(answer.result, Ok(json!("the owner's")));
    match store.get(&op.key).await.unwrap().unwrap().state {
        toolonce::EntryState::Done { result, .. } => assert_eq!(result, json!("the owner's")),
        other => panic!("expected done, got {other:?}"),
    }
}

#[tokio::test]
async fn a_waiting_duplicate_whose_owner_vanishes_holds_under_the_default_policy() {
    let clock = ManualClock::new(SystemTime::now());
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let layer = Layer::new(store.clone());
    let op = key::derive("wait", "send_email", &json!({"n": 1}), None).unwrap();
    let vanished = OwnerToken::generate();
    let lease = Duration::from_secs(60);
    let request = ClaimRequest::new(&op.key, &op.fingerprint, &vanished, lease);
    assert!(matches!(store.claim(&request).await.unwrap(), Claim::Won));
    let ran = Arc::new(AtomicU32::new(0));
    let waiter = {
        let (layer, op, ran) = (layer.clone(), op.clone(), ran.clone());
        tokio::spawn(async move {
            let options = WriteOptions::new().in_flight(InFlight::Wait(Duration::from_secs(30)));
            layer
                .run("send_email", &op, &options, move |_| async move {
                    ran.fetch_add(1, Ordering::SeqCst);
                    Ok(json!("sent twice"))
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    clock.advance(lease + Duration::from_secs(1));
    let answer = waiter.await.unwrap();
    assert_eq!(answer.outcome, Outcome::Unknown);
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

/// A write tool declaring its downstream's behaviour, for the toolbox's wiring.
#[derive(Clone, Default)]
struct Declared {
    name: &'static str,
    honours_key: bool,
    probe: Option<toolonce::Verified>,
    runs: Arc<AtomicU32>,
    probed_with: Arc<std::sync::Mutex<Vec<(String, String)>>>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct EmailArgs {
    to: String,
}

impl WriteTool for Declared {
    type Args = EmailArgs;
    type Output = Value;
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "A tool with a declared downstream."
    }
    fn honours_key(&self) -> bool {
        self.honours_key
    }
    fn on_expired(&self) -> OnExpired {
        match (&self.probe, self.honours_key) {
            (Some(_), _) => OnExpired::Verify,
            (None, true) => OnExpired::Rerun,
            (None, false) => OnExpired::Hold,
        }
    }
    async fn verify(&self, ctx: &WriteContext, args: &EmailArgs) -> toolonce::Verified {
        self.probed_with
            .lock()
            .unwrap()
            .push((ctx.key().as_str().to_owned(), args.to.clone()));
        self.probe.clone().unwrap_or(toolonce::Verified::CannotTell)
    }
    async fn call(&self, _: WriteContext, args: EmailArgs) -> Result<Value, ToolError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(json!({"to": args.to}))
    }
}

/// Makes the toolbox call of `tool` with `to` unknown in `store`: claimed, lease expired.
async fn crash_through_the_toolbox(
    store: &Arc<MemoryStore>,
    clock: &ManualClock,
    tool: &str,
    to: &str,
) {
    let op = key::derive("run-1", tool, &json!({"to": to}), None).unwrap();
    let owner = OwnerToken::generate();
    let about = toolonce::About::new("run-1", tool);
    let request =
        ClaimRequest::new(&op.key, &op.fingerprint, &owner, Duration::from_secs(60)).about(&about);
    assert!(matches!(store.claim(&request).await.unwrap(), Claim::Won));
    clock.advance(Duration::from_secs(61));
}

#[tokio::test]
async fn the_toolbox_takes_each_tools_declared_policy_unless_its_options_say_otherwise() {
    let clock = ManualClock::new(SystemTime::now());
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let charge = Declared {
        name: "charge",
        honours_key: true,
        ..Declared::default()
    };
    let email = Declared {
        name: "email",
        ..Declared::default()
    };
    let checked = Declared {
        name: "checked_email",
        probe: Some(toolonce::Verified::Done(json!({"to": "found"}))),
        ..Declared::default()
    };
    let overridden = Declared {
        name: "overridden",
        honours_key: true,
        ..Declared::default()
    };
    let tb = Toolbox::builder(store.clone())
        .scope("run-1")
        .write(charge.clone())
        .write(email.clone())
        .write(checked.clone())
        .write_with(
            overridden.clone(),
            WriteOptions::new().on_expired(OnExpired::Hold),
        )
        .build()
        .unwrap();
    for tool in ["charge", "email", "checked_email", "overridden"] {
        crash_through_the_toolbox(&store, &clock, tool, "ada").await;
    }
    let answer = tb.call("charge", json!({"to": "ada"})).await;
    assert_eq!(answer.outcome, Outcome::Executed, "honours the key: rerun");
    assert_eq!(charge.runs.load(Ordering::SeqCst), 1);

    let answer = tb.call("email", json!({"to": "ada"})).await;
    assert_eq!(answer.outcome, Outcome::Unknown, "no downstream key: hold");
    assert!(answer.is_error);
    assert!(
        answer.content.contains("must not retry"),
        "{}",
        answer.content
    );
    assert_eq!(email.runs.load(Ordering::SeqCst), 0);

    let answer = tb.call("checked_email", json!({"to": "ada"})).await;
    assert_eq!(answer.outcome, Outcome::Replayed, "verified done");
    assert_eq!(answer.value, Some(json!({"to": "found"})));
    assert_eq!(checked.runs.load(Ordering::SeqCst), 0);
    let probed = checked.probed_with.lock().unwrap().clone();
    let key = answer.key.unwrap();
    assert_eq!(probed, vec![(key.as_str().to_owned(), "ada".to_owned())]);
    // A first call of another operation runs it and never asks the probe.
    let answer = tb.call("checked_email", json!({"to": "bob"})).await;
    assert_eq!(answer.outcome, Outcome::Executed);
    assert_eq!(checked.runs.load(Ordering::SeqCst), 1);
    assert_eq!(checked.probed_with.lock().unwrap().len(), 1);

    let answer = tb.call("overridden", json!({"to": "ada"})).await;
    assert_eq!(
        answer.outcome,
        Outcome::Unknown,
        "the options win over the tool"
    );
    assert_eq!(overridden.runs.load(Ordering::SeqCst), 0);

    // The entries the toolbox writes say what they are.
    let entry = store
        .list(&ListQuery::new().tool("charge"))
        .await
        .unwrap()
        .entries;
    assert_eq!(entry.len(), 1);
    let fresh = tb.call("email", json!({"to": "bob"})).await;
    let entry = store.get(&fresh.key.unwrap()).await.unwrap().unwrap();
    assert_eq!(entry.about, toolonce::About::new("run-1", "email"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_duplicates_of_an_unknown_operation_under_rerun_take_it_over_once() {
    for round in 0..20 {
        let (store, _clock, op, _) = unknown_op("send_email").await;
        let layer = Layer::new(store.clone());
        let runs = Arc::new(AtomicU32::new(0));
        let release = Arc::new(tokio::sync::Notify::new());
        let barrier = Arc::new(tokio::sync::Barrier::new(8));
        let options = WriteOptions::new().on_expired(OnExpired::Rerun);
        let calls: Vec<_> = (0..8)
            .map(|_| {
                let (layer, op, runs, release, barrier, options) = (
                    layer.clone(),
                    op.clone(),
                    runs.clone(),
                    release.clone(),
                    barrier.clone(),
                    options.clone(),
                );
                tokio::spawn(async move {
                    barrier.wait().await;
                    layer
                        .run("send_email", &op, &options, move |_| async move {
                            runs.fetch_add(1, Ordering::SeqCst);
                            release.notified().await;
                            Ok(json!("sent"))
                        })
                        .await
                })
            })
            .collect();
        // Let every duplicate reach the store before the one that took over finishes.
        while runs.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        release.notify_one();
        let mut outcomes = Vec::new();
        for call in calls {
            outcomes.push(call.await.unwrap().outcome);
        }
        let executed = outcomes.iter().filter(|o| **o == Outcome::Executed).count();
        assert_eq!(executed, 1, "round {round}: {outcomes:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "round {round}");
        assert_eq!(
            store.get(&op.key).await.unwrap().unwrap().attempts,
            2,
            "round {round}"
        );
    }
}
