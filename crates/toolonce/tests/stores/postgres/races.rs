//! Races the claim function resolves on the server.

use super::*;

/// A claim that takes over an `unknown` entry (a policy that reruns), with a fresh token; it
/// is only ever called on an existing entry, so it never simply wins.
async fn claim_takeover(
    store: &dyn Store,
    key: &key::OperationKey,
    fp: &key::Fingerprint,
    lease: Duration,
) -> Fresh {
    let owner = OwnerToken::generate();
    match store
        .claim(&ClaimRequest::new(key, fp, &owner, lease).takeover(true))
        .await
        .unwrap()
    {
        Claim::TookOver => Fresh::Won(owner),
        Claim::Existing(entry) => Fresh::Existing(entry),
        other => panic!("won an existing entry without taking it over: {other:?}"),
    }
}

/// Before `unknown`, an expired lease made the entry absent and any claim took it; now it is
/// `unknown`, and only claims that ask for a takeover race for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_takeovers_on_a_pool_of_connections_have_one_winner_and_fence_the_old_owner() {
    let store = fresh_store().await;
    for round in 0..50 {
        let (key, fp) = conformance::op("takeover");
        let stale = conformance::won(
            store
                .claim_fresh(&key, &fp, Duration::from_millis(1))
                .await
                .unwrap(),
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
        let barrier = Arc::new(tokio::sync::Barrier::new(32));
        let tasks: Vec<_> = (0..32)
            .map(|_| {
                let (store, key, fp, barrier) =
                    (store.clone(), key.clone(), fp.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    claim_takeover(&*store, &key, &fp, conformance::LONG).await
                })
            })
            .collect();
        let mut winners = Vec::new();
        let mut seen = Vec::new();
        for t in tasks {
            match t.await.unwrap() {
                Fresh::Won(owner) => winners.push(owner.as_str().to_owned()),
                Fresh::Existing(e) => match e.state {
                    toolonce::EntryState::Running { owner: Some(o) } => seen.push(o),
                    other => panic!("round {round}: {other:?}"),
                },
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {} winners", winners.len());
        assert!(
            seen.iter().all(|o| *o == winners[0]),
            "round {round}: a loser saw the stale owner"
        );
        let entry = store.get(&key).await.unwrap().unwrap();
        assert_eq!(entry.attempts, 2, "round {round}: one takeover");
        assert_eq!(
            store
                .complete(&key, stale, &json!("late"), conformance::LONG)
                .await
                .unwrap(),
            toolonce::Fenced::NotOwner,
            "round {round}: the owner that was taken over cannot settle"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_racing_a_transient_failure_never_win_without_their_entry_written() {
    let store = fresh_store().await;
    for round in 0..50 {
        let (key, fp) = conformance::op("vanish");
        let first = conformance::won(
            store
                .claim_fresh(&key, &fp, conformance::LONG)
                .await
                .unwrap(),
        );
        let first_owner = first.as_str().to_owned();
        let barrier = Arc::new(tokio::sync::Barrier::new(17));
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let (store, key, fp, barrier) =
                    (store.clone(), key.clone(), fp.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    store
                        .claim_fresh(&key, &fp, conformance::LONG)
                        .await
                        .unwrap()
                })
            })
            .collect();
        barrier.wait().await;
        let failed = store
            .fail(
                &key,
                first,
                &toolonce::ToolError::transient("timeout"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(failed, toolonce::Fenced::Applied);
        let mut winners = Vec::new();
        let mut seen = Vec::new();
        for t in tasks {
            match t.await.unwrap() {
                Fresh::Won(owner) => winners.push(owner),
                Fresh::Existing(e) => match e.state {
                    toolonce::EntryState::Running { owner: Some(o) } => seen.push(o),
                    other => panic!("round {round}: {other:?}"),
                },
            }
        }
        assert!(
            winners.len() <= 1,
            "round {round}: {} winners",
            winners.len()
        );
        let winner = winners.pop();
        let winner_name = winner.as_ref().map(|w| w.as_str().to_owned());
        for o in &seen {
            assert!(
                *o == first_owner || Some(o) == winner_name.as_ref(),
                "round {round}: a loser saw an owner that never won: {o}"
            );
        }
        match winner {
            // The winner's entry is really there, and it can settle it.
            Some(owner) => assert_eq!(
                store
                    .complete(&key, owner, &json!(round), conformance::LONG)
                    .await
                    .unwrap(),
                toolonce::Fenced::Applied,
                "round {round}"
            ),
            // Everybody claimed before the delete: the key is free now.
            None => assert!(store.get(&key).await.unwrap().is_none(), "round {round}"),
        }
    }
}
