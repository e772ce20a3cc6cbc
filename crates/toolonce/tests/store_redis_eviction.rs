//! The Redis store refuses a server that may evict its entries (`maxmemory-policy` other than
//! `noeviction`), on a single server and on any master of a cluster, unless the user accepts
//! the risk with `allow_eviction`; against real `redis-server` processes.

#![cfg(feature = "redis")]

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use toolonce::store::redis::RedisStore;
use toolonce::{Error, Layer, Outcome, WriteOptions, key};
use toolonce_testsupport::{RedisCluster, RedisServer};

/// Connects with few retries: a refusal should come at once.
async fn connect(url: &str) -> Result<RedisStore, Error> {
    RedisStore::builder(url)
        .reconnect_attempts(1)
        .connect()
        .await
}

fn config_message(result: Result<RedisStore, Error>) -> String {
    match result {
        Err(Error::Config(message)) => message,
        Err(other) => panic!("expected a configuration error, got {}", other.report()),
        Ok(store) => panic!("connected to a server that may evict: {store:?}"),
    }
}

/// One write call runs and a second replays: the store works.
async fn assert_works(store: RedisStore) {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let layer = Layer::new(Arc::new(store));
    let n = CALLS.fetch_add(1, Ordering::Relaxed);
    let op = key::derive("eviction", "charge", &json!({ "n": n }), None).unwrap();
    for expected in [Outcome::Executed, Outcome::Replayed] {
        let answer = layer
            .run("charge", &op, &WriteOptions::new(), |_| async {
                Ok(json!("ok"))
            })
            .await;
        assert_eq!(answer.outcome, expected);
    }
}

#[tokio::test]
async fn a_server_that_evicts_is_refused_with_the_setting_its_value_and_the_fix() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let message = config_message(connect(&server.url()).await);
    for needle in [
        "maxmemory-policy",
        "allkeys-lru",
        "noeviction",
        "allow_eviction=true",
        &format!("127.0.0.1:{}", server.port()),
    ] {
        assert!(message.contains(needle), "{needle:?} missing in: {message}");
    }
    // Nothing was written.
    assert_eq!(server.command(&["DBSIZE"]), "0");
}

#[tokio::test]
async fn every_evicting_policy_is_refused_and_an_explicit_false_changes_nothing() {
    let server = RedisServer::start();
    for policy in [
        "allkeys-lfu",
        "allkeys-random",
        "volatile-lru",
        "volatile-lfu",
        "volatile-random",
        "volatile-ttl",
    ] {
        assert_eq!(
            server.command(&["CONFIG", "SET", "maxmemory-policy", policy]),
            "OK"
        );
        let message = config_message(connect(&server.url()).await);
        assert!(message.contains(policy), "{message}");
        let url = format!("{}?allow_eviction=false", server.url());
        let message = config_message(connect(&url).await);
        assert!(message.contains(policy), "{message}");
    }
}

#[tokio::test]
async fn allow_eviction_in_the_url_or_the_builder_connects_and_logs_a_warning() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "volatile-lru"]);
    let logs = Logs::default();
    let _guard = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_writer(logs.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .finish(),
    );

    let url = format!("{}?allow_eviction=true&prefix=url%3A", server.url());
    let store = connect(&url).await.unwrap();
    assert_eq!(store.prefix(), "url:");
    assert_works(store).await;
    let text = logs.text();
    assert!(
        text.contains("WARN") && text.contains("volatile-lru") && text.contains("evict"),
        "{text}"
    );

    // The builder's option overrides the URL, both ways.
    let store = RedisStore::builder(server.url())
        .prefix("builder:")
        .allow_eviction(true)
        .connect()
        .await
        .unwrap();
    assert_works(store).await;
    let refused = RedisStore::builder(&url)
        .allow_eviction(false)
        .connect()
        .await;
    assert!(config_message(refused).contains("volatile-lru"));
}

#[tokio::test]
async fn the_default_noeviction_policy_connects_without_a_warning() {
    // With an append-only file: a server that keeps nothing on disk gets the persistence
    // warning, which is another test's subject.
    let server = RedisServer::start_with(&["--appendonly", "yes"]);
    let policy = server.command(&["CONFIG", "GET", "maxmemory-policy"]);
    assert!(policy.contains("noeviction"), "{policy}");
    let logs = Logs::default();
    let _guard = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_writer(logs.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .finish(),
    );
    assert_works(connect(&server.url()).await.unwrap()).await;
    assert_eq!(logs.text(), "");
}

#[tokio::test]
async fn a_policy_that_cannot_be_read_is_refused_unless_the_risk_is_accepted() {
    let server = RedisServer::start();
    // A user that may do everything but INFO.
    assert_eq!(
        server.command(&[
            "ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "+@all", "-info"
        ]),
        "OK"
    );
    let url = format!("redis://noinfo:pw@127.0.0.1:{}/", server.port());
    let message = config_message(connect(&url).await);
    assert!(
        message.contains("cannot read the maxmemory-policy")
            && message.contains("allow_eviction=true")
            && !message.contains(":pw@"),
        "{message}"
    );
    assert_works(
        connect(&format!("{url}?allow_eviction=true"))
            .await
            .unwrap(),
    )
    .await;
}

#[tokio::test]
async fn an_unknown_allow_eviction_value_is_a_configuration_error() {
    let message = config_message(connect("redis://127.0.0.1:1/?allow_eviction=maybe").await);
    assert!(message.contains("allow_eviction"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_one_master_on_a_volatile_policy_is_refused_naming_that_master() {
    let cluster = RedisCluster::start();
    let seeds: Vec<String> = cluster
        .ports()
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    let url = format!("redis+cluster://{}/", seeds.join(","));
    // All three masters on noeviction: it connects.
    assert_works(connect(&url).await.unwrap()).await;

    let evicting = &cluster.nodes()[2];
    assert_eq!(
        evicting.command(&["CONFIG", "SET", "maxmemory-policy", "volatile-ttl"]),
        "OK"
    );
    let message = config_message(connect(&url).await);
    assert!(
        message.contains("volatile-ttl")
            && message.contains(&format!("127.0.0.1:{}", evicting.port()))
            && message.contains("noeviction"),
        "{message}"
    );
    // Accepting the risk connects to the same cluster.
    let allowed = format!("{url}?allow_eviction=true");
    assert_works(
        tokio::time::timeout(Duration::from_secs(60), connect(&allowed))
            .await
            .unwrap()
            .unwrap(),
    )
    .await;
}

/// Captured log output.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;

    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}
