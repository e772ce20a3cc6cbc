//! Errors.

use super::*;

#[tokio::test]
async fn a_lock_held_past_the_busy_timeout_makes_the_store_unavailable_not_broken() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locked.db");
    let store = SqliteOptions::new()
        .busy_timeout(Duration::from_millis(100))
        .open(&path)
        .unwrap();
    let (key, fp) = conformance::op("locked");
    let blocker = raw(&path);
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let err = store
        .claim_fresh(&key, &fp, conformance::LONG)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    assert!(err.is_retryable());
    assert!(
        err.report().to_string().contains("locked.db"),
        "{}",
        err.report().to_string()
    );
    // Reads still work while another process writes (WAL).
    assert!(store.get(&key).await.unwrap().is_none());
    blocker.execute_batch("COMMIT").unwrap();
    conformance::won(
        store
            .claim_fresh(&key, &fp, conformance::LONG)
            .await
            .unwrap(),
    );

    // Through the layer, the write is not executed and the answer says why.
    let layer = Layer::new(Arc::new(store));
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let op = key::derive("locked", "charge", &json!({"n": 1}), None).unwrap();
    let answer = layer
        .run("charge", &op, &WriteOptions::new(), |_| async {
            panic!("ran without the store")
        })
        .await;
    assert_eq!(answer.outcome, Outcome::StoreUnavailable);
    blocker.execute_batch("ROLLBACK").unwrap();
}

#[tokio::test]
async fn a_write_that_finds_the_lock_taken_waits_on_the_thread_and_leaves_no_transaction_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.db");
    let store = SqliteStore::open(&path).unwrap();
    let (key, fp) = conformance::op("busy");
    let blocker = raw(&path);
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        blocker.execute_batch("COMMIT").unwrap();
    });
    // The inline attempt gets SQLITE_BUSY at once; the thread waits for the lock and claims.
    let started = Instant::now();
    let owner = conformance::won(
        store
            .claim_fresh(&key, &fp, conformance::LONG)
            .await
            .unwrap(),
    );
    assert!(started.elapsed() >= Duration::from_millis(150));
    release.join().unwrap();
    assert_eq!(
        store
            .complete(&key, owner, &json!("ok"), conformance::LONG)
            .await
            .unwrap(),
        Fenced::Applied
    );
    // Neither of the store's writer connections holds the lock: another connection that
    // does not wait gets it at once.
    let other = raw(&path);
    other.busy_timeout(Duration::ZERO).unwrap();
    other.execute_batch("BEGIN IMMEDIATE; ROLLBACK").unwrap();
    assert_eq!(
        conformance::replayed_result(&store, &key, &fp).await,
        json!("ok")
    );
}

#[tokio::test]
async fn a_duplicate_of_a_settled_entry_is_answered_while_another_process_holds_the_write_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("held.db");
    let store = SqliteOptions::new()
        .busy_timeout(Duration::from_millis(100))
        .open(&path)
        .unwrap();
    let (key, fp) = conformance::op("held");
    let owner = conformance::won(
        store
            .claim_fresh(&key, &fp, conformance::LONG)
            .await
            .unwrap(),
    );
    assert_eq!(
        store
            .complete(&key, owner, &json!("first"), conformance::LONG)
            .await
            .unwrap(),
        toolonce::Fenced::Applied
    );
    // The duplicate's read runs on the inline writer, which is free; it must not need the
    // write lock (a claim that took it would wait out the busy timeout and be unavailable).
    let blocker = raw(&path);
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    for _ in 0..3 {
        assert_eq!(
            conformance::replayed_result(&store, &key, &fp).await,
            json!("first")
        );
    }
    // A claim that must write still waits for the lock, and fails closed past the timeout.
    let (fresh, fresh_fp) = conformance::op("held-fresh");
    let err = store
        .claim_fresh(&fresh, &fresh_fp, conformance::LONG)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    blocker.execute_batch("ROLLBACK").unwrap();
}

#[tokio::test]
async fn a_claim_on_the_inline_writer_sees_what_another_process_wrote_after_the_writers_own_commit()
{
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fresh.db");
    let store = SqliteStore::open(&path).unwrap();
    let (key, fp) = conformance::op("other");
    // The store's writer commits the running row and keeps its pages cached.
    conformance::won(
        store
            .claim_fresh(&key, &fp, conformance::LONG)
            .await
            .unwrap(),
    );
    // Another process settles it behind the store's back.
    let other = raw(&path);
    let changed = other
        .execute(
            "UPDATE toolonce_entries SET state = 'done', owner = NULL, lease_until = NULL, \
             payload = '\"theirs\"', settled_at = started_at WHERE key = ?1",
            [key.as_str()],
        )
        .unwrap();
    assert_eq!(changed, 1);
    assert_eq!(
        conformance::replayed_result(&store, &key, &fp).await,
        json!("theirs")
    );
    // And the other way round: it deletes the row, and the next claim wins again.
    other
        .execute(
            "DELETE FROM toolonce_entries WHERE key = ?1",
            [key.as_str()],
        )
        .unwrap();
    conformance::won(
        store
            .claim_fresh(&key, &fp, conformance::LONG)
            .await
            .unwrap(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_from_many_tasks_at_once_all_settle_once_and_leave_the_lock_free() {
    // Tasks on four workers contend for the inline writer: the losers' writes go to the
    // connection thread, which runs them on the inline writer once it is free (or, when
    // another process holds the lock, on its own connection).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("many.db");
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let outsider = raw(&path);
    let tasks: Vec<_> = (0..16)
        .map(|task| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut keys = Vec::new();
                for n in 0..40 {
                    let (key, fp) = conformance::op(&format!("many{task}-{n}"));
                    let owner = conformance::won(
                        store
                            .claim_fresh(&key, &fp, conformance::LONG)
                            .await
                            .unwrap(),
                    );
                    let recorded = store
                        .complete(&key, owner, &json!([task, n]), conformance::LONG)
                        .await
                        .unwrap();
                    assert_eq!(recorded, Fenced::Applied);
                    keys.push((key, json!([task, n])));
                }
                keys
            })
        })
        .collect();
    // Meanwhile another process takes the lock now and then, so some writes wait for it.
    for _ in 0..20 {
        outsider.execute_batch("BEGIN IMMEDIATE").unwrap();
        std::thread::sleep(Duration::from_millis(1));
        outsider.execute_batch("COMMIT").unwrap();
        tokio::task::yield_now().await;
    }
    let mut settled = 0;
    for task in tasks {
        for (key, result) in task.await.unwrap() {
            match store
                .get(&key)
                .await
                .unwrap()
                .expect("a settled entry")
                .state
            {
                EntryState::Done { result: stored, .. } => assert_eq!(stored, result),
                other => panic!("expected done, got {other:?}"),
            }
            settled += 1;
        }
    }
    assert_eq!(settled, 16 * 40);
    // No connection of the store holds the lock: one that does not wait gets it at once.
    let other = raw(&path);
    other.busy_timeout(Duration::ZERO).unwrap();
    other.execute_batch("BEGIN IMMEDIATE; ROLLBACK").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claims_of_one_key_inline_and_on_the_thread_have_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("race.db")).unwrap());
    for round in 0..50 {
        let (key, fp) = conformance::op(&format!("race{round}"));
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let (store, key, fp) = (store.clone(), key.clone(), fp.clone());
                tokio::spawn(async move { store.claim_fresh(&key, &fp, conformance::LONG).await })
            })
            .collect();
        let mut won = 0;
        for task in tasks {
            if let Fresh::Won(_) = task.await.unwrap().unwrap() {
                won += 1;
            }
        }
        assert_eq!(won, 1, "round {round}");
    }
}

/// Each store's inline writer claims in a deferred transaction whose write must not land on a
/// snapshot another connection has committed past: two handles on one file (as two processes
/// are) race for every key, so one's read often precedes the other's commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claims_of_one_key_from_two_stores_on_one_file_have_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("race2.db");
    let stores = [
        Arc::new(SqliteStore::open(&path).unwrap()),
        Arc::new(SqliteStore::open(&path).unwrap()),
    ];
    for round in 0..100 {
        let (key, fp) = conformance::op(&format!("race{round}"));
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let (store, key, fp) = (stores[i % 2].clone(), key.clone(), fp.clone());
                tokio::spawn(async move { store.claim_fresh(&key, &fp, conformance::LONG).await })
            })
            .collect();
        let mut won = 0;
        for task in tasks {
            match task.await.unwrap().unwrap() {
                Fresh::Won(_) => won += 1,
                Fresh::Existing(entry) => assert!(
                    matches!(entry.state, EntryState::Running { .. }),
                    "round {round}: {entry:?}"
                ),
            }
        }
        assert_eq!(won, 1, "round {round}");
    }
}

#[tokio::test]
async fn an_entry_whose_result_is_not_json_is_reported_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corrupt.db");
    let store = SqliteStore::open(&path).unwrap();
    let (key, fp) = conformance::op("corrupt");
    let owner = conformance::won(
        store
            .claim_fresh(&key, &fp, conformance::LONG)
            .await
            .unwrap(),
    );
    let _ = store
        .complete(&key, owner, &json!(1), conformance::LONG)
        .await
        .unwrap();
    raw(&path)
        .execute(
            "UPDATE toolonce_entries SET payload = '{not json' WHERE key = ?1",
            [key.as_str()],
        )
        .unwrap();
    for err in [
        store.get(&key).await.unwrap_err(),
        store
            .claim_fresh(&key, &fp, conformance::LONG)
            .await
            .unwrap_err(),
    ] {
        match err {
            Error::Corrupt { key: k, reason } => {
                assert_eq!(k, key.as_str());
                assert!(reason.contains("not JSON"), "{reason}");
            }
            other => panic!("expected a corrupt entry, got {other:?}"),
        }
    }
    // A listing reports it beside the page rather than failing.
    let page = store.list(&ListQuery::new()).await.unwrap();
    assert!(page.entries.is_empty(), "{:?}", page.entries);
    assert_eq!(page.unreadable.len(), 1, "{:?}", page.unreadable);
    assert_eq!(page.unreadable[0].key, key.as_str());
    assert!(
        page.unreadable[0].reason.contains("not JSON"),
        "{:?}",
        page.unreadable
    );
}

#[tokio::test]
async fn results_and_errors_are_stored_as_json_text() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("json.db");
    let store = SqliteStore::open(&path).unwrap();
    let (done, fp) = conformance::op("json");
    let owner = conformance::won(
        store
            .claim_fresh(&done, &fp, conformance::LONG)
            .await
            .unwrap(),
    );
    let result = json!({"cents": 500, "ratio": 0.30000000000000004});
    let _ = store
        .complete(&done, owner, &result, conformance::LONG)
        .await
        .unwrap();
    let (failed, fp) = conformance::op("json");
    let owner = conformance::won(
        store
            .claim_fresh(&failed, &fp, conformance::LONG)
            .await
            .unwrap(),
    );
    let error = ToolError::permanent("declined");
    let _ = store
        .fail(&failed, owner, &error, Some(conformance::LONG))
        .await
        .unwrap();

    let conn = raw(&path);
    let payload = |key: &OperationKey| -> String {
        conn.query_row(
            "SELECT payload FROM toolonce_entries WHERE key = ?1",
            [key.as_str()],
            |r| r.get(0),
        )
        .unwrap()
    };
    assert_eq!(
        serde_json::from_str::<Value>(&payload(&done)).unwrap(),
        result
    );
    assert_eq!(
        serde_json::from_str::<ToolError>(&payload(&failed)).unwrap(),
        error
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_blocking_its_thread_keeps_its_lease_on_sqlite() {
    // Two handles on one file, as two processes would have.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolonce.db");
    let first: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).unwrap());
    let other: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).unwrap());
    blocking::a_tool_blocking_its_thread_for_three_leases_runs_once(first, other).await;
}

use proptest::strategy::Strategy as _;

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    /// SQLite keeps its busy timeout in an `i32` of milliseconds (24.8 days): a longer one
    /// means "wait as long as it takes" and is capped, never a panic.
    #[test]
    fn any_busy_timeout_opens_a_working_store(
        busy in proptest::prop_oneof![
            proptest::strategy::Just(Duration::ZERO),
            proptest::strategy::Just(Duration::from_millis(i32::MAX as u64)),
            proptest::strategy::Just(Duration::from_millis(i32::MAX as u64 + 1)),
            proptest::strategy::Just(Duration::from_secs_f64(1e19)),
            proptest::strategy::Just(Duration::MAX),
            (0u64..u64::MAX, 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        ]
    ) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteOptions::new()
            .busy_timeout(busy)
            .open(dir.path().join("toolonce.db"))
            .unwrap();
        let op = key::derive("busy", "t", &json!({}), None).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let owner = OwnerToken::generate();
        let claim = rt.block_on(store.claim(&ClaimRequest::new(&op.key, &op.fingerprint, &owner, Duration::from_secs(60))));
        proptest::prop_assert!(matches!(claim, Ok(Claim::Won)), "{claim:?}");
    }
}
