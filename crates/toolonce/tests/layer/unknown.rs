//! `unknown` operations: the policies and the verify probe. Each test makes an operation
//! `unknown` the way a crash does: a claim whose lease expires (on a manual clock) without a
//! complete or fail.

use super::*;

/// A store on a manual clock holding `op` as `unknown`: claimed by a caller that then vanished,
/// its lease expired. Returns that caller's token (a late owner) too.
pub(super) async fn unknown_op(
    name: &str,
) -> (Arc<MemoryStore>, Arc<ManualClock>, key::Derived, OwnerToken) {
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
    let looked = toolonce::Seen::of(&store.get(&op.key).await.unwrap().unwrap()).unwrap();
    assert_eq!(
        store
            .resolve(
                &op.key,
                &looked,
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
#[derive(Debug, Default)]
struct CountsClaims {
    claims: AtomicU32,
}

#[async_trait]
impl Intercept for CountsClaims {
    async fn claim(&self, inner: &dyn Store, req: &ClaimRequest<'_>) -> toolonce::Result<Claim> {
        self.claims.fetch_add(1, Ordering::SeqCst);
        inner.claim(req).await
    }
}

#[tokio::test]
async fn rerun_takes_over_in_one_claim_and_the_tool_knows_it_may_have_run_before() {
    let (store, _clock, op, crashed) = unknown_op("send_email").await;
    let counting = Arc::new(Intercepted::new(store.clone(), CountsClaims::default()));
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

/// A store whose claims that ask for a takeover apply and then lose their reply (the store
/// answers "unavailable" after writing), as a dropped connection or a `replicas=N`
/// acknowledgment that came up short does.
#[derive(Debug, Default)]
struct ClaimRepliesLost;

#[async_trait]
impl Intercept for ClaimRepliesLost {
    async fn claim(&self, inner: &dyn Store, req: &ClaimRequest<'_>) -> toolonce::Result<Claim> {
        let applied = inner.claim(req).await?;
        if !req.takeover {
            return Ok(applied);
        }
        Err(Error::unavailable("the claim's reply was lost"))
    }
}

/// What a `hold` caller does with `op` now: it must not run an operation whose earlier attempt
/// may have taken effect.
async fn held_by_a_hold_caller(store: Arc<MemoryStore>, op: &key::Derived) {
    let seen = Seen::default();
    let answer = seen
        .call(
            &Layer::new(store),
            op,
            &WriteOptions::new(),
            toolonce::Verified::CannotTell,
        )
        .await;
    assert_eq!(answer.outcome, Outcome::Unknown, "{answer:?}");
    assert_eq!(seen.runs.load(Ordering::SeqCst), 0, "a hold caller ran it");
}

/// The entry of `op` after a takeover gave up without an outcome: still there (the earlier
/// attempt's record), `unknown` at once (its lease given back), with the takeover's attempt
/// counted and kept.
async fn given_back(store: &MemoryStore, op: &key::Derived) {
    let entry = store
        .get(&op.key)
        .await
        .unwrap()
        .expect("the record was deleted");
    assert_eq!((entry.state(), entry.attempts), (State::Unknown, 2));
}

#[tokio::test]
async fn a_takeover_whose_reply_is_lost_keeps_the_earlier_attempt_unknown() {
    let (store, _clock, op, _crashed) = unknown_op("send_email").await;
    let lossy = Arc::new(Intercepted::new(store.clone(), ClaimRepliesLost));
    let seen = Seen::default();
    let rerun = WriteOptions::new().on_expired(OnExpired::Rerun);
    let answer = seen
        .call(
            &Layer::new(lossy),
            &op,
            &rerun,
            toolonce::Verified::CannotTell,
        )
        .await;
    assert_eq!(answer.outcome, Outcome::StoreUnavailable, "{answer:?}");
    assert_eq!(seen.runs.load(Ordering::SeqCst), 0);
    given_back(&store, &op).await;
    held_by_a_hold_caller(store.clone(), &op).await;
    // A rerun caller takes it over again, with the same key.
    let again = seen
        .call(
            &Layer::new(store.clone()),
            &op,
            &rerun,
            toolonce::Verified::CannotTell,
        )
        .await;
    assert_eq!(again.outcome, Outcome::Executed, "{again:?}");
    assert_eq!(*seen.may_have_run_before.lock().unwrap(), vec![true]);
    assert_eq!(store.get(&op.key).await.unwrap().unwrap().attempts, 3);
}

#[tokio::test]
async fn a_verified_takeover_whose_reply_is_lost_keeps_the_earlier_attempt_unknown() {
    let (store, _clock, op, _crashed) = unknown_op("send_email").await;
    let lossy = Arc::new(Intercepted::new(store.clone(), ClaimRepliesLost));
    let seen = Seen::default();
    let verify = WriteOptions::new().on_expired(OnExpired::Verify);
    // The first claim asks for no takeover and reads the entry; the takeover the probe's "not
    // done" asks for loses its reply.
    let answer = seen
        .call(
            &Layer::new(lossy),
            &op,
            &verify,
            toolonce::Verified::NotDone,
        )
        .await;
    assert_eq!(answer.outcome, Outcome::StoreUnavailable, "{answer:?}");
    given_back(&store, &op).await;
    held_by_a_hold_caller(store, &op).await;
}

#[tokio::test]
async fn a_takeover_whose_tool_fails_transiently_keeps_the_earlier_attempt_unknown() {
    let (store, _clock, op, _crashed) = unknown_op("send_email").await;
    let layer = Layer::new(store.clone());
    let rerun = WriteOptions::new().on_expired(OnExpired::Rerun);
    let answer = layer
        .run("send_email", &op, &rerun, |_| async {
            Err(ToolError::transient("the mail server timed out"))
        })
        .await;
    assert_eq!(answer.outcome, Outcome::Executed);
    assert!(answer.result.is_err());
    given_back(&store, &op).await;
    held_by_a_hold_caller(store, &op).await;
}

#[tokio::test]
async fn a_fresh_claim_under_rerun_whose_reply_is_lost_is_still_released() {
    let store = Arc::new(MemoryStore::new());
    let op = key::derive("unknown", "send_email", &json!({"to": "eve"}), None).unwrap();
    let lossy = Arc::new(Intercepted::new(store.clone(), ClaimRepliesLost));
    let seen = Seen::default();
    let rerun = WriteOptions::new().on_expired(OnExpired::Rerun);
    let answer = seen
        .call(
            &Layer::new(lossy),
            &op,
            &rerun,
            toolonce::Verified::CannotTell,
        )
        .await;
    assert_eq!(answer.outcome, Outcome::StoreUnavailable, "{answer:?}");
    assert_eq!(
        store.get(&op.key).await.unwrap(),
        None,
        "nothing ran: released"
    );
    let retry = seen
        .call(
            &Layer::new(store.clone()),
            &op,
            &rerun,
            toolonce::Verified::CannotTell,
        )
        .await;
    assert_eq!(retry.outcome, Outcome::Executed);
    assert_eq!(*seen.may_have_run_before.lock().unwrap(), vec![false]);
}
