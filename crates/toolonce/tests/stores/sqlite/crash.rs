//! A crash between claim and complete.

use super::*;

const CRASH_DB: &str = "TOOLONCE_SQLITE_CRASH_DB";
const CRASH_MARKERS: &str = "TOOLONCE_SQLITE_CRASH_MARKERS";
const CRASH_SCOPE: &str = "TOOLONCE_SQLITE_CRASH_SCOPE";
const CRASH_LEASE: Duration = Duration::from_secs(1);

/// One interrupted charge per way a duplicate can meet it.
const CRASH_CASES: [&str; 5] = [
    "hold",
    "rerun",
    "verify-done",
    "verify-not-done",
    "verify-cannot-tell",
];

fn charge_args(case: &str) -> Value {
    json!({"customer": "cus_1", "case": case, "payment": {"amount": 4200, "currency": "eur"}})
}

fn crash_op(scope: &str, case: &str) -> key::Derived {
    key::derive(scope, "charge", &charge_args(case), None).unwrap()
}

/// The child of the next test: claims every charge through the layer, "charges" each (writes
/// the key it was given to a marker file named after the case), then hangs until it is killed.
/// A no-op in a normal run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_worker_charges_then_hangs() {
    let Ok(db) = std::env::var(CRASH_DB) else {
        return;
    };
    let markers = PathBuf::from(std::env::var(CRASH_MARKERS).unwrap());
    let scope = std::env::var(CRASH_SCOPE).unwrap();
    let layer = Arc::new(Layer::new(Arc::new(SqliteStore::open(db).unwrap())));
    let tasks: Vec<_> = CRASH_CASES
        .iter()
        .map(|case| {
            let (layer, markers, scope) = (layer.clone(), markers.clone(), scope.clone());
            tokio::spawn(async move {
                let op = crash_op(&scope, case);
                let about = About::new(&scope, "charge").detail(format!("case {case}"));
                let options = WriteOptions::new().lease(CRASH_LEASE);
                let _ = layer
                    .run_with_about("charge", &op, &about, &options, |ctx| async move {
                        // Write then rename, so the parent never reads half a marker.
                        let tmp = markers.join(format!("{case}.tmp"));
                        std::fs::write(&tmp, ctx.key().as_str()).unwrap();
                        std::fs::rename(&tmp, markers.join(case)).unwrap();
                        std::future::pending::<()>().await;
                        unreachable!()
                    })
                    .await;
                unreachable!("the tool never returns");
            })
        })
        .collect();
    // Every tool hangs until the parent kills this process.
    let _tasks = tasks;
    std::future::pending::<()>().await;
}

/// Kills the child on drop, so a failing assertion does not leave it hanging.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for_file(path: &Path, child: &mut Child, timeout: Duration) {
    let start = Instant::now();
    while !path.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the child exited ({status}) before charging");
        }
        assert!(
            start.elapsed() < timeout,
            "the child did not charge within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What a tool saw when it ran: the key, and whether it was told it may have run before.
type Seen = Arc<Mutex<Vec<(String, bool)>>>;

/// A charge that records its run in `seen` and answers with the key it charged with.
fn recording_charge(
    seen: &Seen,
) -> impl FnOnce(toolonce::WriteContext) -> std::future::Ready<Result<Value, ToolError>> {
    let seen = seen.clone();
    move |ctx| {
        seen.lock()
            .unwrap()
            .push((ctx.key().as_str().to_owned(), ctx.may_have_run_before()));
        std::future::ready(Ok(
            json!({"charge": "ch_2", "idempotency_key": ctx.key().as_str()}),
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_after_charging_leaves_unknown_entries_that_each_policy_handles() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash.db");
    let markers = dir.path().join("charged");
    std::fs::create_dir(&markers).unwrap();
    let scope = format!("crash-{}", std::process::id());
    let mut child = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
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
            .env(CRASH_DB, &db)
            .env(CRASH_MARKERS, &markers)
            .env(CRASH_SCOPE, &scope)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    for case in CRASH_CASES {
        wait_for_file(&markers.join(case), &mut child.0, Duration::from_secs(60));
    }
    child.0.kill().unwrap(); // SIGKILL: no destructor, no complete, no fail.
    child.0.wait().unwrap();
    let killed_at = Instant::now();
    let charged_with = |case: &str| std::fs::read_to_string(markers.join(case)).unwrap();

    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&db).unwrap());
    let layer = Layer::new(store.clone());
    let about = About::new(&scope, "charge");
    let ops: Vec<_> = CRASH_CASES.iter().map(|c| crash_op(&scope, c)).collect();
    for (case, op) in CRASH_CASES.iter().zip(&ops) {
        assert_eq!(charged_with(case), op.key.as_str());
    }

    // The claims survived the crash: running, and a duplicate is refused while the lease
    // lives, whatever its policy.
    let entry = store
        .get(&ops[0].key)
        .await
        .unwrap()
        .expect("the crashed claim is still there");
    assert_eq!(entry.state(), State::Running);
    let early = layer
        .run_with_about(
            "charge",
            &ops[1],
            &about,
            &WriteOptions::new()
                .lease(CRASH_LEASE)
                .on_expired(OnExpired::Rerun),
            |_| async { panic!("ran during the lease") },
        )
        .await;
    assert_eq!(early.outcome, Outcome::InFlight, "{early:?}");

    // Once the lease has run out, every entry is `unknown` (not absent), says what it is, and
    // is listed as such.
    for op in &ops {
        loop {
            let entry = store.get(&op.key).await.unwrap().expect("kept as unknown");
            if entry.state() == State::Unknown {
                assert_eq!(entry.about.scope.as_deref(), Some(scope.as_str()));
                assert_eq!(entry.about.tool.as_deref(), Some("charge"));
                assert!(entry.about.detail.as_deref().unwrap().starts_with("case "));
                assert_eq!(entry.attempts, 1);
                assert!(entry.first_started_at.is_some());
                break;
            }
            assert!(
                killed_at.elapsed() < CRASH_LEASE * 10,
                "the lease never expired"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let listed = store
        .list(&ListQuery::new().state(State::Unknown).scope(&scope))
        .await
        .unwrap();
    assert_eq!(listed.entries.len(), CRASH_CASES.len(), "{listed:?}");
    assert_eq!(
        store.purge_expired().await.unwrap(),
        0,
        "unknown entries are kept"
    );

    let options = |policy| WriteOptions::new().lease(CRASH_LEASE).on_expired(policy);
    let seen: Seen = Arc::default();

    // hold: not run; the answer says it is unknown; the entry stays so.
    let held = layer
        .run_with_about(
            "charge",
            &ops[0],
            &about,
            &options(OnExpired::Hold),
            |_| async { panic!("ran an unknown operation under hold") },
        )
        .await;
    assert_eq!(held.outcome, Outcome::Unknown, "{held:?}");
    assert!(held.result.is_err(), "{held:?}");
    assert_eq!(
        store.get(&ops[0].key).await.unwrap().unwrap().state(),
        State::Unknown
    );

    // rerun: taken over and run once more, with the crashed run's key, told it may have run
    // before; the entry counts two attempts and keeps its first start.
    let first_started = store
        .get(&ops[1].key)
        .await
        .unwrap()
        .unwrap()
        .first_started_at;
    let rerun = layer
        .run_with_about(
            "charge",
            &ops[1],
            &about,
            &options(OnExpired::Rerun),
            recording_charge(&seen),
        )
        .await;
    assert_eq!(rerun.outcome, Outcome::Executed, "{rerun:?}");
    assert_eq!(
        seen.lock().unwrap().drain(..).collect::<Vec<_>>(),
        vec![(charged_with("rerun"), true)]
    );
    let entry = store.get(&ops[1].key).await.unwrap().unwrap();
    assert_eq!((entry.state(), entry.attempts), (State::Done, 2));
    assert_eq!(entry.first_started_at, first_started);
    let replay = layer
        .run_with_about(
            "charge",
            &ops[1],
            &about,
            &options(OnExpired::Rerun),
            |_| async { panic!("ran twice") },
        )
        .await;
    assert_eq!(replay.outcome, Outcome::Replayed);
    assert_eq!(replay.result, rerun.result);

    // verify, the probe finds the charge: recorded and replayed, not run again.
    let probed = Arc::new(Mutex::new(Vec::new()));
    let probe = |answer: Verified| {
        let probed = probed.clone();
        move |ctx: toolonce::WriteContext| {
            probed.lock().unwrap().push(ctx.key().as_str().to_owned());
            std::future::ready(answer)
        }
    };
    let found = json!({"charge": "ch_1", "found": true});
    let verified = layer
        .run_with_verify(
            "charge",
            &ops[2],
            &about,
            &options(OnExpired::Verify),
            probe(Verified::Done(found.clone())),
            |_| async { panic!("ran although the probe found it done") },
        )
        .await;
    assert_eq!(verified.outcome, Outcome::Replayed, "{verified:?}");
    assert_eq!(verified.result.as_ref().unwrap(), &found);
    match store.get(&ops[2].key).await.unwrap().unwrap().state {
        EntryState::Done { result, .. } => assert_eq!(result, found),
        other => panic!("expected the probe's result recorded, got {other:?}"),
    }

    // verify, the probe finds nothing: run once more with the same key.
    let rerun = layer
        .run_with_verify(
            "charge",
            &ops[3],
            &about,
            &options(OnExpired::Verify),
            probe(Verified::NotDone),
            recording_charge(&seen),
        )
        .await;
    assert_eq!(rerun.outcome, Outcome::Executed, "{rerun:?}");
    assert_eq!(
        seen.lock().unwrap().drain(..).collect::<Vec<_>>(),
        vec![(charged_with("verify-not-done"), true)]
    );
    assert_eq!(
        store.get(&ops[3].key).await.unwrap().unwrap().state(),
        State::Done
    );

    // verify, the probe cannot tell: held.
    let held = layer
        .run_with_verify(
            "charge",
            &ops[4],
            &about,
            &options(OnExpired::Verify),
            probe(Verified::CannotTell),
            |_| async { panic!("ran although the probe could not tell") },
        )
        .await;
    assert_eq!(held.outcome, Outcome::Unknown, "{held:?}");
    assert_eq!(
        store.get(&ops[4].key).await.unwrap().unwrap().state(),
        State::Unknown
    );
    assert_eq!(
        *probed.lock().unwrap(),
        vec![
            charged_with("verify-done"),
            charged_with("verify-not-done"),
            charged_with("verify-cannot-tell")
        ],
        "each probe asked with the crashed run's key"
    );

    // An operator who checked releases the held one: the next call runs it, once.
    let looked = conformance::seen(&*store, &ops[0].key).await;
    assert_eq!(
        store
            .resolve(
                &ops[0].key,
                &looked,
                &Resolution::Release,
                conformance::LONG
            )
            .await
            .unwrap(),
        Resolved::Applied
    );
    let after_release = layer
        .run_with_about(
            "charge",
            &ops[0],
            &about,
            &options(OnExpired::Hold),
            recording_charge(&seen),
        )
        .await;
    assert_eq!(
        after_release.outcome,
        Outcome::Executed,
        "{after_release:?}"
    );
    assert_eq!(
        seen.lock().unwrap().drain(..).collect::<Vec<_>>(),
        vec![(charged_with("hold"), false)]
    );
}
