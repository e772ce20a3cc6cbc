//! Outcomes that cannot be stored or read never release an operation (`docs/contract.md`, "The
//! layer", the rule on unreadable outcomes): a result nested deeper than a stored result may
//! be is recorded as a failure that says so, on every store; an entry another writer stored
//! with a lone surrogate is read; and an entry that cannot be decoded at all is never answered
//! "nothing happened", on real SQLite, Redis and PostgreSQL servers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use serde_json::{Value, json};
use toolonce::store::postgres::PostgresStore;
use toolonce::store::redis::RedisStore;
use toolonce::store::sqlite::SqliteStore;
use toolonce::{Layer, MemoryStore, Outcome, Store, WriteOptions, key};
use toolonce_testsupport::{shared_postgres, shared_redis};

/// An array nested `levels` deep around a string.
fn nested(levels: usize) -> Value {
    let mut value = json!("bottom");
    for _ in 0..levels {
        value = Value::Array(vec![value]);
    }
    value
}

fn unique(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

async fn stores() -> Vec<(&'static str, Arc<dyn Store>)> {
    let dir = tempfile::tempdir().unwrap().keep();
    let sqlite = SqliteStore::open(dir.join("t.db")).unwrap();
    let redis_url = shared_redis().url();
    let redis = RedisStore::connect(&redis_url).await.unwrap();
    let pg_url = tokio::task::spawn_blocking(|| shared_postgres().create_unique_database())
        .await
        .unwrap();
    let postgres = PostgresStore::connect(&pg_url).await.unwrap();
    vec![
        ("memory", Arc::new(MemoryStore::new()) as Arc<dyn Store>),
        ("sqlite", Arc::new(sqlite)),
        ("redis", Arc::new(redis)),
        ("postgres", Arc::new(postgres)),
    ]
}

/// Runs the same write twice through a layer on `store`, the tool answering `result`; returns
/// both answers and how often the tool ran.
async fn twice(
    store: Arc<dyn Store>,
    result: Result<Value, toolonce::ToolError>,
) -> (toolonce::WriteAnswer, toolonce::WriteAnswer, u32) {
    let layer = Layer::new(store);
    let op = key::derive(&unique("deep"), "make_tree", &json!({}), None).unwrap();
    let ran = AtomicU32::new(0);
    let mut answers = Vec::new();
    for _ in 0..2 {
        let answer = layer
            .run("make_tree", &op, &WriteOptions::new(), |_ctx| {
                ran.fetch_add(1, Ordering::SeqCst);
                let result = result.clone();
                async move { result }
            })
            .await;
        answers.push(answer);
    }
    let second = answers.pop().unwrap();
    let first = answers.pop().unwrap();
    (first, second, ran.load(Ordering::SeqCst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_nested_150_levels_is_recorded_as_a_failure_that_says_so_on_every_store() {
    for (name, store) in stores().await {
        let (first, second, ran) = twice(store, Ok(nested(150))).await;
        assert_eq!(ran, 1, "{name}: the tool ran again");
        assert_eq!(first.outcome, Outcome::Executed, "{name}");
        assert_eq!(
            first.result,
            Ok(nested(150)),
            "{name}: the caller gets its result"
        );
        assert_eq!(second.outcome, Outcome::ReplayedFailure, "{name}");
        let error = second.result.unwrap_err();
        assert!(!error.is_transient(), "{name}: {error:?}");
        assert!(
            error
                .message
                .contains("ran, but its result cannot be stored")
                && error.message.contains("150 levels"),
            "{name}: {}",
            error.message
        );
        assert!(
            !error.message.contains("Nothing happened"),
            "{name}: {}",
            error.message
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_error_whose_detail_nests_too_deep_is_stored_without_it_and_says_so() {
    for (name, store) in stores().await {
        let error = toolonce::ToolError::permanent("card declined").with_detail(nested(150));
        let (first, second, ran) = twice(store, Err(error.clone())).await;
        assert_eq!(ran, 1, "{name}: the tool ran again");
        assert_eq!(
            first.result,
            Err(error),
            "{name}: the caller gets its own error"
        );
        assert_eq!(second.outcome, Outcome::ReplayedFailure, "{name}");
        let stored = second.result.unwrap_err();
        assert!(
            stored.message.starts_with("card declined")
                && stored.message.contains("detail was not stored"),
            "{name}: {}",
            stored.message
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_at_the_stored_depth_limit_is_replayed_on_every_store() {
    for (name, store) in stores().await {
        let deepest = nested(toolonce::store::MAX_STORED_DEPTH);
        let (_, second, ran) = twice(store, Ok(deepest.clone())).await;
        assert_eq!(ran, 1, "{name}");
        assert_eq!(
            second.outcome,
            Outcome::Replayed,
            "{name}: {:?}",
            second.result
        );
        assert_eq!(second.result, Ok(deepest), "{name}");
    }
}

/// The Redis key of `key` on a store without a prefix, and the entry a reference-design
/// TypeScript worker writes for a done operation (only `status`, `startedAt`, `result`), with
/// `result` spliced in as raw JSON text.
fn reference_done(result_json: &str) -> String {
    format!(r#"{{"status":"done","startedAt":1764547200000,"result":{result_json}}}"#)
}

#[tokio::test]
async fn a_done_entry_a_typescript_worker_wrote_with_a_lone_surrogate_is_replayed_on_redis() {
    let redis = shared_redis();
    let store: Arc<dyn Store> = Arc::new(RedisStore::connect(&redis.url()).await.unwrap());
    let op = key::derive(&unique("surrogate"), "send", &json!({}), None).unwrap();
    // JSON.stringify("caf\ud83d") writes the lone surrogate as an escape.
    redis.command(&[
        "SET",
        op.key.as_str(),
        &reference_done(r#"{"text":"caf\ud83d"}"#),
        "PX",
        "60000",
    ]);
    let ran = AtomicU32::new(0);
    let answer = Layer::new(store)
        .run("send", &op, &WriteOptions::new(), |_ctx| {
            ran.fetch_add(1, Ordering::SeqCst);
            async { Ok(json!("ran again")) }
        })
        .await;
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    assert_eq!(answer.outcome, Outcome::Replayed, "{:?}", answer.result);
    assert_eq!(answer.result, Ok(json!({"text": "caf\u{fffd}"})));
}

#[tokio::test]
async fn an_entry_that_cannot_be_decoded_is_never_answered_nothing_happened_on_redis() {
    let redis = shared_redis();
    let store: Arc<dyn Store> = Arc::new(RedisStore::connect(&redis.url()).await.unwrap());
    for (what, raw) in [
        ("not JSON", "{not json".to_owned()),
        (
            "a result nested 300 levels",
            reference_done(&nested(300).to_string()),
        ),
    ] {
        let op = key::derive(&unique("garbled"), "send", &json!({}), None).unwrap();
        redis.command(&["SET", op.key.as_str(), &raw, "PX", "60000"]);
        let ran = AtomicU32::new(0);
        let answer = Layer::new(store.clone())
            .run("send", &op, &WriteOptions::new(), |_ctx| {
                ran.fetch_add(1, Ordering::SeqCst);
                async { Ok(json!("ran again")) }
            })
            .await;
        assert_eq!(ran.load(Ordering::SeqCst), 0, "{what}");
        assert_eq!(
            answer.outcome,
            Outcome::Unknown,
            "{what}: {:?}",
            answer.result
        );
        let error = answer.result.unwrap_err();
        assert!(!error.is_transient(), "{what}");
        assert!(
            !error.message.contains("Nothing happened") && error.message.contains("cannot be read"),
            "{what}: {}",
            error.message
        );
    }
}

/// Five entries settled through a layer on `store` in one scope of its own: their keys.
async fn five_done(store: &Arc<dyn Store>) -> Vec<toolonce::OperationKey> {
    let layer = Layer::new(store.clone());
    let scope = unique("listed");
    let mut keys = Vec::new();
    for n in 0..5 {
        let op = key::derive(&scope, "send", &json!({"n": n}), None).unwrap();
        let answer = layer
            .run("send", &op, &WriteOptions::new(), |_ctx| async {
                Ok(json!("sent"))
            })
            .await;
        assert_eq!(answer.outcome, Outcome::Executed);
        keys.push(op.key);
    }
    keys
}

/// Every page of a listing of `store` two entries at a time: the keys read, the keys reported
/// unreadable, and the largest page.
async fn every_page(store: &Arc<dyn Store>) -> (Vec<String>, Vec<String>, usize) {
    let (mut read, mut unreadable, mut largest) = (Vec::new(), Vec::new(), 0);
    let mut query = toolonce::ListQuery::new().limit(2);
    for _ in 0..100 {
        let page = store.list(&query).await.unwrap();
        largest = largest.max(page.entries.len() + page.unreadable.len());
        read.extend(page.entries.iter().map(|e| e.key.as_str().to_owned()));
        unreadable.extend(page.unreadable.iter().map(|u| {
            assert!(!u.reason.is_empty(), "{u:?}");
            u.key.clone()
        }));
        match page.next {
            Some(next) => query = toolonce::ListQuery::new().limit(2).cursor(next),
            None => break,
        }
    }
    read.sort();
    unreadable.sort();
    (read, unreadable, largest)
}

#[tokio::test]
async fn a_listing_reports_entries_it_cannot_decode_and_still_pages_through_every_other_one() {
    // Stores of their own: the shared Redis holds other tests' garbled entries on purpose.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("listed.db");
    let redis = shared_redis();
    let redis_store = RedisStore::builder(redis.url())
        .prefix(format!("{}:", unique("listed")))
        .connect()
        .await
        .unwrap();
    let redis_keys = redis_store.clone();
    let pg_url = tokio::task::spawn_blocking(|| shared_postgres().create_unique_database())
        .await
        .unwrap();
    let database = pg_url.rsplit('/').next().unwrap().to_owned();
    let stores: Vec<(&str, Arc<dyn Store>)> = vec![
        ("sqlite", Arc::new(SqliteStore::open(&path).unwrap())),
        ("redis", Arc::new(redis_store)),
        (
            "postgres",
            Arc::new(PostgresStore::connect(&pg_url).await.unwrap()),
        ),
    ];
    for (name, store) in stores {
        let keys = five_done(&store).await;
        // Two of them garbled as another writer (or a bug) could leave them.
        for k in [&keys[1], &keys[4]] {
            match name {
                "sqlite" => {
                    let db = rusqlite::Connection::open(&path).unwrap();
                    let sql = "UPDATE toolonce_entries SET payload = '{not json' WHERE key = ?1";
                    assert_eq!(db.execute(sql, [k.as_str()]).unwrap(), 1);
                }
                "redis" => {
                    let raw = reference_done(&nested(300).to_string());
                    redis.command(&["SET", &redis_keys.redis_key(k), &raw, "PX", "60000"]);
                }
                _ => {
                    let sql = format!(
                        "UPDATE toolonce_entries SET result = '{}'::json WHERE key = '{}'",
                        nested(300),
                        k.as_str()
                    );
                    shared_postgres().psql_in(&database, &sql);
                }
            }
        }
        let (read, unreadable, largest) = every_page(&store).await;
        let mut want_read: Vec<String> = [&keys[0], &keys[2], &keys[3]]
            .iter()
            .map(|k| k.as_str().to_owned())
            .collect();
        want_read.sort();
        let mut want_unreadable = vec![keys[1].as_str().to_owned(), keys[4].as_str().to_owned()];
        want_unreadable.sort();
        assert_eq!(read, want_read, "{name}");
        assert_eq!(unreadable, want_unreadable, "{name}");
        assert!(
            largest <= 2,
            "{name}: a page of {largest} over its size of 2"
        );
    }
}
