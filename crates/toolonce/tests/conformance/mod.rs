//! The store conformance suite: the contract of `Store`, written once and run against every
//! backend by `store_conformance!`. Each test gets a fresh, isolated store from the backend's
//! factory, and uses only real time (short leases and sleeps), so backends whose clock is a
//! server's run it unchanged.

#![allow(dead_code, unreachable_pub)]

pub mod multiprocess;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use toolonce::key::{self, Fingerprint, OperationKey};
use toolonce::{
    About, Claim, ClaimRequest, EntryState, Fenced, ListQuery, OwnerToken, Resolution, Resolved,
    State, Store, ToolError,
};

/// Waits until the entry at `key` is `unknown` (its lease ran out unsettled, on the store's
/// clock), failing after 30 s.
pub async fn until_unknown(store: &dyn Store, key: &OperationKey) {
    let start = std::time::Instant::now();
    loop {
        let entry = store.get(key).await.unwrap().expect("kept past its lease");
        if entry.state() == State::Unknown {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never became unknown"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A lease long enough never to expire during a test unless it means to wait for it.
pub const LONG: Duration = Duration::from_secs(60);
/// A lease short enough to wait out.
pub const SHORT: Duration = Duration::from_millis(300);
/// Longer than `SHORT`, with room for slow machines and server clocks.
pub const PAST_SHORT: Duration = Duration::from_millis(700);

/// A fresh key and fingerprint, unique to the test and the process.
pub fn op(name: &str) -> (OperationKey, Fingerprint) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let scope = format!("conformance-{}-{n}", std::process::id());
    let d = key::derive(&scope, name, &json!({"n": n}), None).unwrap();
    (d.key, d.fingerprint)
}

/// What a claim with a fresh token decided, with the token when it won: the shape most tests
/// want, since they play a new caller each time.
#[derive(Debug)]
// Matched at once, as `Claim` is.
#[allow(clippy::large_enum_variant)]
pub enum Fresh {
    Won(OwnerToken),
    Existing(toolonce::Entry),
}

/// [`Store::claim`] as a new caller makes it: with a token of its own, generated first.
#[async_trait::async_trait]
pub trait ClaimFresh {
    async fn claim_fresh(
        &self,
        key: &OperationKey,
        fp: &Fingerprint,
        lease: Duration,
    ) -> toolonce::Result<Fresh>;

    /// The same with `takeover` set: an `unknown` entry is taken over.
    async fn take_over_fresh(
        &self,
        key: &OperationKey,
        fp: &Fingerprint,
        lease: Duration,
    ) -> toolonce::Result<Fresh>;
}

#[async_trait::async_trait]
impl<S: Store + ?Sized> ClaimFresh for S {
    async fn claim_fresh(
        &self,
        key: &OperationKey,
        fp: &Fingerprint,
        lease: Duration,
    ) -> toolonce::Result<Fresh> {
        let owner = OwnerToken::generate();
        Ok(
            match self
                .claim(&ClaimRequest::new(key, fp, &owner, lease))
                .await?
            {
                Claim::Won => Fresh::Won(owner),
                Claim::TookOver => panic!("a claim without takeover took over"),
                Claim::Existing(entry) => Fresh::Existing(entry),
            },
        )
    }

    async fn take_over_fresh(
        &self,
        key: &OperationKey,
        fp: &Fingerprint,
        lease: Duration,
    ) -> toolonce::Result<Fresh> {
        let owner = OwnerToken::generate();
        let request = ClaimRequest::new(key, fp, &owner, lease).takeover(true);
        Ok(match self.claim(&request).await? {
            Claim::Won | Claim::TookOver => Fresh::Won(owner),
            Claim::Existing(entry) => Fresh::Existing(entry),
        })
    }
}

pub fn won(claim: Fresh) -> OwnerToken {
    match claim {
        Fresh::Won(owner) => owner,
        Fresh::Existing(entry) => panic!("expected to win the claim, found {entry:?}"),
    }
}

pub fn existing(claim: Fresh) -> toolonce::Entry {
    match claim {
        Fresh::Existing(entry) => entry,
        Fresh::Won(_) => panic!("expected an existing entry, but won the claim"),
    }
}

/// The result a fresh claim of `key` is answered with: the entry must be there, and done.
pub async fn replayed_result<S: Store + ?Sized>(
    store: &S,
    key: &OperationKey,
    fp: &Fingerprint,
) -> serde_json::Value {
    match existing(store.claim_fresh(key, fp, LONG).await.unwrap()).state {
        EntryState::Done { result, .. } => result,
        other => panic!("expected a done entry, got {other:?}"),
    }
}

/// Asserts that an entry shows `owner` as its holder: the token itself, or, where duplicates
/// read the entry's value (Redis), the token's SHA-1 in hex, which names the holder without
/// letting the reader settle the entry.
pub fn assert_shows_owner(shown: &str, owner: &OwnerToken) {
    let digest = sha1_smol::Sha1::from(owner.as_str()).digest().to_string();
    assert!(
        shown == owner.as_str() || shown == digest,
        "the entry shows {shown:?}, neither the owner's token nor its digest"
    );
}

pub async fn first_claim_wins_and_the_second_sees_it_running(store: Arc<dyn Store>) {
    let (key, fp) = op("t");
    let owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    let entry = existing(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    assert_eq!(entry.key, key);
    assert_eq!(entry.state(), State::Running);
    assert_eq!(entry.fingerprint.as_ref(), Some(&fp));
    match &entry.state {
        EntryState::Running { owner: Some(o) } => assert_shows_owner(o, &owner),
        other => panic!("expected a running entry with its owner, got {other:?}"),
    }
    assert!(
        entry.expires_at.is_some(),
        "a running entry knows its lease expiry"
    );
}

pub async fn sixty_four_concurrent_claims_have_exactly_one_winner(store: Arc<dyn Store>) {
    for round in 0..200 {
        let (key, fp) = op("race");
        let barrier = Arc::new(tokio::sync::Barrier::new(64));
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let (store, key, fp, barrier) =
                    (store.clone(), key.clone(), fp.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    store.claim_fresh(&key, &fp, LONG).await.unwrap()
                })
            })
            .collect();
        let mut winners = 0;
        for t in tasks {
            match t.await.unwrap() {
                Fresh::Won(_) => winners += 1,
                Fresh::Existing(e) => assert_eq!(e.state(), State::Running),
            }
        }
        assert_eq!(winners, 1, "round {round}: {winners} winners");
    }
}

pub async fn a_claim_retried_with_its_own_token_wins_and_with_another_does_not(
    store: Arc<dyn Store>,
) {
    let (key, fp) = op("t");
    let owner = OwnerToken::generate();
    assert!(matches!(
        store
            .claim(&ClaimRequest::new(&key, &fp, &owner, SHORT))
            .await
            .unwrap(),
        Claim::Won
    ));
    // The retry of a claim whose reply was lost: still the caller's, and the lease is renewed
    // to the length given, so it outlives the first one.
    assert!(matches!(
        store
            .claim(&ClaimRequest::new(&key, &fp, &owner, LONG))
            .await
            .unwrap(),
        Claim::Won
    ));
    let stranger = store
        .claim(&ClaimRequest::new(&key, &fp, &OwnerToken::generate(), LONG))
        .await
        .unwrap();
    match stranger {
        Claim::Existing(entry) => match entry.state {
            EntryState::Running { owner: Some(o) } => assert_shows_owner(&o, &owner),
            other => panic!("expected the caller's running entry, got {other:?}"),
        },
        Claim::Won | Claim::TookOver => {
            panic!("a claim with another token won over a running entry")
        }
    }
    tokio::time::sleep(PAST_SHORT).await;
    assert!(
        store.get(&key).await.unwrap().is_some(),
        "the retried claim renewed the lease"
    );
    // The owner's token still settles the entry; after that, even the owner's own token is
    // answered with the settled entry, never a second win.
    assert_eq!(
        store
            .complete(&key, owner.duplicate(), &json!(1), LONG)
            .await
            .unwrap(),
        Fenced::Applied
    );
    match store
        .claim(&ClaimRequest::new(&key, &fp, &owner, LONG))
        .await
        .unwrap()
    {
        Claim::Existing(entry) => assert_eq!(entry.state(), State::Done),
        Claim::Won | Claim::TookOver => panic!("the owner's token won over its own settled entry"),
    }
}

pub async fn a_completed_entry_replays_its_result_exactly(store: Arc<dyn Store>) {
    let (key, fp) = op("t");
    let owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    let result = json!({
        "receipt": "r_1", "cents": 500, "ratio": 0.1, "big": 18446744073709551615u64,
        "neg": -9007199254740993i64, "text": "é\u{1F600}\n\"", "nested": {"list": [1, 2.5, null, true]}
    });
    assert_eq!(
        store.complete(&key, owner, &result, LONG).await.unwrap(),
        Fenced::Applied
    );
    let entry = existing(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    match entry.state {
        EntryState::Done { result: stored, .. } => assert_eq!(stored, result),
        other => panic!("expected done, got {other:?}"),
    }
    let got = store.get(&key).await.unwrap().expect("entry");
    assert_eq!(got.state(), State::Done);
    assert_eq!(got.fingerprint.as_ref(), Some(&fp));
}

pub async fn a_sticky_failure_is_replayed(store: Arc<dyn Store>) {
    let (key, fp) = op("t");
    let owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    let error = ToolError::permanent("card declined").with_detail(json!({"code": "declined"}));
    assert_eq!(
        store.fail(&key, owner, &error, Some(LONG)).await.unwrap(),
        Fenced::Applied
    );
    match existing(store.claim_fresh(&key, &fp, LONG).await.unwrap()).state {
        EntryState::Failed { error: stored, .. } => assert_eq!(stored, error),
        other => panic!("expected failed, got {other:?}"),
    }
}

pub async fn a_transient_failure_deletes_the_entry(store: Arc<dyn Store>) {
    let (key, fp) = op("t");
    let owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    let error = ToolError::transient("timeout");
    assert_eq!(
        store.fail(&key, owner, &error, None).await.unwrap(),
        Fenced::Applied
    );
    assert!(store.get(&key).await.unwrap().is_none());
    won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
}

pub async fn renew_keeps_a_running_entry_alive_past_its_first_lease(store: Arc<dyn Store>) {
    let (key, fp) = op("t");
    let owner = won(store.claim_fresh(&key, &fp, SHORT).await.unwrap());
    for _ in 0..4 {
        tokio::time::sleep(SHORT / 3).await;
        assert!(store.renew(&key, &owner, SHORT).await.unwrap());
    }
    // More than one lease has passed since the claim, yet the entry lives.
    existing(store.claim_fresh(&key, &fp, SHORT).await.unwrap());
}

pub async fn an_expired_lease_lets_a_caller_that_asks_take_over(store: Arc<dyn Store>) {
    let (key, fp) = op("t");
    let _first = won(store.claim_fresh(&key, &fp, SHORT).await.unwrap());
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(
        store.get(&key).await.unwrap().map(|e| e.state()),
        Some(State::Unknown),
        "an expired lease leaves the entry unknown, not absent"
    );
    won(store.take_over_fresh(&key, &fp, LONG).await.unwrap());
}

pub async fn a_stale_owner_can_neither_complete_renew_nor_fail_after_a_takeover(
    store: Arc<dyn Store>,
) {
    let (key, fp) = op("t");
    let stale = won(store.claim_fresh(&key, &fp, SHORT).await.unwrap());
    tokio::time::sleep(PAST_SHORT).await;
    let fresh = won(store.take_over_fresh(&key, &fp, LONG).await.unwrap());
    assert!(!store.renew(&key, &stale, LONG).await.unwrap());
    let stale_copy = OwnerToken::from_stored(stale.as_str());
    let stale_claim = OwnerToken::from_stored(stale.as_str());
    assert_eq!(
        store
            .complete(&key, stale, &json!("stale"), LONG)
            .await
            .unwrap(),
        Fenced::NotOwner
    );
    assert_eq!(
        store
            .fail(&key, stale_copy, &ToolError::transient("x"), None)
            .await
            .unwrap(),
        Fenced::NotOwner
    );
    // Nor does a re-sent claim of the stale owner win back the entry taken over.
    match store
        .claim(&ClaimRequest::new(&key, &fp, &stale_claim, LONG))
        .await
        .unwrap()
    {
        Claim::Existing(entry) => assert_eq!(entry.state(), State::Running),
        Claim::Won | Claim::TookOver => {
            panic!("the stale owner's claim won back an entry taken over")
        }
    }
    // The fresh owner's entry is untouched and still completes.
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().state(),
        State::Running
    );
    assert_eq!(
        store
            .complete(&key, fresh, &json!("fresh"), LONG)
            .await
            .unwrap(),
        Fenced::Applied
    );
}

pub async fn a_late_owner_still_records_its_outcome_when_nobody_took_over(store: Arc<dyn Store>) {
    // Complete: the tool did run, and recording that beats leaving it unknown.
    let (key, fp) = op("t");
    let owner = won(store.claim_fresh(&key, &fp, SHORT).await.unwrap());
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().state(),
        State::Unknown
    );
    assert_eq!(
        store.complete(&key, owner, &json!(1), LONG).await.unwrap(),
        Fenced::Applied
    );
    match store.get(&key).await.unwrap().unwrap().state {
        EntryState::Done { result, .. } => assert_eq!(result, json!(1)),
        other => panic!("expected done, got {other:?}"),
    }

    // Renew: a heartbeat that was late brings the entry back to running.
    let (key, fp) = op("t");
    let owner = won(store.claim_fresh(&key, &fp, SHORT).await.unwrap());
    tokio::time::sleep(PAST_SHORT).await;
    assert!(store.renew(&key, &owner, LONG).await.unwrap());
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().state(),
        State::Running
    );

    // Fail, sticky and transient.
    let (key, fp) = op("t");
    let owner = won(store.claim_fresh(&key, &fp, SHORT).await.unwrap());
    let (key2, fp2) = op("t");
    let owner2 = won(store.claim_fresh(&key2, &fp2, SHORT).await.unwrap());
    tokio::time::sleep(PAST_SHORT).await;
    let declined = ToolError::permanent("declined");
    assert_eq!(
        store
            .fail(&key, owner, &declined, Some(LONG))
            .await
            .unwrap(),
        Fenced::Applied
    );
    match store.get(&key).await.unwrap().unwrap().state {
        EntryState::Failed { error, .. } => assert_eq!(error, declined),
        other => panic!("expected failed, got {other:?}"),
    }
    assert_eq!(
        store
            .fail(&key2, owner2, &ToolError::transient("timeout"), None)
            .await
            .unwrap(),
        Fenced::Applied
    );
    assert!(store.get(&key2).await.unwrap().is_none());
}

pub async fn a_stranger_token_is_fenced_out(store: Arc<dyn Store>) {
    let (key, fp) = op("t");
    let _owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    let stranger = OwnerToken::generate();
    assert!(!store.renew(&key, &stranger, LONG).await.unwrap());
    assert_eq!(
        store
            .complete(&key, stranger, &json!(1), LONG)
            .await
            .unwrap(),
        Fenced::NotOwner
    );
    // Settling an absent key is refused too.
    let (absent, _) = op("t");
    assert_eq!(
        store
            .fail(
                &absent,
                OwnerToken::generate(),
                &ToolError::transient("x"),
                None
            )
            .await
            .unwrap(),
        Fenced::NotOwner
    );
}

pub async fn a_settled_entry_cannot_be_settled_again(store: Arc<dyn Store>) {
    let (key, fp) = op("t");
    let owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    let copy = OwnerToken::from_stored(owner.as_str());
    let copy2 = OwnerToken::from_stored(owner.as_str());
    assert_eq!(
        store
            .complete(&key, owner, &json!("first"), LONG)
            .await
            .unwrap(),
        Fenced::Applied
    );
    assert_eq!(
        store
            .complete(&key, copy, &json!("second"), LONG)
            .await
            .unwrap(),
        Fenced::NotOwner
    );
    assert_eq!(
        store
            .fail(&key, copy2, &ToolError::transient("x"), None)
            .await
            .unwrap(),
        Fenced::NotOwner
    );
    match store.get(&key).await.unwrap().unwrap().state {
        EntryState::Done { result, .. } => assert_eq!(result, json!("first")),
        other => panic!("expected done, got {other:?}"),
    }
}

pub async fn retention_expiry_makes_a_done_entry_absent(store: Arc<dyn Store>) {
    let (key, fp) = op("t");
    let owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    assert_eq!(
        store.complete(&key, owner, &json!(1), SHORT).await.unwrap(),
        Fenced::Applied
    );
    assert_eq!(store.get(&key).await.unwrap().unwrap().state(), State::Done);
    tokio::time::sleep(PAST_SHORT).await;
    assert!(store.get(&key).await.unwrap().is_none());
    won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
}

pub async fn list_pages_through_entries_and_filters_by_state(store: Arc<dyn Store>) {
    let mut done = Vec::new();
    let mut running = Vec::new();
    for i in 0..7 {
        let (key, fp) = op("list");
        let owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
        if i % 2 == 0 {
            let _ = store.complete(&key, owner, &json!(i), LONG).await.unwrap();
            done.push(key);
        } else {
            running.push(key);
        }
    }
    let (failed_key, fp) = op("list");
    let owner = won(store.claim_fresh(&failed_key, &fp, LONG).await.unwrap());
    let _ = store
        .fail(&failed_key, owner, &ToolError::permanent("no"), Some(LONG))
        .await
        .unwrap();

    let mut all = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let mut q = ListQuery::new().limit(3);
        if let Some(c) = cursor.take() {
            q = q.cursor(c);
        }
        let page = store.list(&q).await.unwrap();
        assert!(page.entries.len() <= 3);
        all.extend(page.entries.into_iter().map(|e| e.key));
        pages += 1;
        assert!(pages < 50, "paging does not end");
        match page.next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    all.sort();
    let mut expected: Vec<_> = done.iter().chain(&running).cloned().collect();
    expected.push(failed_key.clone());
    expected.sort();
    assert_eq!(all, expected, "every entry listed exactly once");

    let collect = |state| {
        let store = store.clone();
        async move {
            let mut keys = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let mut q = ListQuery::new().state(state).limit(2);
                if let Some(c) = cursor.take() {
                    q = q.cursor(c);
                }
                let page = store.list(&q).await.unwrap();
                for e in &page.entries {
                    assert_eq!(e.state(), state);
                }
                keys.extend(page.entries.into_iter().map(|e| e.key));
                match page.next {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
            keys.sort();
            keys
        }
    };
    done.sort();
    running.sort();
    assert_eq!(collect(State::Done).await, done);
    assert_eq!(collect(State::Running).await, running);
    assert_eq!(collect(State::Failed).await, vec![failed_key]);
}

pub async fn delete_removes_an_entry_whatever_its_state(store: Arc<dyn Store>) {
    let (key, fp) = op("t");
    let owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    assert!(store.delete(&key).await.unwrap());
    assert!(!store.delete(&key).await.unwrap());
    assert!(store.get(&key).await.unwrap().is_none());
    // The deleted owner is fenced out; a new caller wins.
    assert_eq!(
        store.complete(&key, owner, &json!(1), LONG).await.unwrap(),
        Fenced::NotOwner
    );
    let owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    let _ = store.complete(&key, owner, &json!(1), LONG).await.unwrap();
    assert!(store.delete(&key).await.unwrap());
    assert!(store.get(&key).await.unwrap().is_none());
}

pub async fn purge_removes_expired_entries_and_keeps_live_ones(store: Arc<dyn Store>) {
    let (live, fp) = op("t");
    let owner = won(store.claim_fresh(&live, &fp, LONG).await.unwrap());
    let _ = store.complete(&live, owner, &json!(1), LONG).await.unwrap();
    let (expiring, fp2) = op("t");
    let owner = won(store.claim_fresh(&expiring, &fp2, LONG).await.unwrap());
    let _ = store
        .complete(&expiring, owner, &json!(2), SHORT)
        .await
        .unwrap();
    // A lease and an unknown retention that both end within `SHORT`: gone by `PAST_SHORT`.
    let (lapsed, fp3) = op("t");
    let lapsed_owner = OwnerToken::generate();
    let request = ClaimRequest::new(&lapsed, &fp3, &lapsed_owner, SHORT / 2).retention(SHORT / 2);
    assert!(matches!(store.claim(&request).await.unwrap(), Claim::Won));
    tokio::time::sleep(PAST_SHORT).await;
    let purged = store.purge_expired().await.unwrap();
    assert!(
        purged <= 2,
        "purged {purged}, but only two entries had expired"
    );
    assert!(store.get(&live).await.unwrap().is_some());
    assert!(store.get(&expiring).await.unwrap().is_none());
    assert!(store.get(&lapsed).await.unwrap().is_none());
    let listed = store.list(&ListQuery::new()).await.unwrap();
    assert_eq!(
        listed
            .entries
            .iter()
            .map(|e| e.key.clone())
            .collect::<Vec<_>>(),
        vec![live]
    );
    assert_eq!(
        store.purge_expired().await.unwrap(),
        0,
        "nothing left to purge"
    );
}

pub async fn get_of_an_unknown_key_is_none(store: Arc<dyn Store>) {
    let (key, _) = op("t");
    assert!(store.get(&key).await.unwrap().is_none());
    assert!(!store.delete(&key).await.unwrap());
    assert!(
        !store
            .renew(&key, &OwnerToken::generate(), LONG)
            .await
            .unwrap()
    );
}

pub async fn a_running_entry_reports_a_lease_expiry_in_the_future(store: Arc<dyn Store>) {
    let (key, fp) = op("t");
    let _owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    let entry = store.get(&key).await.unwrap().unwrap();
    let expires = entry.expires_at.expect("expiry known");
    let now = std::time::SystemTime::now();
    // Generous bounds: the store's clock may differ a little from ours.
    assert!(
        expires > now + Duration::from_secs(30),
        "{expires:?} vs {now:?}"
    );
    assert!(
        expires < now + Duration::from_secs(90),
        "{expires:?} vs {now:?}"
    );
    let started = entry.started_at;
    assert!(started < now + Duration::from_secs(5) && started > now - Duration::from_secs(30));
}

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
async fn unknown_entry(store: &dyn Store, name: &str) -> (OperationKey, Fingerprint, OwnerToken) {
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

pub async fn resolve_done_settles_an_unknown_entry_for_duplicates(store: Arc<dyn Store>) {
    let (key, fp, owner) = unknown_entry(&*store, "t").await;
    let value = json!({"receipt": "r_1", "by": "operator"});
    assert_eq!(
        store
            .resolve(&key, &Resolution::Done(value.clone()), LONG)
            .await
            .unwrap(),
        Resolved::Applied
    );
    let entry = store.get(&key).await.unwrap().unwrap();
    match &entry.state {
        EntryState::Done { result, .. } => assert_eq!(result, &value),
        other => panic!("expected done, got {other:?}"),
    }
    assert!(entry.settled_at.is_some(), "the settle time is recorded");
    match existing(store.take_over_fresh(&key, &fp, LONG).await.unwrap()).state {
        EntryState::Done { result, .. } => assert_eq!(result, value),
        other => panic!("expected done, got {other:?}"),
    }
    // The late owner can no longer write over the operator's answer.
    assert_eq!(
        store
            .complete(&key, owner, &json!("late"), LONG)
            .await
            .unwrap(),
        Fenced::NotOwner
    );
}

pub async fn resolve_failed_settles_a_stuck_running_entry(store: Arc<dyn Store>) {
    let (key, fp) = op("t");
    let owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    let error = ToolError::permanent("refunded by hand").with_detail(json!({"ticket": 7}));
    assert_eq!(
        store
            .resolve(&key, &Resolution::Failed(error.clone()), LONG)
            .await
            .unwrap(),
        Resolved::Applied
    );
    match existing(store.claim_fresh(&key, &fp, LONG).await.unwrap()).state {
        EntryState::Failed { error: stored, .. } => assert_eq!(stored, error),
        other => panic!("expected failed, got {other:?}"),
    }
    assert!(!store.renew(&key, &owner, LONG).await.unwrap());
    assert_eq!(
        store
            .fail(&key, owner, &ToolError::transient("x"), None)
            .await
            .unwrap(),
        Fenced::NotOwner
    );
}

pub async fn resolve_release_forgets_the_entry_so_the_next_call_runs(store: Arc<dyn Store>) {
    let (key, fp, owner) = unknown_entry(&*store, "t").await;
    assert_eq!(
        store
            .resolve(&key, &Resolution::Release, LONG)
            .await
            .unwrap(),
        Resolved::Applied
    );
    assert!(store.get(&key).await.unwrap().is_none());
    let fresh = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    assert_eq!(store.get(&key).await.unwrap().unwrap().attempts, 1);
    assert_eq!(
        store
            .complete(&key, owner, &json!("late"), LONG)
            .await
            .unwrap(),
        Fenced::NotOwner
    );
    assert_eq!(
        store
            .complete(&key, fresh, &json!("fresh"), LONG)
            .await
            .unwrap(),
        Fenced::Applied
    );
}

pub async fn resolve_leaves_an_entry_that_settled_meanwhile_alone(store: Arc<dyn Store>) {
    let (key, fp) = op("t");
    let owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    assert_eq!(
        store
            .complete(&key, owner, &json!("real"), LONG)
            .await
            .unwrap(),
        Fenced::Applied
    );
    for resolution in [
        Resolution::Done(json!("operator")),
        Resolution::Failed(ToolError::permanent("operator")),
        Resolution::Release,
    ] {
        match store.resolve(&key, &resolution, LONG).await.unwrap() {
            Resolved::Settled(entry) => match entry.state {
                EntryState::Done { result, .. } => assert_eq!(result, json!("real")),
                other => panic!("expected the settled entry, got {other:?}"),
            },
            other => panic!("{resolution:?} over a settled entry answered {other:?}"),
        }
    }
    match store.get(&key).await.unwrap().unwrap().state {
        EntryState::Done { result, .. } => assert_eq!(result, json!("real")),
        other => panic!("expected done, got {other:?}"),
    }

    let (key, fp) = op("t");
    let owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    let declined = ToolError::permanent("declined");
    let _ = store
        .fail(&key, owner, &declined, Some(LONG))
        .await
        .unwrap();
    match store
        .resolve(&key, &Resolution::Release, LONG)
        .await
        .unwrap()
    {
        Resolved::Settled(entry) => assert_eq!(entry.state(), State::Failed),
        other => panic!("release over a failed entry answered {other:?}"),
    }
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().state(),
        State::Failed
    );
}

pub async fn resolve_of_an_absent_key_is_absent(store: Arc<dyn Store>) {
    let (key, _) = op("t");
    for resolution in [
        Resolution::Done(json!(1)),
        Resolution::Failed(ToolError::permanent("x")),
        Resolution::Release,
    ] {
        assert_eq!(
            store.resolve(&key, &resolution, LONG).await.unwrap(),
            Resolved::Absent
        );
    }
    assert!(
        store.get(&key).await.unwrap().is_none(),
        "nothing was written"
    );
}

pub async fn an_entry_records_what_it_is_how_often_it_started_and_when_it_settled(
    store: Arc<dyn Store>,
) {
    let (key, fp) = op("t");
    let about = About::new(unique_scope("meta"), "send_email").detail("smtp.example.com");
    let owner = won(claim_about(&*store, &key, &fp, &about, LONG, LONG, false).await);
    let running = store.get(&key).await.unwrap().unwrap();
    assert_eq!(running.about, about);
    assert_eq!(running.attempts, 1);
    let first = running.first_started_at.expect("first start recorded");
    assert_eq!(
        first, running.started_at,
        "the first attempt's start is the first start"
    );
    assert_eq!(running.settled_at, None, "not settled yet");
    // A duplicate sees the same.
    let seen = existing(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    assert_eq!(seen.about, about);
    assert_eq!(seen.attempts, 1);

    assert_eq!(
        store
            .complete(&key, owner, &json!("sent"), LONG)
            .await
            .unwrap(),
        Fenced::Applied
    );
    let done = store.get(&key).await.unwrap().unwrap();
    assert_eq!(done.about, about);
    assert_eq!(done.attempts, 1);
    assert_eq!(done.first_started_at, Some(first));
    let settled = done.settled_at.expect("the settle time is recorded");
    assert!(settled >= first, "{settled:?} before {first:?}");
    let listed = store
        .list(&ListQuery::new().scope(about.scope.clone().unwrap()))
        .await
        .unwrap();
    assert_eq!(listed.entries.len(), 1);
    assert_eq!(listed.entries[0].about, about);
    assert_eq!(listed.entries[0].settled_at, Some(settled));

    // A failure records its settle time too.
    let (key, fp) = op("t");
    let owner = won(claim_about(&*store, &key, &fp, &about, LONG, LONG, false).await);
    let _ = store
        .fail(&key, owner, &ToolError::permanent("no"), Some(LONG))
        .await
        .unwrap();
    let failed = store.get(&key).await.unwrap().unwrap();
    assert!(failed.settled_at.is_some());
    assert_eq!(failed.about, about);
}

pub async fn list_filters_by_state_scope_and_tool(store: Arc<dyn Store>) {
    let (s1, s2) = (unique_scope("s1"), unique_scope("s2"));
    let mut made: Vec<(OperationKey, String, &str, State)> = Vec::new();
    // Unknown entries first: their short leases expire while the rest are written.
    for (scope, tool) in [(&s1, "email"), (&s2, "charge")] {
        let (key, fp) = op("list");
        let about = About::new(scope.clone(), tool);
        let _ = won(claim_about(&*store, &key, &fp, &about, SHORT, LONG, false).await);
        made.push((key, scope.clone(), tool, State::Unknown));
    }
    for (i, (scope, tool)) in [
        (&s1, "email"),
        (&s1, "charge"),
        (&s2, "email"),
        (&s2, "charge"),
        (&s1, "email"),
        (&s2, "charge"),
    ]
    .into_iter()
    .enumerate()
    {
        let (key, fp) = op("list");
        let about = About::new(scope.clone(), tool);
        let owner = won(claim_about(&*store, &key, &fp, &about, LONG, LONG, false).await);
        let state = match i % 3 {
            0 => State::Running,
            1 => {
                let _ = store.complete(&key, owner, &json!(i), LONG).await.unwrap();
                State::Done
            }
            _ => {
                let error = ToolError::permanent("no");
                let _ = store.fail(&key, owner, &error, Some(LONG)).await.unwrap();
                State::Failed
            }
        };
        made.push((key, scope.clone(), tool, state));
    }
    tokio::time::sleep(PAST_SHORT).await;

    let collect = |query: ListQuery| {
        let store = store.clone();
        async move {
            let mut keys = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let mut q = query.clone().limit(2);
                if let Some(c) = cursor.take() {
                    q = q.cursor(c);
                }
                let page = store.list(&q).await.unwrap();
                keys.extend(page.entries.into_iter().map(|e| e.key));
                match page.next {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
            keys.sort();
            keys
        }
    };
    let expect = |f: &dyn Fn(&str, &str, State) -> bool| {
        let mut keys: Vec<_> = made
            .iter()
            .filter(|(_, scope, tool, state)| f(scope, tool, *state))
            .map(|(k, ..)| k.clone())
            .collect();
        keys.sort();
        keys
    };
    assert_eq!(
        collect(ListQuery::new().scope(s1.clone())).await,
        expect(&|scope, _, _| scope == s1)
    );
    assert_eq!(
        collect(ListQuery::new().scope(s2.clone()).tool("charge")).await,
        expect(&|scope, tool, _| scope == s2 && tool == "charge")
    );
    for state in [State::Running, State::Done, State::Failed, State::Unknown] {
        for scope in [&s1, &s2] {
            assert_eq!(
                collect(ListQuery::new().scope(scope.clone()).state(state)).await,
                expect(&|sc, _, st| sc == scope && st == state),
                "{state} in {scope}"
            );
        }
    }
    assert_eq!(
        collect(
            ListQuery::new()
                .scope(s1.clone())
                .tool("email")
                .state(State::Unknown)
        )
        .await,
        expect(&|sc, tool, st| sc == s1 && tool == "email" && st == State::Unknown)
    );
    assert!(
        collect(ListQuery::new().scope(s1.clone()).tool("nothing"))
            .await
            .is_empty()
    );
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

/// Runs the whole suite against a backend. `$make` is an async expression that gives a fresh,
/// isolated `Arc<dyn Store>` each time it is evaluated.
#[macro_export]
macro_rules! store_conformance {
    ($make:expr) => {
        $crate::store_conformance!(@tests $make;
            first_claim_wins_and_the_second_sees_it_running,
            sixty_four_concurrent_claims_have_exactly_one_winner,
            a_claim_retried_with_its_own_token_wins_and_with_another_does_not,
            a_completed_entry_replays_its_result_exactly,
            a_sticky_failure_is_replayed,
            a_transient_failure_deletes_the_entry,
            renew_keeps_a_running_entry_alive_past_its_first_lease,
            an_expired_lease_lets_a_caller_that_asks_take_over,
            a_stale_owner_can_neither_complete_renew_nor_fail_after_a_takeover,
            a_late_owner_still_records_its_outcome_when_nobody_took_over,
            a_stranger_token_is_fenced_out,
            a_settled_entry_cannot_be_settled_again,
            retention_expiry_makes_a_done_entry_absent,
            list_pages_through_entries_and_filters_by_state,
            delete_removes_an_entry_whatever_its_state,
            purge_removes_expired_entries_and_keeps_live_ones,
            get_of_an_unknown_key_is_none,
            a_running_entry_reports_a_lease_expiry_in_the_future,
            an_expired_lease_leaves_the_entry_unknown,
            a_claim_without_takeover_sees_an_unknown_entry,
            a_takeover_wins_an_unknown_entry_counts_the_attempt_and_keeps_the_first_start,
            a_takeover_never_applies_to_a_live_or_settled_entry,
            a_takeover_with_other_arguments_is_refused,
            its_own_token_reclaims_an_unknown_entry,
            an_unknown_entry_is_kept_for_its_retention_after_the_lease_then_absent,
            resolve_done_settles_an_unknown_entry_for_duplicates,
            resolve_failed_settles_a_stuck_running_entry,
            resolve_release_forgets_the_entry_so_the_next_call_runs,
            resolve_leaves_an_entry_that_settled_meanwhile_alone,
            resolve_of_an_absent_key_is_absent,
            an_entry_records_what_it_is_how_often_it_started_and_when_it_settled,
            list_filters_by_state_scope_and_tool,
            concurrent_takeovers_of_an_unknown_entry_have_exactly_one_winner,
        );
    };
    (@tests $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let store: ::std::sync::Arc<dyn ::toolonce::Store> = $make.await;
                conformance::$name(store).await;
            }
        )*
    };
}
