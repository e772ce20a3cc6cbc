//! `resolve`: an operator settles or releases the entry it saw (its fences: resolve_fenced.rs).

use super::*;

/// What an operator sees of `key` before it resolves it: the live entry's attempt, which must
/// be unsettled.
pub async fn seen(store: &dyn Store, key: &OperationKey) -> Seen {
    let entry = store
        .get(key)
        .await
        .unwrap()
        .expect("a live entry to look at");
    Seen::of(&entry).unwrap_or_else(|| panic!("expected an unsettled entry, got {entry:?}"))
}

/// What an operator saw of a settled entry, as it would have seen it while it ran: an
/// attempt that no longer exists as such.
pub async fn seen_while_running(store: &dyn Store, key: &OperationKey) -> Seen {
    seen(store, key).await.even_if_live()
}

pub async fn resolve_done_settles_an_unknown_entry_for_duplicates(store: Arc<dyn Store>) {
    let (key, fp, owner) = unknown_entry(&*store, "t").await;
    let value = json!({"receipt": "r_1", "by": "operator"});
    let seen = seen(&*store, &key).await;
    assert_eq!(
        store
            .resolve(&key, &seen, &Resolution::Done(value.clone()), LONG)
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

pub async fn a_forced_resolve_failed_settles_the_stuck_running_claim_it_saw(store: Arc<dyn Store>) {
    let (key, fp) = op("t");
    let owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    let error = ToolError::permanent("refunded by hand").with_detail(json!({"ticket": 7}));
    let seen = seen(&*store, &key).await.even_if_live();
    assert_eq!(
        store
            .resolve(&key, &seen, &Resolution::Failed(error.clone()), LONG)
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
    let seen = seen(&*store, &key).await;
    assert_eq!(
        store
            .resolve(&key, &seen, &Resolution::Release, LONG)
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
    let seen = seen_while_running(&*store, &key).await;
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
        match store.resolve(&key, &seen, &resolution, LONG).await.unwrap() {
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
    let seen = seen_while_running(&*store, &key).await;
    let declined = ToolError::permanent("declined");
    let _ = store
        .fail(&key, owner, &declined, Some(LONG))
        .await
        .unwrap();
    match store
        .resolve(&key, &seen, &Resolution::Release, LONG)
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
    let (key, fp) = op("t");
    // What an operator saw of another key's entry: the attempt does not matter to an absent key.
    let (other, _) = op("t");
    let _owner = won(store.claim_fresh(&other, &fp, LONG).await.unwrap());
    let seen = seen_while_running(&*store, &other).await;
    for resolution in [
        Resolution::Done(json!(1)),
        Resolution::Failed(ToolError::permanent("x")),
        Resolution::Release,
    ] {
        assert_eq!(
            store.resolve(&key, &seen, &resolution, LONG).await.unwrap(),
            Resolved::Absent
        );
    }
    assert!(
        store.get(&key).await.unwrap().is_none(),
        "nothing was written"
    );
}
