//! `resolve`: an operator settles or releases an entry.

use super::*;

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
