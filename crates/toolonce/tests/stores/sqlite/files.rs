//! Schema and files.

use super::*;

fn config_message(result: toolonce::Result<SqliteStore>) -> String {
    match result {
        Err(Error::Config(message)) => message,
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

/// Claims a fresh operation, which must be won, and records `result` for it.
async fn settle(store: &SqliteStore, key: &OperationKey, fp: &Fingerprint, result: Value) {
    let owner = conformance::won(store.claim_fresh(key, fp, conformance::LONG).await.unwrap());
    assert_eq!(
        store
            .complete(key, owner, &result, conformance::LONG)
            .await
            .unwrap(),
        Fenced::Applied
    );
}

#[tokio::test]
async fn reopening_a_database_keeps_its_entries() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keep.db");
    let (key, fp) = conformance::op("keep");
    {
        let store = SqliteStore::open(&path).unwrap();
        settle(&store, &key, &fp, json!({"receipt": "r_1", "ratio": 0.1})).await;
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
fn a_file_that_is_not_a_database_is_a_configuration_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "x".repeat(4096)).unwrap();
    // The URL names the wrong file: no retry fixes that (the bindings' ConfigError, the
    // command's exit 2).
    let message = config_message(SqliteStore::open(&path));
    assert!(message.contains("notes.txt"), "{message}");
    assert!(message.contains("is not a SQLite database"), "{message}");
    // Nothing was written into it.
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "x".repeat(4096));
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

/// Writes never pause here, so a passive checkpoint alone never restarts the log (each finds
/// frames appended since it began): the log grew by every write, 3,000 first-time operations
/// making about 70 MB of it for a database of 1 MB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_written_without_pause_keeps_its_log_short() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.db");
    let store = SqliteStore::open(&path).unwrap();
    let mut wal = dir.path().join("busy.db").into_os_string();
    wal.push("-wal");
    let mut largest = 0;
    for n in 0..3_000 {
        let (key, fp) = conformance::op(&format!("busy-{n}"));
        settle(&store, &key, &fp, json!({"receipt": format!("r_{n}")})).await;
        if n % 100 == 99 {
            largest = largest.max(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0));
        }
    }
    let database = std::fs::metadata(&path).unwrap().len();
    assert!(
        largest < 16 << 20,
        "the log reached {largest} bytes beside a database of {database}"
    );
}
