//! Multi-process contention.

use super::*;

#[test]
fn eight_processes_running_the_same_500_operations_execute_each_exactly_once() {
    conformance::multiprocess::run_workers(
        &conformance::multiprocess::test_name(module_path!(), "multi_process_worker"),
        &[
            ("TOOLONCE_PG_URL", database_url()),
            ("TOOLONCE_PG_TABLE", unique_table()),
        ],
        8,
        500,
    );
}

/// The body of each worker process of the test above; a no-op when run as a test.
#[test]
fn multi_process_worker() {
    if !conformance::multiprocess::is_worker() {
        return;
    }
    let url = std::env::var("TOOLONCE_PG_URL").unwrap();
    let table = std::env::var("TOOLONCE_PG_TABLE").unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // All eight processes migrate the same fresh table at once.
        let store = PostgresStore::builder(url)
            .table(table)
            .pool_size(4)
            .connect()
            .await
            .unwrap();
        conformance::multiprocess::worker(Arc::new(store)).await;
    });
}

/// An operator's resolve racing the owner's complete on a running entry: both are fenced on
/// the row, so exactly one settles it and the other is told (the owner `NotOwner`, the
/// operator `Settled` with what the owner recorded).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resolve_racing_the_owners_complete_lets_exactly_one_settle() {
    let store = fresh_store().await;
    let (mut by_owner, mut by_operator) = (0, 0);
    for round in 0..50 {
        let (key, fp) = conformance::op("resolve-race");
        let owner = conformance::won(
            store
                .claim_fresh(&key, &fp, conformance::LONG)
                .await
                .unwrap(),
        );
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let completing = {
            let (store, key, barrier) = (store.clone(), key.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .complete(&key, owner, &json!("owner"), conformance::LONG)
                    .await
                    .unwrap()
            })
        };
        // The operator looked at the claim before it raced the owner (forced: it may be live).
        let seen = conformance::seen_while_running(&*store, &key).await;
        let resolving = {
            let (store, key, barrier) = (store.clone(), key.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .resolve(
                        &key,
                        &seen,
                        &Resolution::Done(json!("operator")),
                        conformance::LONG,
                    )
                    .await
                    .unwrap()
            })
        };
        let (completed, resolved) = (completing.await.unwrap(), resolving.await.unwrap());
        let result = |entry: &toolonce::Entry| match &entry.state {
            EntryState::Done { result, .. } => result.clone(),
            other => panic!("round {round}: {other:?}"),
        };
        let stored = result(&store.get(&key).await.unwrap().unwrap());
        match (completed, resolved) {
            (toolonce::Fenced::Applied, Resolved::Settled(seen)) => {
                assert_eq!(result(&seen), json!("owner"), "round {round}");
                assert_eq!(stored, json!("owner"), "round {round}");
                by_owner += 1;
            }
            (toolonce::Fenced::NotOwner, Resolved::Applied) => {
                assert_eq!(stored, json!("operator"), "round {round}");
                by_operator += 1;
            }
            other => panic!("round {round}: {other:?}"),
        }
    }
    eprintln!("settled by the owner {by_owner} times, by the operator {by_operator} times");
}

/// `unknown` entries live in the table past their lease: purge must leave them until their
/// retention ends (its index is on the final expiry), and only then remove them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_keeps_an_unknown_entry_until_its_retention_ends() {
    let table = unique_table();
    let url = tokio::task::spawn_blocking(database_url).await.unwrap();
    let store = PostgresStore::builder(url)
        .table(&table)
        .connect()
        .await
        .unwrap();
    let (key, fp) = conformance::op("purge");
    let owner = OwnerToken::generate();
    let req =
        ClaimRequest::new(&key, &fp, &owner, conformance::SHORT).retention(Duration::from_secs(2));
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
    tokio::time::sleep(conformance::PAST_SHORT).await;
    assert_eq!(store.purge_expired().await.unwrap(), 0);
    let entry = store.get(&key).await.unwrap().expect("kept as unknown");
    assert_eq!(entry.state(), State::Unknown);
    let deadline = Instant::now() + Duration::from_secs(30);
    while store.get(&key).await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "the retention never ended");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(store.purge_expired().await.unwrap(), 1);
    assert_eq!(
        shared_psql(format!(
            "SELECT count(*) FROM \"{}\" WHERE key = '{}'",
            table,
            key.as_str()
        ))
        .await,
        "0"
    );
}
