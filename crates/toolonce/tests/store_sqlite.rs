//! The SQLite store: the conformance suite (on a file with inline reads and writes, on a file
//! without inline writes, on one without either, and in memory), several OS processes sharing
//! one file, a real crash between claim and complete met by a duplicate under each policy for
//! `unknown` entries, the schema versioning and the migration of version-1 files, and the
//! mapping of SQLite's errors.

mod blocking;
mod conformance;

use conformance::{ClaimFresh, Fresh};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{Value, json};
use tempfile::TempDir;
use toolonce::key::{self, Fingerprint, OperationKey};
use toolonce::store::sqlite::{SCHEMA_VERSION, SqliteOptions, SqliteStore};
use toolonce::{
    About, Claim, ClaimRequest, Entry, EntryState, Error, Fenced, Layer, ListQuery, OnExpired,
    Outcome, OwnerToken, Page, Resolution, Resolved, State, Store, ToolError, Verified,
    WriteOptions,
};

/// A store on a file in its own temporary directory, removed when the store is dropped.
#[derive(Debug)]
struct TempStore {
    store: SqliteStore,
    _dir: TempDir,
}

fn temp_store_with(options: SqliteOptions) -> Arc<dyn Store> {
    let dir = tempfile::tempdir().unwrap();
    let store = options.open(dir.path().join("toolonce.db")).unwrap();
    Arc::new(TempStore { store, _dir: dir })
}

#[async_trait]
impl Store for TempStore {
    async fn claim(&self, req: &ClaimRequest<'_>) -> toolonce::Result<Claim> {
        self.store.claim(req).await
    }
    async fn renew(
        &self,
        key: &OperationKey,
        owner: &OwnerToken,
        lease: Duration,
    ) -> toolonce::Result<bool> {
        self.store.renew(key, owner, lease).await
    }
    async fn complete(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        result: &Value,
        retention: Duration,
    ) -> toolonce::Result<Fenced> {
        self.store.complete(key, owner, result, retention).await
    }
    async fn fail(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        error: &ToolError,
        sticky: Option<Duration>,
    ) -> toolonce::Result<Fenced> {
        self.store.fail(key, owner, error, sticky).await
    }
    async fn get(&self, key: &OperationKey) -> toolonce::Result<Option<Entry>> {
        self.store.get(key).await
    }
    async fn list(&self, query: &ListQuery) -> toolonce::Result<Page> {
        self.store.list(query).await
    }
    async fn resolve(
        &self,
        key: &OperationKey,
        resolution: &Resolution,
        retention: Duration,
    ) -> toolonce::Result<Resolved> {
        self.store.resolve(key, resolution, retention).await
    }
    async fn delete(&self, key: &OperationKey) -> toolonce::Result<bool> {
        self.store.delete(key).await
    }
    async fn purge_expired(&self) -> toolonce::Result<u64> {
        self.store.purge_expired().await
    }
}

store_conformance!(async { temp_store_with(SqliteOptions::new()) });

/// The same suite with every write on the connection thread (inline reads only).
mod without_inline_writes {
    use super::*;
    store_conformance!(async { temp_store_with(SqliteOptions::new().inline_writes(false)) });
}

/// The same suite with every statement on the connection thread (no inline reads).
mod without_inline_reads {
    use super::*;
    store_conformance!(async { temp_store_with(SqliteOptions::new().readers(0)) });
}

/// The same suite on a private in-memory database (one connection, no readers).
mod in_memory {
    use super::*;
    store_conformance!(async {
        Arc::new(SqliteStore::open(":memory:").unwrap()) as Arc<dyn Store>
    });
}

// ---------------------------------------------------------------------------------------------
// Several processes on one file.

const MP_PATH: &str = "TOOLONCE_SQLITE_PATH";

/// The body of the worker processes of the next test; a no-op in a normal test run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_process_worker() {
    if !conformance::multiprocess::is_worker() {
        return;
    }
    let store = SqliteStore::open(std::env::var(MP_PATH).unwrap()).unwrap();
    conformance::multiprocess::worker(Arc::new(store)).await;
}

#[test]
fn eight_processes_running_the_same_500_operations_execute_each_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    // Create the schema once up front, so the workers' opening is the common case (the
    // concurrent creation is covered by the next test).
    drop(SqliteStore::open(&path).unwrap());
    conformance::multiprocess::run_workers(
        "multi_process_worker",
        &[(MP_PATH, path.to_string_lossy().into_owned())],
        8,
        500,
    );
}

#[test]
fn processes_opening_a_new_file_at_once_create_the_schema_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    conformance::multiprocess::run_workers(
        "multi_process_worker",
        &[(MP_PATH, path.to_string_lossy().into_owned())],
        4,
        20,
    );
}

/// Regression: switching a new file to WAL answered "database is locked" at once (SQLite does
/// not call the busy handler there) while another process was creating the same file and
/// writing to it, so a process opening the store at the wrong moment failed (about 1 run in 25
/// of the test above). Many rounds of more processes make the window likely to be hit.
#[test]
fn processes_opening_new_files_together_never_find_them_locked() {
    for _round in 0..10 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.db");
        conformance::multiprocess::run_workers(
            "multi_process_worker",
            &[(MP_PATH, path.to_string_lossy().into_owned())],
            8,
            10,
        );
    }
}

// ---------------------------------------------------------------------------------------------
// A crash between claim and complete.

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
                "crash_worker_charges_then_hangs",
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
    assert_eq!(
        store
            .resolve(&ops[0].key, &Resolution::Release, conformance::LONG)
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

// ---------------------------------------------------------------------------------------------
// Schema and files.

fn raw(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(path).unwrap()
}

fn config_message(result: toolonce::Result<SqliteStore>) -> String {
    match result {
        Err(Error::Config(message)) => message,
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

#[tokio::test]
async fn reopening_a_database_keeps_its_entries() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keep.db");
    let (key, fp) = conformance::op("keep");
    {
        let store = SqliteStore::open(&path).unwrap();
        let owner = conformance::won(
            store
                .claim_fresh(&key, &fp, conformance::LONG)
                .await
                .unwrap(),
        );
        let result = json!({"receipt": "r_1", "ratio": 0.1});
        assert_eq!(
            store
                .complete(&key, owner, &result, conformance::LONG)
                .await
                .unwrap(),
            Fenced::Applied
        );
    }
    let store = SqliteStore::open(&path).unwrap();
    match conformance::existing(
        store
            .claim_fresh(&key, &fp, conformance::LONG)
            .await
            .unwrap(),
    )
    .state
    {
        EntryState::Done { result, .. } => {
            assert_eq!(result, json!({"receipt": "r_1", "ratio": 0.1}))
        }
        other => panic!("expected the completed entry, got {other:?}"),
    }
}

#[test]
fn a_database_with_a_newer_schema_is_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("future.db");
    drop(SqliteStore::open(&path).unwrap());
    raw(&path)
        .pragma_update(None, "user_version", SCHEMA_VERSION + 6)
        .unwrap();
    let message = config_message(SqliteStore::open(&path));
    let expected = format!(
        "has schema version {}, newer than this toolonce knows ({SCHEMA_VERSION}): upgrade toolonce",
        SCHEMA_VERSION + 6
    );
    assert!(message.contains(&expected), "{message}");
    assert!(message.contains("future.db"), "{message}");
}

#[test]
fn a_database_of_another_program_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    let conn = raw(&path);
    conn.execute_batch("CREATE TABLE notes (body TEXT); PRAGMA user_version = 3;")
        .unwrap();
    drop(conn);
    let message = config_message(SqliteStore::open(&path));
    assert!(message.contains("is not a toolonce database"), "{message}");
}

#[test]
fn a_missing_directory_is_a_clear_error_and_is_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no").join("such").join("dir.db");
    let message = config_message(SqliteStore::open(&path));
    assert!(message.contains("does not exist"), "{message}");
    assert!(message.contains("dir.db"), "{message}");
    assert!(!dir.path().join("no").exists());
}

#[test]
fn a_file_that_is_not_a_database_is_a_store_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "x".repeat(4096)).unwrap();
    match SqliteStore::open(&path) {
        Err(e @ Error::Store(_)) => {
            let text = e.report().to_string();
            assert!(text.contains("notes.txt"), "{text}");
        }
        other => panic!("expected a store error, got {other:?}"),
    }
}

/// `../..` up to the root from the current directory, then `path`: a relative spelling of an
/// absolute path.
fn relative_to_cwd(path: &Path) -> PathBuf {
    let cwd = std::env::current_dir().unwrap();
    let mut relative = PathBuf::new();
    for _ in cwd.components().skip(1) {
        relative.push("..");
    }
    relative.join(path.strip_prefix("/").unwrap())
}

#[tokio::test]
async fn store_urls_open_relative_absolute_and_in_memory_databases() {
    let dir = tempfile::tempdir().unwrap();
    let absolute = dir.path().join("abs.db");
    let relative = relative_to_cwd(&dir.path().join("rel.db"));
    assert!(relative.is_relative());
    for url in [
        format!("sqlite://{}", absolute.display()),
        format!("sqlite://{}", relative.display()),
        "sqlite://:memory:".to_owned(),
    ] {
        let store = toolonce::store::open(&url).await.unwrap();
        let (key, fp) = conformance::op("url");
        conformance::won(
            store
                .claim_fresh(&key, &fp, conformance::LONG)
                .await
                .unwrap(),
        );
        assert!(store.get(&key).await.unwrap().is_some(), "{url}");
    }
    assert!(absolute.exists());
    assert!(dir.path().join("rel.db").exists());
    let err = toolonce::store::open("sqlite://").await.unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err:?}");
}

// ---------------------------------------------------------------------------------------------
// Errors.

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
        store.list(&ListQuery::new()).await.unwrap_err(),
    ] {
        match err {
            Error::Corrupt { key: k, reason } => {
                assert_eq!(k, key.as_str());
                assert!(reason.contains("not JSON"), "{reason}");
            }
            other => panic!("expected a corrupt entry, got {other:?}"),
        }
    }
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

// ---------------------------------------------------------------------------------------------
// Migration from schema version 1.

/// Schema version 1 exactly as toolonce wrote it before entries could be `unknown`, with the
/// statements it claimed and settled with: the tests below make version-1 files with them, as
/// today's code would have, then open them with this version.
const V1_SCHEMA: &str = "
CREATE TABLE toolonce_entries (
    key         TEXT PRIMARY KEY NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('running', 'done', 'failed')),
    owner       TEXT,
    fingerprint TEXT,
    started_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    settled_at  INTEGER,
    payload     TEXT
);
CREATE INDEX toolonce_entries_expires_at ON toolonce_entries (expires_at);
";
const V1_CLAIM: &str = "INSERT INTO toolonce_entries \
     (key, state, owner, fingerprint, started_at, expires_at, settled_at, payload) \
     VALUES (?1, 'running', ?2, ?3, ?4, ?5, NULL, NULL) \
     ON CONFLICT (key) DO UPDATE SET state = 'running', owner = excluded.owner, \
     fingerprint = excluded.fingerprint, started_at = excluded.started_at, \
     expires_at = excluded.expires_at, settled_at = NULL, payload = NULL \
     WHERE toolonce_entries.expires_at <= ?4";
const V1_COMPLETE: &str = "UPDATE toolonce_entries SET state = 'done', owner = NULL, \
     payload = ?3, settled_at = ?4, expires_at = ?5 \
     WHERE key = ?1 AND state = 'running' AND owner = ?2 AND expires_at > ?4";
const V1_FAIL_STICKY: &str = "UPDATE toolonce_entries SET state = 'failed', owner = NULL, \
     payload = ?3, settled_at = ?4, expires_at = ?5 \
     WHERE key = ?1 AND state = 'running' AND owner = ?2 AND expires_at > ?4";

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn at(ms: i64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::from_millis(ms as u64)
}

/// A new version-1 file as today's code creates it: WAL, the application id, version 1.
fn v1_file(path: &Path) -> rusqlite::Connection {
    let conn = raw(path);
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    conn.execute_batch(V1_SCHEMA).unwrap();
    conn.pragma_update(None, "application_id", i32::from_be_bytes(*b"tool"))
        .unwrap();
    conn.pragma_update(None, "user_version", 1).unwrap();
    conn
}

/// A version-1 claim of `key` by `owner`, started at `started` with its lease ending at
/// `lease_end`, as today's store writes it (a fresh key, so the claim must insert).
fn v1_claim(
    conn: &rusqlite::Connection,
    key: &OperationKey,
    fp: &Fingerprint,
    owner: &str,
    started: i64,
    lease_end: i64,
) {
    let wrote = conn
        .execute(
            V1_CLAIM,
            rusqlite::params![key.as_str(), owner, fp.as_str(), started, lease_end],
        )
        .unwrap();
    assert_eq!(wrote, 1);
}

#[tokio::test]
async fn a_version_1_file_is_migrated_and_its_entries_keep_their_meaning() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.db");
    let now = now_ms();
    let hour = 3_600_000;
    let (done, done_fp) = conformance::op("v1-done");
    let (failed, failed_fp) = conformance::op("v1-failed");
    let (live, live_fp) = conformance::op("v1-live");
    let (crashed, crashed_fp) = conformance::op("v1-crashed");
    let (ancient, ancient_fp) = conformance::op("v1-ancient");
    let (gone, gone_fp) = conformance::op("v1-gone");
    let result = json!({"receipt": "r_1", "ratio": 0.1});
    let error = ToolError::permanent("card declined").with_detail(json!({"code": "declined"}));
    {
        let conn = v1_file(&path);
        // Settled entries.
        v1_claim(&conn, &done, &done_fp, "o-done", now - 2_000, now + hour);
        let settled = conn
            .execute(
                V1_COMPLETE,
                rusqlite::params![
                    done.as_str(),
                    "o-done",
                    result.to_string(),
                    now - 1_000,
                    now + hour
                ],
            )
            .unwrap();
        assert_eq!(settled, 1);
        v1_claim(
            &conn,
            &failed,
            &failed_fp,
            "o-failed",
            now - 2_000,
            now + hour,
        );
        let settled = conn
            .execute(
                V1_FAIL_STICKY,
                rusqlite::params![
                    failed.as_str(),
                    "o-failed",
                    serde_json::to_string(&error).unwrap(),
                    now - 1_000,
                    now + hour
                ],
            )
            .unwrap();
        assert_eq!(settled, 1);
        // A running entry whose lease lives; one whose owner died a second ago (its lease ran
        // out unsettled: version 1 would have let the next caller run it again); one whose
        // lease ran out more than the retention ago; a done entry past its retention.
        v1_claim(&conn, &live, &live_fp, "o-live", now - 1_000, now + hour);
        v1_claim(
            &conn,
            &crashed,
            &crashed_fp,
            "o-crashed",
            now - 2_000,
            now - 1_000,
        );
        v1_claim(
            &conn,
            &ancient,
            &ancient_fp,
            "o-ancient",
            now - 26 * hour,
            now - 25 * hour,
        );
        v1_claim(
            &conn,
            &gone,
            &gone_fp,
            "o-gone",
            now - 3 * hour,
            now - 2 * hour,
        );
        let settled = conn
            .execute(
                V1_COMPLETE,
                rusqlite::params![gone.as_str(), "o-gone", "1", now - 3 * hour, now - hour],
            )
            .unwrap();
        assert_eq!(settled, 1);
    }

    let store = SqliteStore::open(&path).unwrap();
    let version: i64 = raw(&path)
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    assert_eq!(SCHEMA_VERSION, 2);

    // Settled entries read back as they were, with nothing recorded that version 1 did not
    // know.
    let entry = store.get(&done).await.unwrap().expect("the done entry");
    match &entry.state {
        EntryState::Done {
            result: r,
            completed_at,
        } => {
            assert_eq!(r, &result);
            assert_eq!(*completed_at, Some(at(now - 1_000)));
        }
        other => panic!("expected done, got {other:?}"),
    }
    assert_eq!(entry.expires_at, Some(at(now + hour)));
    assert_eq!(entry.started_at, at(now - 2_000));
    assert_eq!(entry.settled_at, Some(at(now - 1_000)));
    assert_eq!(entry.fingerprint.as_ref(), Some(&done_fp));
    assert_eq!((entry.attempts, entry.first_started_at), (0, None));
    assert!(entry.about.is_empty(), "{:?}", entry.about);
    match conformance::existing(
        store
            .claim_fresh(&done, &done_fp, conformance::LONG)
            .await
            .unwrap(),
    )
    .state
    {
        EntryState::Done { result: r, .. } => assert_eq!(r, result),
        other => panic!("a duplicate of the done entry got {other:?}"),
    }
    match store
        .get(&failed)
        .await
        .unwrap()
        .expect("the failed entry")
        .state
    {
        EntryState::Failed {
            error: e,
            failed_at,
        } => {
            assert_eq!(e, error);
            assert_eq!(failed_at, Some(at(now - 1_000)));
        }
        other => panic!("expected failed, got {other:?}"),
    }

    // The live running entry is still running for its owner until its lease ends: a duplicate
    // sees it in flight, and its owner (a process of the new version with the same token)
    // settles it.
    let entry = store.get(&live).await.unwrap().expect("the running entry");
    assert_eq!(
        entry.state,
        EntryState::Running {
            owner: Some("o-live".into())
        }
    );
    assert_eq!(
        entry.expires_at,
        Some(at(now + hour)),
        "the lease is the version-1 expiry"
    );
    assert_eq!(
        conformance::existing(
            store
                .claim_fresh(&live, &live_fp, conformance::LONG)
                .await
                .unwrap()
        )
        .state(),
        State::Running
    );
    assert_eq!(
        store
            .complete(
                &live,
                OwnerToken::from_stored("o-live"),
                &json!("late"),
                conformance::LONG
            )
            .await
            .unwrap(),
        Fenced::Applied
    );

    // The crashed one is `unknown` now, not absent: a duplicate is told so, and runs it again
    // only when it takes it over.
    let entry = store
        .get(&crashed)
        .await
        .unwrap()
        .expect("the crashed entry is kept");
    assert_eq!(
        entry.state,
        EntryState::Unknown {
            owner: Some("o-crashed".into())
        }
    );
    assert_eq!(
        entry.expires_at,
        Some(at(now - 1_000)),
        "the lease deadline"
    );
    assert_eq!(
        conformance::existing(
            store
                .claim_fresh(&crashed, &crashed_fp, conformance::LONG)
                .await
                .unwrap()
        )
        .state(),
        State::Unknown
    );
    assert_eq!(
        store
            .list(&ListQuery::new().state(State::Unknown))
            .await
            .unwrap()
            .entries
            .iter()
            .map(|e| e.key.clone())
            .collect::<Vec<_>>(),
        vec![crashed.clone()]
    );
    let taker = OwnerToken::generate();
    let req = ClaimRequest::new(&crashed, &crashed_fp, &taker, conformance::LONG).takeover(true);
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::TookOver));
    let entry = store.get(&crashed).await.unwrap().unwrap();
    assert_eq!(entry.state(), State::Running);
    assert_eq!(
        entry.attempts, 0,
        "version 1 did not count attempts: still not known"
    );

    // Past its retention, or past its lease by more than the retention: absent, and claimable.
    assert!(store.get(&ancient).await.unwrap().is_none());
    assert!(store.get(&gone).await.unwrap().is_none());
    conformance::won(
        store
            .claim_fresh(&ancient, &ancient_fp, conformance::LONG)
            .await
            .unwrap(),
    );
    assert_eq!(
        store.purge_expired().await.unwrap(),
        1,
        "the expired done entry"
    );

    // Opening the migrated file again changes nothing.
    drop(store);
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.get(&crashed).await.unwrap().unwrap().state(),
        State::Running
    );
}

/// The tables and indexes of a file, as SQLite keeps their definitions.
fn schema_of(path: &Path) -> Vec<(String, String)> {
    let conn = raw(path);
    let mut stmt = conn
        .prepare("SELECT name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

#[test]
fn a_migrated_file_has_exactly_the_schema_of_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (dir.path().join("old.db"), dir.path().join("new.db"));
    drop(v1_file(&old));
    drop(SqliteStore::open(&old).unwrap());
    drop(SqliteStore::open(&new).unwrap());
    let migrated = schema_of(&old);
    assert_eq!(migrated, schema_of(&new));
    assert_eq!(
        migrated
            .iter()
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>(),
        ["toolonce_entries", "toolonce_entries_kept_until"],
        "the version-1 table and its index are gone"
    );
    assert_eq!(user_version(&old), 2);
}

fn user_version(path: &Path) -> i64 {
    raw(path)
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap()
}

/// A process of the older version that opened the file before another process migrated it
/// still holds its connection and its statements: they must fail, not write rows whose columns
/// mean what they meant in version 1 (a lease where the new version reads how long to keep the
/// row).
#[test]
fn a_version_1_process_still_holding_the_file_fails_loudly_after_the_migration() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixed.db");
    let old = v1_file(&path);
    let (key, fp) = conformance::op("mixed");
    let now = now_ms();
    old.execute(
        V1_CLAIM,
        rusqlite::params![key.as_str(), "o-old", fp.as_str(), now, now + 60_000],
    )
    .unwrap();
    drop(SqliteStore::open(&path).unwrap());
    let (other, other_fp) = conformance::op("mixed");
    let err = old
        .execute(
            V1_CLAIM,
            rusqlite::params![
                other.as_str(),
                "o-old",
                other_fp.as_str(),
                now,
                now + 60_000
            ],
        )
        .unwrap_err();
    assert!(err.to_string().contains("column"), "{err}");
    assert!(err.to_string().contains("expires_at"), "{err}");
    let err = old
        .execute(
            V1_COMPLETE,
            rusqlite::params![key.as_str(), "o-old", "1", now, now + 60_000],
        )
        .unwrap_err();
    assert!(err.to_string().contains("column"), "{err}");
    assert!(err.to_string().contains("expires_at"), "{err}");
}

/// Several processes open one version-1 file at once: each may be the one that migrates it,
/// exactly one does (under the write lock), and all then share it.
#[test]
fn processes_opening_a_version_1_file_at_once_migrate_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let conn = v1_file(&path);
    let (key, fp) = conformance::op("before");
    let now = now_ms();
    v1_claim(&conn, &key, &fp, "o", now, now + 3_600_000);
    conn.execute(
        V1_COMPLETE,
        rusqlite::params![key.as_str(), "o", "\"kept\"", now, now + 3_600_000],
    )
    .unwrap();
    drop(conn);
    conformance::multiprocess::run_workers(
        "multi_process_worker",
        &[(MP_PATH, path.to_string_lossy().into_owned())],
        4,
        20,
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    assert_eq!(user_version(&path), 2);
    let store = SqliteStore::open(&path).unwrap();
    match rt.block_on(store.get(&key)).unwrap().expect("kept").state {
        EntryState::Done { result, .. } => assert_eq!(result, json!("kept")),
        other => panic!("expected the version-1 result, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// `unknown` on SQLite, beyond the conformance suite.

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
                        Claim::Won => panic!("a takeover of another's entry answered Won"),
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
        let resolve = {
            let (store, key) = (operator.clone(), key.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .resolve(
                        &key,
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
