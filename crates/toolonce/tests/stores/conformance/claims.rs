//! Claims, settling and fencing: who wins, what a duplicate sees, who may write.

use super::*;

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
