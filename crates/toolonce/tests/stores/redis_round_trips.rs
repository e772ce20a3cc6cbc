//! What a write through the layer costs a Redis server in commands: shared by the tests of the
//! Redis store on the machine's server and on older ones.

use std::sync::Arc;

use serde_json::json;
use toolonce::key;
use toolonce::layer::{Layer, Outcome, WriteOptions};
use toolonce::store::redis::RedisStore;
use toolonce_testsupport::RedisServer;

/// A first-time write through the layer on `store`, then its duplicate (whose tool would
/// answer otherwise, and is replayed the first answer): the commands each ran on `server`.
pub(crate) async fn commands_of_a_write_and_its_replay(
    server: &RedisServer,
    store: RedisStore,
    scope: &str,
) -> (Vec<String>, Vec<String>) {
    let layer = Layer::new(Arc::new(store));
    let op = key::derive(scope, "charge", &json!({"amount": 9}), None).unwrap();
    let options = WriteOptions::new();
    let run = |receipt: &'static str| {
        layer.run("charge", &op, &options, move |_| async move {
            Ok(json!({"receipt": receipt}))
        })
    };
    assert_eq!(server.command(&["CONFIG", "RESETSTAT"]), "OK");
    let first = run("r_1").await;
    assert_eq!(first.outcome, Outcome::Executed, "{first:?}");
    let write = server.commands_run();
    assert_eq!(server.command(&["CONFIG", "RESETSTAT"]), "OK");
    let again = run("r_2").await;
    assert_eq!(again.outcome, Outcome::Replayed, "{again:?}");
    assert_eq!(again.result.unwrap(), json!({"receipt": "r_1"}));
    (write, server.commands_run())
}
