//! Operators racing to settle one unknown entry while the agent retries: exactly one applies,
//! and a release lets the agent claim with nothing taking its claim away. Code, not a store
//! case (tests/data/store_cases/README.md): what it checks depends on which racer won.

use super::*;

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
