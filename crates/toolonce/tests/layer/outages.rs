//! The store going away: a store that errors on demand, and one whose replies get lost after
//! it acted, so the layer must tell a write that applied from one that did not.

use super::*;

/// What switches a store off, as if its server went away: every call is refused while `down`.
#[derive(Debug)]
struct Switch {
    down: AtomicBool,
}

impl Intercept for Switch {
    fn admit(&self) -> toolonce::Result<()> {
        if self.down.load(Ordering::SeqCst) {
            Err(Error::unavailable("connection refused"))
        } else {
            Ok(())
        }
    }
}

#[tokio::test]
async fn a_store_that_errors_means_the_write_tool_is_not_executed() {
    let store = Arc::new(Intercepted::new(
        Arc::new(MemoryStore::new()),
        Switch {
            down: AtomicBool::new(true),
        },
    ));
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

#[tokio::test]
async fn a_result_the_store_cannot_record_is_returned_with_a_notice_that_says_it_was_not_recorded()
{
    let store = Arc::new(Intercepted::new(
        Arc::new(MemoryStore::new()),
        Switch {
            down: AtomicBool::new(false),
        },
    ));
    let layer = Layer::new(store.clone());
    let op = key::derive("unrecorded", "charge", &json!({"n": 1}), None).unwrap();
    let options = WriteOptions::new().lease(Duration::from_secs(30));
    let answer = layer
        .run("charge", &op, &options, |_| async {
            // The store goes away while the tool runs, and stays away.
            store.down.store(true, Ordering::SeqCst);
            Ok(json!({"receipt": "r_1"}))
        })
        .await;
    assert_eq!(answer.outcome, Outcome::Executed, "{answer:?}");
    assert_eq!(answer.result, Ok(json!({"receipt": "r_1"})));
    let notice = answer.notice.clone().unwrap_or_default();
    assert!(
        notice.contains("could not be recorded") && notice.contains("never gets this outcome"),
        "{answer:?}"
    );
    // And it is true: the entry is still the running claim, not a result.
    store.down.store(false, Ordering::SeqCst);
    let entry = store.get(&op.key).await.unwrap().unwrap();
    assert_eq!(entry.state(), toolonce::State::Running, "{entry:?}");
}

/// A store whose replies get lost: the write is applied, then the caller gets an
/// `Unavailable` error, as when the connection drops after the server acted.
#[derive(Debug, Default)]
struct LosesReplies {
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
impl Intercept for LosesReplies {
    async fn claim(&self, inner: &dyn Store, req: &ClaimRequest<'_>) -> toolonce::Result<Claim> {
        let claim = inner.claim(req).await?;
        if take_one(&self.claims) {
            return Err(reset());
        }
        Ok(claim)
    }
    async fn complete(
        &self,
        inner: &dyn Store,
        key: &OperationKey,
        owner: OwnerToken,
        result: &Value,
        retention: Duration,
    ) -> toolonce::Result<Fenced> {
        let fenced = inner.complete(key, owner, result, retention).await?;
        if take_one(&self.completes) {
            return Err(reset());
        }
        Ok(fenced)
    }
    async fn fail(
        &self,
        inner: &dyn Store,
        key: &OperationKey,
        owner: OwnerToken,
        error: &ToolError,
        sticky: Option<Duration>,
    ) -> toolonce::Result<Fenced> {
        if take_one(&self.fails_refused) {
            return Err(Error::unavailable("connection refused"));
        }
        inner.fail(key, owner, error, sticky).await
    }
}

/// A memory store behind `LosesReplies`.
fn losing_replies() -> Arc<Intercepted<LosesReplies>> {
    Arc::new(Intercepted::new(
        Arc::new(MemoryStore::new()),
        LosesReplies::default(),
    ))
}

#[tokio::test]
async fn a_claim_whose_reply_is_lost_is_released_so_a_retry_runs_the_tool_once() {
    let store = losing_replies();
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
            .inner()
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
    #[derive(Debug)]
    struct Resends;
    #[async_trait]
    impl Intercept for Resends {
        async fn claim(
            &self,
            inner: &dyn Store,
            req: &ClaimRequest<'_>,
        ) -> toolonce::Result<Claim> {
            let _lost = inner.claim(req).await?;
            inner.claim(req).await
        }
    }
    let tool = Charge::default();
    let tb = toolbox(
        Arc::new(Intercepted::new(Arc::new(MemoryStore::new()), Resends)),
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
    let store = losing_replies();
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
    // Recorded after all: the caller is not told otherwise.
    assert_eq!(first.notice, None);
    // The operator's log must not say the result was lost when it was recorded.
    let logs = logged_about(&op.key);
    assert!(logs.contains("write call"), "the log was captured: {logs}");
    assert!(!logs.contains("claim was lost"), "{logs}");
}
