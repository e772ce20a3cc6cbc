//! A table that a build of schema version 2 made and wrote to, upgraded to version 3 by this
//! build's `migrate` with every entry as it was. The version-2 table is made from the
//! migration files themselves (`src/store/postgres/migrations/`), with the placeholders filled
//! as the store fills them, and written with the statements that build issued.

use std::time::SystemTime;

use serde_json::Value;
use toolonce::store::postgres::connect_client;
use toolonce::{Entry, Fenced, ToolError};

use super::*;

/// A quoted identifier, as the store quotes a checked table name.
fn quote(identifier: &str) -> String {
    format!("\"{}\"", identifier.replace('"', "\"\""))
}

/// The tables of schema version 2 for `table`, as a build of that version left them: the
/// version table saying 2, and migration steps 1 and 2 from their files.
fn version_two_schema(table: &str) -> String {
    let steps = [
        include_str!("../../../src/store/postgres/migrations/001_entries.sql"),
        include_str!("../../../src/store/postgres/migrations/002_reclaim_own_entry.sql"),
    ];
    let mut sql = String::from(
        "CREATE TABLE IF NOT EXISTS toolonce_schema (
             table_name text PRIMARY KEY,
             version integer NOT NULL,
             migrated_at timestamptz NOT NULL DEFAULT now()
         );\n",
    );
    for step in steps {
        sql.push_str(
            &step
                .replace("{{table}}", &quote(table))
                .replace(
                    "{{expires_at_index}}",
                    &quote(&format!("{table}_expires_at")),
                )
                .replace("{{claim}}", &quote(&format!("{table}_claim")))
                .replace("{{version_table}}", "toolonce_schema"),
        );
    }
    sql.push_str(&format!(
        "INSERT INTO toolonce_schema (table_name, version) VALUES ('{table}', 2);"
    ));
    sql
}

/// Today's (version 2) statements, as that build issued them, to write rows the way it did.
struct VersionTwo {
    claim: String,
    complete: String,
    fail: String,
}

impl VersionTwo {
    fn new(table: &str) -> VersionTwo {
        let t = quote(table);
        let claim = quote(&format!("{table}_claim"));
        let fence = "key = $1 AND state = 'running' AND owner = $2 AND expires_at > now()";
        let retention = "now() + $4::bigint * interval '1 millisecond'";
        VersionTwo {
            claim: format!("SELECT won FROM {claim}($1, $2, $3, $4)"),
            complete: format!(
                "UPDATE {t} SET state = 'done', owner = NULL, result = $3::text::json, \
                 settled_at = now(), expires_at = {retention} WHERE {fence}"
            ),
            fail: format!(
                "UPDATE {t} SET state = 'failed', owner = NULL, error = $3::text::json, \
                 settled_at = now(), expires_at = {retention} WHERE {fence}"
            ),
        }
    }
}

fn derived(n: u32) -> toolonce::key::Derived {
    toolonce::key::derive("upgrade", "t", &serde_json::json!({"n": n}), None).unwrap()
}

async fn claim(
    store: &PostgresStore,
    op: &toolonce::key::Derived,
    owner: &OwnerToken,
    takeover: bool,
) -> Claim {
    let req = ClaimRequest::new(&op.key, &op.fingerprint, owner, Duration::from_secs(60))
        .takeover(takeover);
    store.claim(&req).await.unwrap()
}

/// A table at version 2 holding what today's build writes (a live running entry, one whose
/// owner is about to die, one whose lease already lapsed, a done and a failed one) is
/// brought to version 3 by `migrate` with every entry as it was: the lapsed one absent,
/// the settled ones replayable verbatim, the live one still its owner's to complete, and
/// the dying one `unknown` once its lease runs out, rather than absent as version 2 would
/// have left it. A process of the old build still connected is refused with a reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_at_version_two_holding_entries_upgrades_to_version_three_with_them() {
    let url = toolonce_testsupport::shared_postgres().create_unique_database();
    let store = PostgresStore::builder(url.clone())
        .migrate_on_connect(false)
        .connect()
        .await
        .unwrap();
    let client = connect_client(&url).await.unwrap();
    client
        .batch_execute(&version_two_schema(store.table()))
        .await
        .unwrap();
    let v2 = VersionTwo::new(store.table());
    let (live, dying, lapsed, done, failed) =
        (derived(1), derived(2), derived(3), derived(4), derived(5));
    let owners: Vec<OwnerToken> = (0..5).map(|_| OwnerToken::generate()).collect();
    let dying_lease_ms: i64 = 3_000;
    for (op, owner, lease_ms) in [
        (&live, &owners[0], 60_000_i64),
        (&dying, &owners[1], dying_lease_ms),
        (&lapsed, &owners[2], 1),
        (&done, &owners[3], 60_000),
        (&failed, &owners[4], 60_000),
    ] {
        let row = client
            .query_one(
                &v2.claim,
                &[
                    &op.key.as_str(),
                    &owner.as_str(),
                    &op.fingerprint.as_str(),
                    &lease_ms,
                ],
            )
            .await
            .unwrap();
        assert!(row.get::<_, bool>(0));
    }
    let result_text = r#"{"receipt":"r_1","amount":1.0}"#;
    let n = client
        .execute(
            &v2.complete,
            &[
                &done.key.as_str(),
                &owners[3].as_str(),
                &result_text,
                &60_000_i64,
            ],
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    let declined = ToolError::permanent("card declined");
    let n = client
        .execute(
            &v2.fail,
            &[
                &failed.key.as_str(),
                &owners[4].as_str(),
                &serde_json::to_string(&declined).unwrap(),
                &60_000_i64,
            ],
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    // `started_at` read directly (version 2 has no `get` of this build).
    let dying_started: SystemTime = client
        .query_one(
            &format!(
                "SELECT started_at FROM {} WHERE key = $1",
                quote(store.table())
            ),
            &[&dying.key.as_str()],
        )
        .await
        .unwrap()
        .get(0);
    tokio::time::sleep(Duration::from_millis(50)).await; // `lapsed` is past its lease.
    drop(client);

    assert_eq!(store.migrate().await.unwrap(), 1);
    assert_eq!(store.schema_version().await.unwrap(), SCHEMA_VERSION);

    // The live entry: still running, its lease the one it had (not the retention), nothing
    // recorded about it, and its owner completes it.
    let entry = store.get(&live.key).await.unwrap().expect("the live entry");
    assert_eq!(
        entry.state,
        EntryState::Running {
            owner: Some(owners[0].as_str().to_owned())
        }
    );
    let lease_left = entry
        .expires_at
        .unwrap()
        .duration_since(SystemTime::now())
        .unwrap_or_default();
    assert!(lease_left <= Duration::from_secs(61), "{lease_left:?}");
    assert_eq!((entry.attempts, entry.first_started_at), (0, None));
    assert!(entry.about.is_empty());
    assert!(matches!(
        claim(&store, &live, &OwnerToken::generate(), true).await,
        Claim::Existing(_)
    ));
    let receipt = serde_json::json!({"receipt": "r_0"});
    assert_eq!(
        store
            .complete(
                &live.key,
                owners[0].duplicate(),
                &receipt,
                Duration::from_secs(60)
            )
            .await
            .unwrap(),
        Fenced::Applied
    );

    // The lapsed one is absent, as it was.
    assert_eq!(store.get(&lapsed.key).await.unwrap(), None);
    assert!(matches!(
        claim(&store, &lapsed, &OwnerToken::generate(), false).await,
        Claim::Won
    ));

    // The settled ones replay, the result as written.
    match claim(&store, &done, &OwnerToken::generate(), true).await {
        Claim::Existing(e) => {
            match &e.state {
                EntryState::Done { result, .. } => {
                    let written: Value = serde_json::from_str(result_text).unwrap();
                    assert_eq!(*result, written);
                }
                other => panic!("{other:?}"),
            }
            assert!(e.settled_at.is_some());
        }
        other => panic!("{other:?}"),
    }
    match claim(&store, &failed, &OwnerToken::generate(), true).await {
        Claim::Existing(Entry {
            state: EntryState::Failed { error, .. },
            ..
        }) => assert_eq!(error, declined),
        other => panic!("{other:?}"),
    }

    // The dying owner dies: once its lease has run out the entry is unknown, not absent.
    tokio::time::sleep(Duration::from_millis(dying_lease_ms as u64 + 500)).await;
    let entry = store
        .get(&dying.key)
        .await
        .unwrap()
        .expect("kept as unknown");
    assert_eq!(
        entry.state,
        EntryState::Unknown {
            owner: Some(owners[1].as_str().to_owned())
        }
    );
    assert!(matches!(
        claim(&store, &dying, &OwnerToken::generate(), false).await,
        Claim::Existing(Entry {
            state: EntryState::Unknown { .. },
            ..
        })
    ));
    let rerun = OwnerToken::generate();
    assert!(matches!(
        claim(&store, &dying, &rerun, true).await,
        Claim::TookOver
    ));
    let entry = store.get(&dying.key).await.unwrap().unwrap();
    assert_eq!(entry.attempts, 2, "the version 2 attempt, then this one");
    assert_eq!(entry.first_started_at, Some(dying_started));
    assert_eq!(
        store
            .complete(
                &dying.key,
                owners[1].duplicate(),
                &receipt,
                Duration::from_secs(60)
            )
            .await
            .unwrap(),
        Fenced::NotOwner,
        "taken over: the old owner's late complete is refused"
    );

    // The result's text is the one version 2 wrote, byte for byte.
    let client = connect_client(&url).await.unwrap();
    let sql = format!(
        "SELECT result::text FROM {} WHERE key = $1",
        quote(store.table())
    );
    let row = client.query_one(&sql, &[&done.key.as_str()]).await.unwrap();
    assert_eq!(row.get::<_, &str>(0), result_text);

    // A process of the old build, still connected, is told why its claims fail.
    let op = derived(6);
    let err = client
        .query_one(
            &v2.claim,
            &[
                &op.key.as_str(),
                &OwnerToken::generate().as_str(),
                &op.fingerprint.as_str(),
                &60_000_i64,
            ],
        )
        .await
        .unwrap_err();
    let text = err
        .as_db_error()
        .map(|db| db.message().to_owned())
        .unwrap_or_default();
    assert!(
        text.contains("schema version 3") && text.contains("upgrade"),
        "{err:?}"
    );
}
