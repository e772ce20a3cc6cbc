//! A crash between claim and complete.

use super::*;

const CRASH_URL: &str = "TOOLONCE_PG_CRASH_URL";
const CRASH_TABLE: &str = "TOOLONCE_PG_CRASH_TABLE";
const CRASH_MARKER: &str = "TOOLONCE_PG_CRASH_MARKER";
const CRASH_SCOPE: &str = "TOOLONCE_PG_CRASH_SCOPE";
const CRASH_LEASE: Duration = Duration::from_secs(1);

fn charge_args() -> serde_json::Value {
    json!({"customer": "cus_1", "payment": {"amount": 4200, "currency": "eur"}})
}

fn charge_about(scope: &str) -> About {
    About::new(scope, "charge").detail("payments.example")
}

/// The child of the next test: claims the charge through the layer, "charges" (writes the key
/// it was given to the marker file), then hangs until it is killed. A no-op in a normal run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_worker_charges_then_hangs() {
    let Ok(url) = std::env::var(CRASH_URL) else {
        return;
    };
    let marker = std::path::PathBuf::from(std::env::var(CRASH_MARKER).unwrap());
    let scope = std::env::var(CRASH_SCOPE).unwrap();
    let store = PostgresStore::builder(url)
        .table(std::env::var(CRASH_TABLE).unwrap())
        .connect()
        .await
        .unwrap();
    let op = key::derive(&scope, "charge", &charge_args(), None).unwrap();
    let options = WriteOptions::new().lease(CRASH_LEASE);
    let _ = Layer::new(Arc::new(store))
        .run_with_about(
            "charge",
            &op,
            &charge_about(&scope),
            &options,
            |ctx| async move {
                // Write then rename, so the parent never reads half a marker.
                let tmp = marker.with_extension("tmp");
                std::fs::write(&tmp, ctx.key().as_str()).unwrap();
                std::fs::rename(&tmp, &marker).unwrap();
                std::future::pending::<()>().await;
                unreachable!()
            },
        )
        .await;
    unreachable!("the tool never returns");
}

/// Kills the child on drop, so a failing assertion does not leave it hanging.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs [`crash_worker_charges_then_hangs`] as a child process on `table` in `scope`, waits
/// until it has charged, SIGKILLs it (no destructor, no complete, no fail), and returns the key
/// it charged with.
async fn charge_then_crash(url: &str, table: &str, scope: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("charged");
    let mut child = KillOnDrop(
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                conformance::multiprocess::test_name(
                    module_path!(),
                    "crash_worker_charges_then_hangs",
                )
                .as_str(),
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CRASH_URL, url)
            .env(CRASH_TABLE, table)
            .env(CRASH_MARKER, &marker)
            .env(CRASH_SCOPE, scope)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    while !marker.exists() {
        if let Some(status) = child.0.try_wait().unwrap() {
            panic!("the child exited ({status}) before charging");
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the child did not charge within a minute"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    std::fs::read_to_string(&marker).unwrap()
}

/// Waits until the entry of `key` is `unknown` (polled: the lease is timed by the server).
async fn wait_until_unknown(store: &dyn Store, key: &key::OperationKey) -> toolonce::Entry {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let entry = store.get(key).await.unwrap().expect("kept past its lease");
        if entry.state() == State::Unknown {
            return entry;
        }
        assert_eq!(entry.state(), State::Running);
        assert!(Instant::now() < deadline, "the lease never ran out");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A process SIGKILLed after its tool took effect and before it could complete leaves its
/// entry `running` while the lease lives, then `unknown`, not absent: a duplicate under `hold`
/// does not run and answers `unknown`; one under `rerun` takes it over and runs once more,
/// with the same key, told it may have run before; after that, duplicates replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_after_charging_leaves_unknown_held_by_hold_and_rerun_once_by_rerun() {
    let url = tokio::task::spawn_blocking(database_url).await.unwrap();
    let table = unique_table();
    let scope = format!("crash-{}", std::process::id());
    let charged_with = charge_then_crash(&url, &table, &scope).await;

    let store = Arc::new(
        PostgresStore::builder(&url)
            .table(&table)
            .connect()
            .await
            .unwrap(),
    );
    let layer = Layer::new(store.clone());
    let op = key::derive(&scope, "charge", &charge_args(), None).unwrap();
    assert_eq!(charged_with, op.key.as_str());
    let about = charge_about(&scope);
    let hold = WriteOptions::new()
        .lease(CRASH_LEASE)
        .on_expired(OnExpired::Hold);
    let rerun = WriteOptions::new()
        .lease(CRASH_LEASE)
        .on_expired(OnExpired::Rerun);

    // The claim survived the crash, and says what it is.
    let entry = store
        .get(&op.key)
        .await
        .unwrap()
        .expect("the crashed claim");
    assert_eq!(entry.about, about);
    assert_eq!(entry.attempts, 1);
    assert!(entry.first_started_at.is_some());

    // Once the lease has run out the entry is `unknown`.
    let entry = wait_until_unknown(&*store, &op.key).await;
    assert!(matches!(
        entry.state,
        EntryState::Unknown { owner: Some(_) }
    ));

    // hold: not run, answered `unknown`, the entry left as it is.
    let held = layer
        .run_with_about("charge", &op, &about, &hold, |_| async {
            panic!("ran under hold")
        })
        .await;
    assert_eq!(held.outcome, Outcome::Unknown, "{held:?}");
    let listed = store
        .list(&ListQuery::new().state(State::Unknown).scope(&scope))
        .await
        .unwrap();
    assert_eq!(listed.entries.len(), 1);
    assert_eq!(listed.entries[0].key, op.key);
    assert_eq!(listed.entries[0].attempts, 1);

    // rerun: taken over and run once more, with the crashed run's key.
    let runs = Arc::new(Mutex::new(Vec::new()));
    let seen = runs.clone();
    let answer = layer
        .run_with_about("charge", &op, &about, &rerun, |ctx| async move {
            seen.lock()
                .unwrap()
                .push((ctx.key().as_str().to_owned(), ctx.may_have_run_before()));
            Ok(json!({"charge": "ch_2", "idempotency_key": ctx.key().as_str()}))
        })
        .await;
    assert_eq!(answer.outcome, Outcome::Executed, "{answer:?}");
    assert_eq!(
        *runs.lock().unwrap(),
        vec![(charged_with.clone(), true)],
        "one more run, with the same key, told it may have run before"
    );
    let entry = store.get(&op.key).await.unwrap().unwrap();
    assert_eq!(entry.state(), State::Done);
    assert_eq!(entry.attempts, 2);
    assert_eq!(entry.about, about);
    assert!(entry.settled_at.is_some());

    for options in [&hold, &rerun] {
        let replay = layer
            .run_with_about("charge", &op, &about, options, |_| async {
                panic!("ran twice")
            })
            .await;
        assert_eq!(replay.outcome, Outcome::Replayed);
        assert_eq!(replay.result, answer.result);
    }
}

/// The same crash under `verify`: the probe gets the crashed run's key; "cannot tell" holds
/// (not run, `unknown`); "done" records the probe's result and replays it without running;
/// on a second crashed charge, "not done" runs it once more with the same key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_after_charging_is_settled_by_what_the_verify_probe_says() {
    let url = tokio::task::spawn_blocking(database_url).await.unwrap();
    let table = unique_table();
    let (done_scope, not_done_scope) = (
        format!("verify-done-{}", std::process::id()),
        format!("verify-not-done-{}", std::process::id()),
    );
    let (done_key, not_done_key) = tokio::join!(
        charge_then_crash(&url, &table, &done_scope),
        charge_then_crash(&url, &table, &not_done_scope),
    );
    let store = Arc::new(
        PostgresStore::builder(&url)
            .table(&table)
            .connect()
            .await
            .unwrap(),
    );
    let layer = Layer::new(store.clone());
    let verify = WriteOptions::new()
        .lease(CRASH_LEASE)
        .on_expired(OnExpired::Verify);
    let probe = |answer: toolonce::Verified, asked: Arc<Mutex<Vec<String>>>| {
        move |ctx: toolonce::WriteContext| async move {
            asked.lock().unwrap().push(ctx.key().as_str().to_owned());
            answer
        }
    };

    // Charged, and the provider says so, once it can tell.
    let op = key::derive(&done_scope, "charge", &charge_args(), None).unwrap();
    assert_eq!(done_key, op.key.as_str());
    let about = charge_about(&done_scope);
    wait_until_unknown(&*store, &op.key).await;
    let asked = Arc::new(Mutex::new(Vec::new()));
    let held = layer
        .run_with_verify(
            "charge",
            &op,
            &about,
            &verify,
            probe(toolonce::Verified::CannotTell, asked.clone()),
            |_| async { panic!("ran although the probe could not tell") },
        )
        .await;
    assert_eq!(held.outcome, Outcome::Unknown, "{held:?}");
    assert_eq!(
        store.get(&op.key).await.unwrap().unwrap().state(),
        State::Unknown
    );
    let receipt = json!({"charge": "ch_1", "idempotency_key": done_key});
    let found = layer
        .run_with_verify(
            "charge",
            &op,
            &about,
            &verify,
            probe(toolonce::Verified::Done(receipt.clone()), asked.clone()),
            |_| async { panic!("ran although the probe found the charge") },
        )
        .await;
    assert_eq!(found.outcome, Outcome::Replayed, "{found:?}");
    assert_eq!(found.result.as_ref().ok(), Some(&receipt));
    assert_eq!(
        *asked.lock().unwrap(),
        vec![done_key.clone(), done_key.clone()]
    );
    let entry = store.get(&op.key).await.unwrap().unwrap();
    assert_eq!(entry.state(), State::Done);
    assert_eq!(entry.attempts, 1, "settled without another attempt");
    let replay = layer
        .run_with_about("charge", &op, &about, &verify, |_| async {
            panic!("ran after it was recorded")
        })
        .await;
    assert_eq!(replay.outcome, Outcome::Replayed);
    assert_eq!(replay.result.as_ref().ok(), Some(&receipt));

    // Not charged: run once more, with the same key.
    let op = key::derive(&not_done_scope, "charge", &charge_args(), None).unwrap();
    assert_eq!(not_done_key, op.key.as_str());
    let about = charge_about(&not_done_scope);
    wait_until_unknown(&*store, &op.key).await;
    let asked = Arc::new(Mutex::new(Vec::new()));
    let runs = Arc::new(Mutex::new(Vec::new()));
    let seen = runs.clone();
    let answer = layer
        .run_with_verify(
            "charge",
            &op,
            &about,
            &verify,
            probe(toolonce::Verified::NotDone, asked.clone()),
            |ctx| async move {
                seen.lock().unwrap().push(ctx.key().as_str().to_owned());
                Ok(json!({"charge": "ch_2"}))
            },
        )
        .await;
    assert_eq!(answer.outcome, Outcome::Executed, "{answer:?}");
    assert_eq!(*asked.lock().unwrap(), vec![not_done_key.clone()]);
    assert_eq!(*runs.lock().unwrap(), vec![not_done_key]);
    let entry = store.get(&op.key).await.unwrap().unwrap();
    assert_eq!((entry.state(), entry.attempts), (State::Done, 2));
}
