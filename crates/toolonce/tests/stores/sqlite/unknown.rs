//! `unknown` on SQLite, beyond the conformance suite.

use super::*;

/// The lease deadline and the end of keeping of `key`'s row, as stored.
fn stored_times(path: &Path, key: &OperationKey) -> (Option<i64>, i64) {
    raw(path)
        .query_row(
            "SELECT lease_until, kept_until FROM toolonce_entries WHERE key = ?1",
            [key.as_str()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
}

#[tokio::test]
async fn an_unknown_entry_is_kept_for_its_retention_then_absent_and_purged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("retention.db");
    let store = SqliteStore::open(&path).unwrap();
    let (key, fp) = conformance::op("retention");
    let owner = OwnerToken::generate();
    let req = ClaimRequest::new(&key, &fp, &owner, conformance::SHORT)
        .retention(Duration::from_millis(1_500));
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
    let (lease, kept) = stored_times(&path, &key);
    assert_eq!(kept - lease.unwrap(), 1_500);
    tokio::time::sleep(conformance::PAST_SHORT).await;
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().state(),
        State::Unknown
    );
    assert_eq!(store.purge_expired().await.unwrap(), 0);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(store.get(&key).await.unwrap().is_none());
    assert_eq!(store.purge_expired().await.unwrap(), 1);
}

#[tokio::test]
async fn a_renewal_keeps_the_row_as_long_after_the_new_lease_as_the_claim_asked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("renew.db");
    let store = SqliteStore::open(&path).unwrap();
    let (key, fp) = conformance::op("renew");
    let owner = OwnerToken::generate();
    let req = ClaimRequest::new(&key, &fp, &owner, conformance::SHORT)
        .retention(Duration::from_secs(3_600));
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
    let (first_lease, _) = stored_times(&path, &key);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(store.renew(&key, &owner, conformance::LONG).await.unwrap());
    let (lease, kept) = stored_times(&path, &key);
    assert!(lease.unwrap() > first_lease.unwrap());
    assert_eq!(kept - lease.unwrap(), 3_600_000);
    // Saturating instead of overflowing.
    assert!(store.renew(&key, &owner, Duration::MAX).await.unwrap());
    assert_eq!(stored_times(&path, &key), (Some(i64::MAX), i64::MAX));
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().state(),
        State::Running
    );
}

#[tokio::test]
async fn a_takeover_with_other_arguments_under_the_same_key_is_not_granted() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("takeover.db")).unwrap();
    let (key, fp) = conformance::op("takeover");
    let (_, other_fp) = conformance::op("takeover");
    let first = OwnerToken::generate();
    let req = ClaimRequest::new(&key, &fp, &first, conformance::SHORT);
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
    tokio::time::sleep(conformance::PAST_SHORT).await;
    let stranger = OwnerToken::generate();
    let req = ClaimRequest::new(&key, &other_fp, &stranger, conformance::LONG).takeover(true);
    match store.claim(&req).await.unwrap() {
        Claim::Existing(entry) => {
            assert_eq!(entry.state(), State::Unknown);
            assert!(!entry.matches(&other_fp));
        }
        other => panic!("took over another operation's unknown entry: {other:?}"),
    }
    let taker = OwnerToken::generate();
    let req = ClaimRequest::new(&key, &fp, &taker, conformance::LONG).takeover(true);
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::TookOver));
    // Re-sent after a lost reply: the caller's own entry now, so a plain win.
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
    let entry = store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        entry.state,
        EntryState::Running {
            owner: Some(taker.as_str().into())
        }
    );
    assert_eq!(entry.attempts, 2);
}

/// Takeovers race for one `unknown` entry from two handles on the file (as two processes
/// would), inline and on the connection threads: exactly one wins, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_takeovers_of_one_unknown_entry_have_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("takeovers.db");
    let stores = [
        Arc::new(SqliteStore::open(&path).unwrap()),
        Arc::new(SqliteStore::open(&path).unwrap()),
    ];
    let mut keys = Vec::new();
    for round in 0..10 {
        let (key, fp) = conformance::op(&format!("takeover{round}"));
        let first = OwnerToken::generate();
        let req = ClaimRequest::new(&key, &fp, &first, Duration::from_millis(100));
        assert!(matches!(stores[0].claim(&req).await.unwrap(), Claim::Won));
        keys.push((key, fp));
    }
    tokio::time::sleep(conformance::PAST_SHORT).await;
    for (round, (key, fp)) in keys.into_iter().enumerate() {
        let barrier = Arc::new(tokio::sync::Barrier::new(16));
        let tasks: Vec<_> = (0..16)
            .map(|i| {
                let (store, key, fp, barrier) = (
                    stores[i % 2].clone(),
                    key.clone(),
                    fp.clone(),
                    barrier.clone(),
                );
                tokio::spawn(async move {
                    let owner = OwnerToken::generate();
                    barrier.wait().await;
                    let req =
                        ClaimRequest::new(&key, &fp, &owner, conformance::LONG).takeover(true);
                    match store.claim(&req).await.unwrap() {
                        Claim::TookOver => true,
                        Claim::Existing(_) => false,
                        other => panic!("a takeover of another's entry answered {other:?}"),
                    }
                })
            })
            .collect();
        let mut won = 0;
        for task in tasks {
            won += usize::from(task.await.unwrap());
        }
        assert_eq!(won, 1, "round {round}");
        let entry = stores[0].get(&key).await.unwrap().unwrap();
        assert_eq!((entry.state(), entry.attempts), (State::Running, 2));
    }
}

/// An operator's resolve and the late owner's complete race for one `unknown` entry: exactly
/// one of them applies, and the entry holds what that one wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resolve_racing_the_late_owner_lets_exactly_one_settle() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resolve-race.db");
    let owner_side = Arc::new(SqliteStore::open(&path).unwrap());
    let operator = Arc::new(SqliteStore::open(&path).unwrap());
    for round in 0..20 {
        let (key, fp) = conformance::op(&format!("race{round}"));
        let owner = OwnerToken::generate();
        let req = ClaimRequest::new(&key, &fp, &owner, Duration::from_millis(50));
        assert!(matches!(owner_side.claim(&req).await.unwrap(), Claim::Won));
        tokio::time::sleep(Duration::from_millis(80)).await;
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let late = {
            let (store, key, barrier) = (owner_side.clone(), key.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .complete(&key, owner, &json!("by the owner"), conformance::LONG)
                    .await
                    .unwrap()
            })
        };
        // The operator looked at the entry before it raced the late owner.
        let seen = conformance::seen_while_running(&*operator, &key).await;
        let resolve = {
            let (store, key) = (operator.clone(), key.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .resolve(
                        &key,
                        &seen,
                        &Resolution::Done(json!("by the operator")),
                        conformance::LONG,
                    )
                    .await
                    .unwrap()
            })
        };
        let (late, resolve) = (late.await.unwrap(), resolve.await.unwrap());
        let stored = match operator.get(&key).await.unwrap().unwrap().state {
            EntryState::Done { result, .. } => result,
            other => panic!("expected done, got {other:?}"),
        };
        match (late, resolve) {
            (Fenced::Applied, Resolved::Settled(entry)) => {
                assert_eq!(stored, json!("by the owner"));
                assert_eq!(entry.state(), State::Done);
            }
            (Fenced::NotOwner, Resolved::Applied) => assert_eq!(stored, json!("by the operator")),
            other => panic!("round {round}: both or neither applied: {other:?}"),
        }
    }
}
