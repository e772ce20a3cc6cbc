//! A crash between claim and complete.

use super::*;

const CRASH_URL: &str = "TOOLONCE_REDIS_CRASH_URL";
const CRASH_MARKER: &str = "TOOLONCE_REDIS_CRASH_MARKER";
const CRASH_SCOPE: &str = "TOOLONCE_REDIS_CRASH_SCOPE";
const CRASH_LEASE: Duration = Duration::from_secs(1);

fn charge_args() -> Value {
    json!({"customer": "cus_1", "amount": 4200, "currency": "eur"})
}

/// The child of the next test: claims the charge through the layer, "charges" (writes the key
/// it was given to the marker file), then hangs until it is killed. A no-op in a normal run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_worker_charges_then_hangs() {
    let Ok(url) = std::env::var(CRASH_URL) else {
        return;
    };
    let marker = PathBuf::from(std::env::var(CRASH_MARKER).unwrap());
    let scope = std::env::var(CRASH_SCOPE).unwrap();
    let layer = Layer::new(Arc::new(RedisStore::connect(&url).await.unwrap()));
    let op = key::derive(&scope, "charge", &charge_args(), None).unwrap();
    let options = WriteOptions::new().lease(CRASH_LEASE);
    let about = About::new(scope.clone(), "charge").detail("acme payments");
    let _ = layer
        .run_with_about("charge", &op, &about, &options, |ctx| async move {
            // Write then rename, so the parent never reads half a marker.
            let tmp = marker.with_extension("tmp");
            std::fs::write(&tmp, ctx.key().as_str()).unwrap();
            std::fs::rename(&tmp, &marker).unwrap();
            std::future::pending::<()>().await;
            unreachable!()
        })
        .await;
    unreachable!("the tool never returns");
}

/// Kills the child on drop, so a failing assertion does not leave it hanging.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_after_charging_leaves_an_unknown_entry_held_until_a_rerun_takes_it_over()
{
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("charged");
    let scope = format!("crash-{}-{}", std::process::id(), now_ms());
    let url = format!("{}?prefix={}", shared_redis().url(), unique_prefix());
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
            .env(CRASH_URL, &url)
            .env(CRASH_MARKER, &marker)
            .env(CRASH_SCOPE, &scope)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
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
            "the child did not charge"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child.0.kill().unwrap(); // SIGKILL: no destructor, no complete, no fail.
    child.0.wait().unwrap();
    let charged_with = std::fs::read_to_string(&marker).unwrap();

    let store: Arc<dyn Store> = Arc::new(RedisStore::connect(&url).await.unwrap());
    let layer = Layer::new(store.clone());
    let op = key::derive(&scope, "charge", &charge_args(), None).unwrap();
    assert_eq!(charged_with, op.key.as_str());
    let hold = WriteOptions::new().lease(CRASH_LEASE);
    let about = About::new(scope.clone(), "charge");

    // The claim survived the crash, with what it said it was.
    let entry = store
        .get(&op.key)
        .await
        .unwrap()
        .expect("the crashed claim");
    assert_eq!(
        entry.about,
        About::new(scope.clone(), "charge").detail("acme payments")
    );
    assert_eq!(entry.attempts, 1);
    let first_started_at = entry.first_started_at.expect("recorded");
    if entry.state() == State::Running {
        // Still within the lease (a loaded machine may be past it already): in flight.
        let early = layer
            .run_with_about("charge", &op, &about, &hold, |_| async {
                panic!("ran during the lease")
            })
            .await;
        assert!(
            matches!(early.outcome, Outcome::InFlight | Outcome::Unknown),
            "{early:?}"
        );
    }

    // The lease runs out on the server's clock without a settle: unknown, and kept.
    conformance::until_unknown(store.as_ref(), &op.key).await;

    // hold (the default): not run, answered unknown, the entry left as it was.
    let held = layer
        .run_with_about("charge", &op, &about, &hold, |_| async {
            panic!("a held duplicate ran")
        })
        .await;
    assert_eq!(held.outcome, Outcome::Unknown, "{held:?}");
    // verify that cannot tell: held as well.
    let cannot_tell = layer
        .run_with_verify(
            "charge",
            &op,
            &about,
            &hold.clone().on_expired(OnExpired::Verify),
            |_| async { Verified::CannotTell },
            |_| async { panic!("ran although the probe could not tell") },
        )
        .await;
    assert_eq!(cannot_tell.outcome, Outcome::Unknown, "{cannot_tell:?}");
    let entry = store.get(&op.key).await.unwrap().unwrap();
    assert_eq!((entry.state(), entry.attempts), (State::Unknown, 1));

    // rerun: taken over and run again with the same key, which the provider deduplicates; the
    // tool is told an earlier attempt may have run.
    let seen = Arc::new(std::sync::Mutex::new(None));
    let seen_in_tool = seen.clone();
    let answer = layer
        .run_with_about(
            "charge",
            &op,
            &about,
            &hold.clone().on_expired(OnExpired::Rerun),
            |ctx| async move {
                *seen_in_tool.lock().unwrap() =
                    Some((ctx.key().clone(), ctx.may_have_run_before()));
                Ok(json!({"charge": "ch_2", "idempotency_key": ctx.key().as_str()}))
            },
        )
        .await;
    assert_eq!(answer.outcome, Outcome::Executed, "{answer:?}");
    let (key, may_have_run_before) = seen.lock().unwrap().take().expect("the tool ran");
    assert_eq!(
        key.as_str(),
        charged_with,
        "the rerun got the crashed run's key"
    );
    assert!(may_have_run_before, "a takeover tells the tool");
    let entry = store.get(&op.key).await.unwrap().unwrap();
    assert_eq!(entry.state(), State::Done);
    assert_eq!(entry.attempts, 2);
    assert_eq!(entry.first_started_at, Some(first_started_at));
    assert!(entry.settled_at.is_some());

    let replay = layer
        .run_with_about("charge", &op, &about, &hold, |_| async {
            panic!("ran twice")
        })
        .await;
    assert_eq!(replay.outcome, Outcome::Replayed);
    assert_eq!(replay.result, answer.result);
}
