//! The fenced removal (`toolonce rm`, `Store::remove`) tells apart the settled entry an operator
//! read from one settled anew by another attempt even when everything else agrees: the same
//! state, attempts, start and settling time (SQLite and Redis keep times in whole
//! milliseconds, so an entry deleted, claimed again and settled within the millisecond of the
//! one read looked the same). Each store's second entry is forged to the first's times, as the
//! same millisecond would leave it, on real SQLite, Redis and PostgreSQL servers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;
use toolonce::store::postgres::PostgresStore;
use toolonce::store::redis::RedisStore;
use toolonce::store::sqlite::SqliteStore;
use toolonce::{Layer, OperationKey, Outcome, Removed, SeenSettled, Store, WriteOptions, key};
use toolonce_testsupport::{shared_postgres, shared_redis};

fn unique(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs the operation of `key` through a layer on `store` and checks it ran.
async fn settle(store: &Arc<dyn Store>, scope: &str) -> OperationKey {
    let op = key::derive(scope, "send", &json!({"to": "bob"}), None).unwrap();
    let answer = Layer::new(store.clone())
        .run("send", &op, &WriteOptions::new(), |_ctx| async {
            Ok(json!("sent"))
        })
        .await;
    assert_eq!(answer.outcome, Outcome::Executed, "{:?}", answer.result);
    op.key
}

/// How each store's raw entry is read and forged.
enum Raw {
    Sqlite(std::path::PathBuf),
    Redis(RedisStore),
    Postgres(String),
}

impl Raw {
    /// The members a forgery copies from the first entry onto the second.
    fn times(&self, key: &OperationKey) -> String {
        match self {
            Raw::Sqlite(path) => {
                let db = rusqlite::Connection::open(path).unwrap();
                db.query_row(
                    "SELECT started_at || '|' || settled_at FROM toolonce_entries WHERE key = ?1",
                    [key.as_str()],
                    |r| r.get(0),
                )
                .unwrap()
            }
            Raw::Redis(store) => shared_redis().command(&["GET", &store.redis_key(key)]),
            Raw::Postgres(database) => shared_postgres().psql_in(
                database,
                &format!(
                    "SELECT started_at::text || '|' || settled_at::text FROM toolonce_entries \
                     WHERE key = '{}'",
                    key.as_str()
                ),
            ),
        }
    }

    /// Gives the live entry of `key` the times `first` (from `times`) of the entry read.
    fn forge(&self, key: &OperationKey, first: &str) {
        match self {
            Raw::Sqlite(path) => {
                let (started, settled) = first.split_once('|').unwrap();
                let db = rusqlite::Connection::open(path).unwrap();
                let sql = "UPDATE toolonce_entries SET started_at = ?2, settled_at = ?3, \
                           first_started_at = ?2 WHERE key = ?1";
                let (started, settled): (i64, i64) =
                    (started.parse().unwrap(), settled.parse().unwrap());
                assert_eq!(
                    db.execute(sql, rusqlite::params![key.as_str(), started, settled])
                        .unwrap(),
                    1
                );
            }
            Raw::Redis(store) => {
                // The first entry's value whole, with the second attempt's owner digest: all
                // the second entry differs in.
                let redis_key = store.redis_key(key);
                let second = shared_redis().command(&["GET", &redis_key]);
                let digest = |value: &str| {
                    let (_, after) = value.split_once(r#""owner":""#).expect("an owner");
                    after[..40].to_owned()
                };
                let forged = first.replace(&digest(first), &digest(&second));
                assert_ne!(forged, first, "the attempts have different owners");
                shared_redis().command(&["SET", &redis_key, &forged, "PX", "600000"]);
            }
            Raw::Postgres(database) => {
                let (started, settled) = first.split_once('|').unwrap();
                shared_postgres().psql_in(
                    database,
                    &format!(
                        "UPDATE toolonce_entries SET started_at = '{started}', \
                         settled_at = '{settled}', first_started_at = '{started}' \
                         WHERE key = '{}'",
                        key.as_str()
                    ),
                );
            }
        }
    }
}

#[tokio::test]
async fn a_stale_removal_never_deletes_an_entry_settled_anew_with_the_same_times() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fence.db");
    let redis = RedisStore::builder(shared_redis().url())
        .prefix(format!("{}:", unique("fence")))
        .connect()
        .await
        .unwrap();
    let pg_url = tokio::task::spawn_blocking(|| shared_postgres().create_unique_database())
        .await
        .unwrap();
    let database = pg_url.rsplit('/').next().unwrap().to_owned();
    let stores: Vec<(&str, Arc<dyn Store>, Raw)> = vec![
        (
            "sqlite",
            Arc::new(SqliteStore::open(&path).unwrap()),
            Raw::Sqlite(path.clone()),
        ),
        ("redis", Arc::new(redis.clone()), Raw::Redis(redis)),
        (
            "postgres",
            Arc::new(PostgresStore::connect(&pg_url).await.unwrap()),
            Raw::Postgres(database),
        ),
    ];
    for (name, store, raw) in stores {
        let scope = unique("fence");
        let key = settle(&store, &scope).await;
        let read = store.get(&key).await.unwrap().unwrap();
        let seen = SeenSettled::of(&read).unwrap();
        assert!(seen.settled_by().is_some(), "{name}: {read:?}");
        let first = raw.times(&key);
        // Another operator removes it, and the agent's retry runs and settles it anew.
        assert_eq!(
            store.remove(&key, &seen).await.unwrap(),
            Removed::Applied,
            "{name}"
        );
        settle(&store, &scope).await;
        raw.forge(&key, &first);
        let now = store.get(&key).await.unwrap().unwrap();
        assert_eq!(
            (now.started_at, now.settled_at, now.attempts),
            (read.started_at, read.settled_at, read.attempts),
            "{name}: the forgery leaves only the settling attempt apart"
        );
        // The stale removal is refused, and the entry kept; a removal of what is there applies.
        match store.remove(&key, &seen).await.unwrap() {
            Removed::Changed(found) => assert_eq!(found.settled_by, now.settled_by, "{name}"),
            other => panic!("{name}: a stale removal answered {other:?}"),
        }
        assert!(store.get(&key).await.unwrap().is_some(), "{name}");
        let fresh = SeenSettled::of(&now).unwrap();
        assert_eq!(
            store.remove(&key, &fresh).await.unwrap(),
            Removed::Applied,
            "{name}"
        );
        // The settling attempt is shown only as a digest.
        let shown = format!("{:?}", now.settled_by.unwrap());
        assert!(
            shown.starts_with("SettledBy(#") && shown.len() < 28,
            "{shown}"
        );
    }
}
