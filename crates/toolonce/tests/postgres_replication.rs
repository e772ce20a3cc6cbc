//! PostgreSQL with a hot standby, on real servers on loopback: the guarantee that
//! `replicas=N` gives on Redis comes on PostgreSQL from synchronous replication
//! (`synchronous_standby_names` and `synchronous_commit`), which toolonce works under
//! unchanged; and a store pointed at the standby is refused on connect, saying it is
//! read-only, instead of failing every write.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use toolonce::key;
use toolonce::store::postgres::{DEFAULT_TABLE, PostgresStore};
use toolonce::{Error, Layer, Outcome, WriteOptions};
use toolonce_testsupport::PostgresServer;

/// One primary and its hot standby for the binary (a base backup costs a checkpoint and a
/// copy of the cluster: see the time printed when it is made).
fn pair() -> &'static (PostgresServer, PostgresServer) {
    static PAIR: OnceLock<(PostgresServer, PostgresServer)> = OnceLock::new();
    PAIR.get_or_init(|| {
        let primary = PostgresServer::start();
        let standby = primary.start_standby();
        (primary, standby)
    })
}

/// Makes the standby synchronous with `synchronous_commit = level` and waits until the
/// primary reports it so.
fn synchronous(primary: &PostgresServer, level: &str) {
    primary.psql("ALTER SYSTEM SET synchronous_standby_names = '*'");
    primary.psql(&format!("ALTER SYSTEM SET synchronous_commit = '{level}'"));
    primary.psql("SELECT pg_reload_conf()");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let state = primary.psql("SELECT sync_state FROM pg_stat_replication");
        let setting = primary.psql("SHOW synchronous_commit");
        if state.trim() == "sync" && setting.trim() == level {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the standby is not synchronous: {state:?}, {setting:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_synchronous_replication_a_write_runs_once_and_its_result_is_on_the_standby() {
    let (primary, standby) = pair();
    for level in ["on", "remote_apply"] {
        synchronous(primary, level);
        let store = PostgresStore::connect(&primary.url()).await.unwrap();
        let layer = Layer::new(std::sync::Arc::new(store));
        let op = key::derive(&format!("sync-{level}"), "charge", &json!({"n": 1}), None).unwrap();
        let runs = AtomicU32::new(0);
        let options = WriteOptions::new();
        for expected in [Outcome::Executed, Outcome::Replayed] {
            let answer = layer
                .run("charge", &op, &options, |_| async {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok(json!({"receipt": "r_1"}))
                })
                .await;
            assert_eq!(answer.outcome, expected, "{level}: {answer:?}");
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{level}");
        if level == "remote_apply" {
            // The commit returned only once the standby applied it: it reads it at once.
            let on_standby = standby.psql(&format!(
                "SELECT count(*) FROM {DEFAULT_TABLE} WHERE key = '{}' AND state = 'done'",
                op.key.as_str()
            ));
            assert_eq!(on_standby.trim(), "1", "the standby lacks the result");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_on_a_hot_standby_is_refused_on_connect_as_read_only() {
    let (_, standby) = pair();
    match PostgresStore::connect(&standby.url()).await {
        Err(Error::Config(message)) => {
            assert!(message.contains("hot standby"), "{message}");
            assert!(message.contains("read-only"), "{message}");
            assert!(message.contains("primary"), "{message}");
        }
        other => panic!(
            "a store on a hot standby was not refused: {:?}",
            other.err()
        ),
    }
}
