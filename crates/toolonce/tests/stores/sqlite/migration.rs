//! Migration from schema version 1.

use super::processes::MP_PATH;
use super::*;

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
        &super::processes::worker_test(),
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
