//! `unknown` entries: a lease that runs out unsettled, takeovers, reclaims.

use super::*;

/// A unique scope for a test's `About`, so listings filtered by it see that test's entries
/// only, even on a store other tests share.
pub fn unique_scope(name: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{name}-{}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// Claims `key` as a new caller recording `about`, with the given lease, unknown retention and
/// takeover; answers the token when it won.
pub async fn claim_about(
    store: &dyn Store,
    key: &OperationKey,
    fp: &Fingerprint,
    about: &About,
    lease: Duration,
    retention: Duration,
    takeover: bool,
) -> Fresh {
    let owner = OwnerToken::generate();
    let request = ClaimRequest::new(key, fp, &owner, lease)
        .retention(retention)
        .takeover(takeover)
        .about(about);
    match store.claim(&request).await.unwrap() {
        Claim::Won | Claim::TookOver => Fresh::Won(owner),
        Claim::Existing(entry) => Fresh::Existing(entry),
    }
}

/// A key whose first attempt's lease has expired unsettled: its entry is `unknown`.
pub async fn unknown_entry(
    store: &dyn Store,
    name: &str,
) -> (OperationKey, Fingerprint, OwnerToken) {
    let (key, fp) = op(name);
    let owner = won(store.claim_fresh(&key, &fp, SHORT).await.unwrap());
    tokio::time::sleep(PAST_SHORT).await;
    (key, fp, owner)
}

pub async fn an_expired_lease_leaves_the_entry_unknown(store: Arc<dyn Store>) {
    let (key, fp, owner) = unknown_entry(&*store, "t").await;
    let entry = store
        .get(&key)
        .await
        .unwrap()
        .expect("an unknown entry is live");
    assert_eq!(entry.state(), State::Unknown);
    assert_eq!(entry.key, key);
    assert_eq!(entry.fingerprint.as_ref(), Some(&fp));
    match &entry.state {
        EntryState::Unknown { owner: Some(o) } => assert_shows_owner(o, &owner),
        other => panic!("expected an unknown entry with its owner, got {other:?}"),
    }
    assert!(
        entry.expires_at.is_some(),
        "an unknown entry knows its lease deadline"
    );
    let listed = store
        .list(&ListQuery::new().state(State::Unknown))
        .await
        .unwrap();
    assert!(
        listed.entries.iter().any(|e| e.key == key),
        "listed as unknown"
    );
    let running = store
        .list(&ListQuery::new().state(State::Running))
        .await
        .unwrap();
    assert!(
        running.entries.iter().all(|e| e.key != key),
        "an unknown entry is not listed as running"
    );
}

pub async fn a_claim_without_takeover_sees_an_unknown_entry(store: Arc<dyn Store>) {
    let (key, fp, _owner) = unknown_entry(&*store, "t").await;
    for _ in 0..2 {
        let entry = existing(store.claim_fresh(&key, &fp, LONG).await.unwrap());
        assert_eq!(entry.state(), State::Unknown);
        assert_eq!(entry.attempts, 1);
    }
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().state(),
        State::Unknown,
        "a claim that did not take over left the entry as it was"
    );
}

pub async fn a_takeover_wins_an_unknown_entry_counts_the_attempt_and_keeps_the_first_start(
    store: Arc<dyn Store>,
) {
    let (key, fp) = op("t");
    let about = About::new(unique_scope("takeover"), "charge").detail("first caller");
    let first = won(claim_about(&*store, &key, &fp, &about, SHORT, LONG, false).await);
    let before = store.get(&key).await.unwrap().unwrap();
    assert_eq!(before.attempts, 1);
    let first_start = before
        .first_started_at
        .expect("the first start is recorded");
    tokio::time::sleep(PAST_SHORT).await;

    let other = About::new("another-scope", "another-tool");
    let second = OwnerToken::generate();
    let request = ClaimRequest::new(&key, &fp, &second, LONG)
        .takeover(true)
        .about(&other);
    match store.claim(&request).await.unwrap() {
        Claim::TookOver => {}
        other => panic!("expected the takeover to be reported as such, got {other:?}"),
    }
    // Its re-sent copy (the reply was lost) finds the caller's own entry: a plain win.
    assert!(matches!(store.claim(&request).await.unwrap(), Claim::Won));
    let entry = store.get(&key).await.unwrap().unwrap();
    assert_eq!(entry.state(), State::Running);
    match &entry.state {
        EntryState::Running { owner: Some(o) } => assert_shows_owner(o, &second),
        other => panic!("expected the new owner's running entry, got {other:?}"),
    }
    assert_eq!(entry.attempts, 2, "a takeover is a second attempt");
    assert_eq!(
        entry.first_started_at,
        Some(first_start),
        "the first start is kept"
    );
    assert!(
        entry.started_at >= first_start,
        "the attempt's own start is the takeover's"
    );
    assert_eq!(
        entry.about, about,
        "what the entry is stays what its first claim said"
    );
    assert_eq!(entry.fingerprint.as_ref(), Some(&fp));
    assert!(!store.renew(&key, &first, LONG).await.unwrap());

    // A second takeover after this one expires counts again.
    let (key, fp) = op("t");
    let _ = won(claim_about(&*store, &key, &fp, &about, SHORT, LONG, false).await);
    tokio::time::sleep(PAST_SHORT).await;
    let _ = won(claim_about(&*store, &key, &fp, &about, SHORT, LONG, true).await);
    tokio::time::sleep(PAST_SHORT).await;
    let _ = won(claim_about(&*store, &key, &fp, &about, LONG, LONG, true).await);
    assert_eq!(store.get(&key).await.unwrap().unwrap().attempts, 3);
}

pub async fn a_takeover_never_applies_to_a_live_or_settled_entry(store: Arc<dyn Store>) {
    let (key, fp) = op("t");
    let owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    let entry = existing(store.take_over_fresh(&key, &fp, LONG).await.unwrap());
    assert_eq!(
        entry.state(),
        State::Running,
        "a live lease is not taken over"
    );
    assert_eq!(
        store
            .complete(&key, owner, &json!("done"), LONG)
            .await
            .unwrap(),
        Fenced::Applied
    );
    match existing(store.take_over_fresh(&key, &fp, LONG).await.unwrap()).state {
        EntryState::Done { result, .. } => assert_eq!(result, json!("done")),
        other => panic!("expected done, got {other:?}"),
    }
}

pub async fn a_takeover_with_other_arguments_is_refused(store: Arc<dyn Store>) {
    // Same key, other fingerprint: a conflicting call must not run under the first one's key.
    let (key, fp, _owner) = unknown_entry(&*store, "t").await;
    let (_, other_fp) = op("t");
    assert_ne!(fp, other_fp);
    let entry = existing(store.take_over_fresh(&key, &other_fp, LONG).await.unwrap());
    assert_eq!(entry.state(), State::Unknown);
    assert_eq!(entry.fingerprint.as_ref(), Some(&fp));
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().attempts,
        1,
        "nothing was taken over"
    );
}

pub async fn its_own_token_reclaims_an_unknown_entry(store: Arc<dyn Store>) {
    let (key, fp, owner) = unknown_entry(&*store, "t").await;
    // A re-sent claim of the same attempt: no takeover needed, and no new attempt counted.
    assert!(matches!(
        store
            .claim(&ClaimRequest::new(&key, &fp, &owner, LONG))
            .await
            .unwrap(),
        Claim::Won
    ));
    let entry = store.get(&key).await.unwrap().unwrap();
    assert_eq!(entry.state(), State::Running);
    assert_eq!(entry.attempts, 1);
    assert_eq!(
        store.complete(&key, owner, &json!(1), LONG).await.unwrap(),
        Fenced::Applied
    );
}

pub async fn an_unknown_entry_is_kept_for_its_retention_after_the_lease_then_absent(
    store: Arc<dyn Store>,
) {
    let retention = Duration::from_secs(2);
    let (key, fp) = op("t");
    let about = About::new(unique_scope("kept"), "t");
    let _ = won(claim_about(&*store, &key, &fp, &about, SHORT, retention, false).await);
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(
        store.get(&key).await.unwrap().map(|e| e.state()),
        Some(State::Unknown)
    );
    tokio::time::sleep(retention + PAST_SHORT).await;
    assert!(
        store.get(&key).await.unwrap().is_none(),
        "gone once lease + retention has passed"
    );
    let listed = store
        .list(&ListQuery::new().scope(about.scope.clone().unwrap()))
        .await
        .unwrap();
    assert!(listed.entries.is_empty(), "{:?}", listed.entries);
    // Absent again: a plain claim wins, as a first attempt.
    let _ = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    assert_eq!(store.get(&key).await.unwrap().unwrap().attempts, 1);
}

pub async fn concurrent_takeovers_of_an_unknown_entry_have_exactly_one_winner(
    store: Arc<dyn Store>,
) {
    for round in 0..5 {
        let (key, fp, _crashed) = unknown_entry(&*store, "race").await;
        let barrier = Arc::new(tokio::sync::Barrier::new(32));
        let tasks: Vec<_> = (0..32)
            .map(|_| {
                let (store, key, fp, barrier) =
                    (store.clone(), key.clone(), fp.clone(), barrier.clone());
                tokio::spawn(async move {
                    let owner = OwnerToken::generate();
                    let request = ClaimRequest::new(&key, &fp, &owner, LONG).takeover(true);
                    barrier.wait().await;
                    store.claim(&request).await.unwrap()
                })
            })
            .collect();
        let mut took_over = 0;
        for t in tasks {
            match t.await.unwrap() {
                Claim::TookOver => took_over += 1,
                Claim::Won => panic!("round {round}: a fresh win over an unknown entry"),
                Claim::Existing(e) => assert_eq!(e.state(), State::Running, "round {round}"),
            }
        }
        assert_eq!(took_over, 1, "round {round}: {took_over} takeovers");
        assert_eq!(
            store.get(&key).await.unwrap().unwrap().attempts,
            2,
            "round {round}"
        );
    }
}

/// The layer's give-back (a takeover that gave up without an outcome of its own): a renewal
/// with a zero lease ends the lease now. The entry is `unknown` at once and keeps what it
/// recorded of its attempts; a claim that asks for no takeover is still refused, and one that
/// asks takes it over again. The layer tells an entry its own claim created (one attempt,
/// started at its first start) from a takeover's, so both must read back exactly.
pub async fn a_zero_lease_renewal_gives_an_entry_back_unknown_with_its_record(
    store: Arc<dyn Store>,
) {
    let (key, fp) = op("t");
    let about = About::new(unique_scope("give-back"), "charge");
    let first = won(claim_about(&*store, &key, &fp, &about, LONG, LONG, false).await);
    let fresh = store.get(&key).await.unwrap().unwrap();
    assert_eq!(fresh.attempts, 1);
    assert_eq!(
        fresh.first_started_at,
        Some(fresh.started_at),
        "a fresh claim's start is its first start"
    );
    // Apart in time, so that the takeover's start cannot equal the first.
    tokio::time::sleep(PAST_SHORT).await;
    assert!(store.renew(&key, &first, Duration::ZERO).await.unwrap());
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().state(),
        State::Unknown
    );
    let second = won(claim_about(&*store, &key, &fp, &about, LONG, LONG, true).await);
    let taken = store.get(&key).await.unwrap().unwrap();
    assert_eq!(taken.attempts, 2);
    assert_ne!(
        taken.first_started_at,
        Some(taken.started_at),
        "a takeover keeps the earlier first start"
    );

    assert!(store.renew(&key, &second, Duration::ZERO).await.unwrap());
    tokio::time::sleep(Duration::from_millis(20)).await;
    let given = store
        .get(&key)
        .await
        .unwrap()
        .expect("given back, not deleted");
    assert_eq!(given.state(), State::Unknown, "its lease ended at once");
    assert_eq!(given.attempts, 2);
    assert_eq!(given.first_started_at, taken.first_started_at);
    assert_eq!(given.started_at, taken.started_at);
    assert_eq!(given.fingerprint.as_ref(), Some(&fp));
    assert_eq!(given.about, about);
    let seen = existing(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    assert_eq!(seen.state(), State::Unknown, "no takeover asked: refused");
    let _third = won(claim_about(&*store, &key, &fp, &about, LONG, LONG, true).await);
    assert_eq!(store.get(&key).await.unwrap().unwrap().attempts, 3);
}
