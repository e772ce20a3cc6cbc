//! `resolve` acts only on the attempt its caller saw, and only once its lease has passed: a
//! live owner's claim, an entry taken over or claimed again since it was read, and the second
//! of two operators are refused, with nothing written.

use super::*;

fn resolutions() -> [Resolution; 3] {
    [
        Resolution::Done(json!("operator")),
        Resolution::Failed(ToolError::permanent("operator")),
        Resolution::Release,
    ]
}

/// Asserts that `key` still holds a running entry its `owner` can settle.
async fn still_owned(store: &dyn Store, key: &OperationKey, owner: OwnerToken) {
    let entry = store
        .get(key)
        .await
        .unwrap()
        .expect("the claim is still there");
    assert_eq!(entry.state(), State::Running, "{entry:?}");
    assert_eq!(
        store
            .complete(key, owner, &json!("mine"), LONG)
            .await
            .unwrap(),
        Fenced::Applied,
        "the owner still holds its claim"
    );
}

pub async fn resolve_of_a_live_running_claim_is_refused_and_says_when_its_lease_ends(
    store: Arc<dyn Store>,
) {
    let (key, fp) = op("t");
    let owner = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    let seen = seen(&*store, &key).await;
    for resolution in resolutions() {
        match store.resolve(&key, &seen, &resolution, LONG).await.unwrap() {
            Resolved::Live(entry) => {
                assert_eq!(entry.state(), State::Running);
                let ends = entry.expires_at.expect("a live claim's lease end");
                let left = ends
                    .duration_since(std::time::SystemTime::now())
                    .unwrap_or_default();
                assert!(
                    left > Duration::from_secs(30),
                    "the lease ends in {left:?}, expected about a minute"
                );
            }
            other => panic!("{resolution:?} of a live claim answered {other:?}"),
        }
    }
    still_owned(&*store, &key, owner).await;
}

pub async fn an_unknown_entry_renewed_by_its_owner_after_it_was_seen_is_refused_as_live(
    store: Arc<dyn Store>,
) {
    let (key, _fp, owner) = unknown_entry(&*store, "t").await;
    let seen = seen(&*store, &key).await;
    // The owner was only slow: its heartbeat comes back and renews the lease.
    assert!(store.renew(&key, &owner, LONG).await.unwrap());
    for resolution in resolutions() {
        match store.resolve(&key, &seen, &resolution, LONG).await.unwrap() {
            Resolved::Live(entry) => assert_eq!(entry.state(), State::Running),
            other => panic!("{resolution:?} of a renewed claim answered {other:?}"),
        }
    }
    still_owned(&*store, &key, owner).await;
}

pub async fn resolve_with_a_stale_seen_is_refused_after_a_takeover(store: Arc<dyn Store>) {
    let (key, fp, _crashed) = unknown_entry(&*store, "t").await;
    let stale = seen(&*store, &key).await;
    // Between the operator's read and its resolve, a duplicate under `rerun` takes over.
    let taker = won(store.take_over_fresh(&key, &fp, SHORT).await.unwrap());
    for resolution in resolutions() {
        match store
            .resolve(&key, &stale, &resolution, LONG)
            .await
            .unwrap()
        {
            Resolved::Changed(entry) => assert_eq!(entry.attempts, 2, "{entry:?}"),
            other => panic!("{resolution:?} after a takeover answered {other:?}"),
        }
        // Forced makes no difference: it is still not the attempt seen.
        let forced = stale.clone().even_if_live();
        match store
            .resolve(&key, &forced, &resolution, LONG)
            .await
            .unwrap()
        {
            Resolved::Changed(_) => {}
            other => panic!("forced {resolution:?} after a takeover answered {other:?}"),
        }
    }
    // Once the taker's lease runs out too, the entry is unknown again, and still not the
    // attempt seen.
    until_unknown(&*store, &key).await;
    match store
        .resolve(&key, &stale, &Resolution::Release, LONG)
        .await
        .unwrap()
    {
        Resolved::Changed(entry) => assert_eq!(entry.state(), State::Unknown),
        other => panic!("a release of an earlier attempt answered {other:?}"),
    }
    let entry = store.get(&key).await.unwrap().expect("nothing was deleted");
    assert_eq!(entry.attempts, 2);
    // The taker's own late outcome still records.
    assert_eq!(
        store
            .complete(&key, taker, &json!("ran"), LONG)
            .await
            .unwrap(),
        Fenced::Applied
    );
}

pub async fn a_second_operator_never_releases_the_claim_made_after_the_first_released(
    store: Arc<dyn Store>,
) {
    let (key, fp, _crashed) = unknown_entry(&*store, "t").await;
    // Both operators look at the same unknown entry.
    let first = seen(&*store, &key).await;
    let second = seen(&*store, &key).await;
    assert_eq!(
        store
            .resolve(&key, &first, &Resolution::Release, LONG)
            .await
            .unwrap(),
        Resolved::Applied
    );
    // The agent's retry runs it: a new claim, attempt 1 again, another owner.
    let retry = won(store.claim_fresh(&key, &fp, LONG).await.unwrap());
    for resolution in resolutions() {
        match store
            .resolve(&key, &second, &resolution, LONG)
            .await
            .unwrap()
        {
            Resolved::Changed(entry) => assert_eq!(entry.state(), State::Running),
            other => panic!("the second operator's {resolution:?} answered {other:?}"),
        }
    }
    // So no duplicate runs beside the retry: it still holds the key.
    assert!(matches!(
        store.claim_fresh(&key, &fp, LONG).await.unwrap(),
        Fresh::Existing(_)
    ));
    still_owned(&*store, &key, retry).await;
}

pub async fn operators_racing_to_settle_one_unknown_entry_apply_once_and_spare_the_new_claim(
    store: Arc<dyn Store>,
) {
    for round in 0..3 {
        let (key, fp, _crashed) = unknown_entry(&*store, "race").await;
        let seen = seen(&*store, &key).await;
        let barrier = Arc::new(tokio::sync::Barrier::new(9));
        let operators: Vec<_> = (0..8)
            .map(|i| {
                let (store, key, seen, barrier) =
                    (store.clone(), key.clone(), seen.clone(), barrier.clone());
                tokio::spawn(async move {
                    let resolution = if i % 2 == 0 {
                        Resolution::Release
                    } else {
                        Resolution::Done(json!({"operator": i}))
                    };
                    barrier.wait().await;
                    store.resolve(&key, &seen, &resolution, LONG).await.unwrap()
                })
            })
            .collect();
        // The agent retries throughout: a release lets it claim, and nothing may then take
        // its claim away.
        let agent = {
            let (store, key, fp, barrier) =
                (store.clone(), key.clone(), fp.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                for _ in 0..200 {
                    if let Fresh::Won(owner) = store.claim_fresh(&key, &fp, LONG).await.unwrap() {
                        return Some(owner);
                    }
                    if store
                        .get(&key)
                        .await
                        .unwrap()
                        .is_some_and(|e| matches!(e.state(), State::Done | State::Failed))
                    {
                        return None;
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                None
            })
        };
        let mut applied = 0;
        for t in operators {
            match t.await.unwrap() {
                Resolved::Applied => applied += 1,
                Resolved::Absent | Resolved::Settled(_) | Resolved::Changed(_) => {}
                other => panic!("round {round}: an operator was answered {other:?}"),
            }
        }
        assert_eq!(applied, 1, "round {round}: {applied} operators acted");
        let entry = store.get(&key).await.unwrap();
        match agent.await.unwrap() {
            // The agent's claim survived every other operator: it is still its to settle.
            Some(owner) => still_owned(&*store, &key, owner).await,
            // A settle won: the entry is that record, and the agent never ran.
            None => assert!(
                entry.is_some_and(|e| matches!(e.state(), State::Done)),
                "round {round}: the agent neither ran nor found the record"
            ),
        }
    }
}
