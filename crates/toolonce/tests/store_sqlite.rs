//! The SQLite store: the conformance suite (on a file with inline reads and writes, on a file
//! without inline writes, on one without either, and in memory), several OS processes sharing one file, a real crash between claim and complete,
//! the schema versioning and the mapping of SQLite's errors.

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
use toolonce::key::{self, OperationKey};
use toolonce::store::sqlite::{SCHEMA_VERSION, SqliteOptions, SqliteStore};
use toolonce::{
    Claim, ClaimRequest, Entry, EntryState, Error, Fenced, Layer, ListQuery, Outcome, OwnerToken,
    Page, Resolution, Resolved, State, Store, ToolError, WriteOptions,
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
const CRASH_MARKER: &str = "TOOLONCE_SQLITE_CRASH_MARKER";
const CRASH_SCOPE: &str = "TOOLONCE_SQLITE_CRASH_SCOPE";
const CRASH_LEASE: Duration = Duration::from_secs(1);

fn charge_args() -> Value {
    json!({"customer": "cus_1", "payment": {"amount": 4200, "currency": "eur"}})
}

/// The child of the next test: claims the charge through the layer, "charges" (writes the key
/// it was given to the marker file), then hangs until it is killed. A no-op in a normal run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_worker_charges_then_hangs() {
    let Ok(db) = std::env::var(CRASH_DB) else {
        return;
    };
    let marker = PathBuf::from(std::env::var(CRASH_MARKER).unwrap());
    let scope = std::env::var(CRASH_SCOPE).unwrap();
    let layer = Layer::new(Arc::new(SqliteStore::open(db).unwrap()));
    let op = key::derive(&scope, "charge", &charge_args(), None).unwrap();
    let options = WriteOptions::new().lease(CRASH_LEASE);
    let _ = layer
        .run("charge", &op, &options, |ctx| async move {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_after_charging_is_reclaimed_with_the_same_key_once_its_lease_expires() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash.db");
    let marker = dir.path().join("charged");
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
            .env(CRASH_MARKER, &marker)
            .env(CRASH_SCOPE, &scope)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_file(&marker, &mut child.0, Duration::from_secs(60));
    child.0.kill().unwrap(); // SIGKILL: no destructor, no complete, no fail.
    child.0.wait().unwrap();
    let killed_at = Instant::now();
    let charged_with = std::fs::read_to_string(&marker).unwrap();

    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&db).unwrap());
    let layer = Layer::new(store.clone());
    let op = key::derive(&scope, "charge", &charge_args(), None).unwrap();
    assert_eq!(charged_with, op.key.as_str());

    // The claim survived the crash: the entry is running, and a duplicate is refused while
    // the lease lives.
    let entry = store
        .get(&op.key)
        .await
        .unwrap()
        .expect("the crashed claim is still there");
    assert_eq!(entry.state(), State::Running);
    let options = WriteOptions::new().lease(CRASH_LEASE);
    let early = layer
        .run("charge", &op, &options, |_| async {
            panic!("ran during the lease")
        })
        .await;
    assert_eq!(early.outcome, Outcome::InFlight, "{early:?}");

    // Once the lease has run out, the next caller reclaims it and charges again with the same
    // key, which the payment provider deduplicates.
    while store.get(&op.key).await.unwrap().is_some() {
        assert!(
            killed_at.elapsed() < CRASH_LEASE * 5,
            "the lease never expired"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen = Arc::new(Mutex::new(None));
    let seen_in_tool = seen.clone();
    let answer = layer
        .run("charge", &op, &options, |ctx| async move {
            *seen_in_tool.lock().unwrap() = Some((ctx.key().clone(), ctx.may_have_run_before()));
            Ok(json!({"charge": "ch_2", "idempotency_key": ctx.key().as_str()}))
        })
        .await;
    assert_eq!(answer.outcome, Outcome::Executed, "{answer:?}");
    let (key, may_have_run_before) = seen.lock().unwrap().take().expect("the tool ran");
    assert_eq!(
        key.as_str(),
        charged_with,
        "the reclaimed run got the crashed run's key"
    );
    // Observed, not asserted: a claim that simply finds the entry expired cannot tell the layer
    // that it took an earlier run's place (`Claim::Won` carries nothing), so
    // `may_have_run_before()` is false here although the crashed run did charge.
    eprintln!("may_have_run_before() after reclaiming a crashed run: {may_have_run_before}");

    let replay = layer
        .run("charge", &op, &options, |_| async { panic!("ran twice") })
        .await;
    assert_eq!(replay.outcome, Outcome::Replayed);
    assert_eq!(replay.result, answer.result);
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
    match conformance::existing(
        store
            .claim_fresh(&key, &fp, conformance::LONG)
            .await
            .unwrap(),
    )
    .state
    {
        EntryState::Done { result, .. } => assert_eq!(result, json!("ok")),
        other => panic!("expected the result, got {other:?}"),
    }
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
