//! `remove` on entries of other writers (`docs/contract.md`, "Wire format"): a settled entry
//! of the reference design records no settling time or attempts, and may carry only
//! `completedAt` or `failedAt`; the script reads each member as the client's decoder does, so
//! the entry read is removed, and another one written since is refused.

use super::*;
use toolonce::{Removed, SeenSettled};

/// Writes `value` under `key` as another writer would, and reads what `rm` would see of it.
async fn written(
    redis: &RedisServer,
    store: &RedisStore,
    key: &toolonce::OperationKey,
    value: &str,
) -> SeenSettled {
    let set = ["SET", &raw_key(store, key), value, "PX", "60000"];
    assert_eq!(redis.command(&set), "OK");
    let entry = store.get(key).await.unwrap().expect("the entry written");
    SeenSettled::of(&entry).unwrap_or_else(|| panic!("not settled: {entry:?}"))
}

#[tokio::test]
async fn remove_deletes_another_writers_settled_entry_read_and_refuses_one_written_since() {
    let redis = shared_redis();
    let store = store_on(&redis.url()).await;
    let started = now_ms() - 1_000;
    let shapes = [
        // The reference design: a start, nothing else.
        format!(r#"{{"status":"done","result":{{"id":"ch_1"}},"startedAt":{started}}}"#),
        // A settling time under the member of its state only, and attempts.
        format!(
            r#"{{"status":"failed","error":"declined","startedAt":{started},"failedAt":{},"attempts":2}}"#,
            started + 5
        ),
        format!(
            r#"{{"status":"done","result":null,"startedAt":{started},"completedAt":{}}}"#,
            started + 7
        ),
        // No start at all: read as started when it settled.
        format!(r#"{{"status":"done","result":1,"completedAt":{started}}}"#),
    ];
    for (n, value) in shapes.iter().enumerate() {
        let op = key::derive("rm-interop", "t", &json!({"n": n}), None).unwrap();
        let seen = written(redis, &store, &op.key, value).await;
        assert_eq!(
            store.remove(&op.key, &seen).await.unwrap(),
            Removed::Applied,
            "{value}"
        );
        assert!(store.get(&op.key).await.unwrap().is_none(), "{value}");
        // Written again with a later start, it is another entry: refused and kept.
        let seen = written(redis, &store, &op.key, value).await;
        let later = value.replace(&started.to_string(), &(started + 1).to_string());
        written(redis, &store, &op.key, &later).await;
        assert!(
            matches!(
                store.remove(&op.key, &seen).await.unwrap(),
                Removed::Changed(_)
            ),
            "{later}"
        );
        assert_eq!(redis.command(&["GET", &raw_key(&store, &op.key)]), later);
    }
}
