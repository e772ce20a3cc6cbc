//! Configuration.

use super::*;

#[tokio::test]
async fn a_prefix_from_the_url_namespaces_the_keys_and_the_listing() {
    let redis = shared_redis();
    let prefix = unique_prefix();
    let url = format!("{}?prefix={}", redis.url(), prefix.replace(':', "%3A"));
    let store = RedisStore::connect(&url).await.unwrap();
    assert_eq!(store.prefix(), prefix);
    let (key, fp) = conformance::op("prefixed");
    let _owner = conformance::won(
        store
            .claim_fresh(&key, &fp, conformance::LONG)
            .await
            .unwrap(),
    );
    assert_eq!(redis.command(&["EXISTS", &format!("{prefix}{key}")]), "1");

    let other = store_on(&redis.url()).await;
    assert!(other.get(&key).await.unwrap().is_none());
    assert!(
        other
            .list(&ListQuery::new())
            .await
            .unwrap()
            .entries
            .is_empty()
    );
    let listed = store.list(&ListQuery::new()).await.unwrap();
    assert_eq!(listed.entries.len(), 1);
    assert_eq!(listed.entries[0].key, key);
}

#[tokio::test]
async fn store_open_picks_redis_from_the_url() {
    let store = toolonce::store::open(&format!(
        "{}?prefix={}",
        shared_redis().url(),
        unique_prefix()
    ))
    .await
    .unwrap();
    assert!(format!("{store:?}").contains("RedisStore"));
    let (key, fp) = conformance::op("open");
    conformance::won(
        store
            .claim_fresh(&key, &fp, conformance::LONG)
            .await
            .unwrap(),
    );
}

#[tokio::test]
async fn a_password_in_the_url_authenticates_and_a_wrong_one_is_refused() {
    let server = RedisServer::start();
    assert_eq!(
        server.command(&["CONFIG", "SET", "requirepass", "s3cret"]),
        "OK"
    );
    let url = format!("redis://:s3cret@127.0.0.1:{}/", server.port());
    let store = RedisStore::connect(&url).await.unwrap();
    let (key, fp) = conformance::op("auth");
    conformance::won(
        store
            .claim_fresh(&key, &fp, conformance::LONG)
            .await
            .unwrap(),
    );
    assert!(!format!("{store:?}").contains("s3cret"), "{store:?}");

    let wrong = format!("redis://:nope@127.0.0.1:{}/", server.port());
    let err = RedisStore::connect(&wrong).await.unwrap_err();
    assert!(
        !err.is_retryable(),
        "a wrong password is not worth retrying: {err:?}"
    );
    // The URL is wrong, not the store: a configuration error, as the bindings and the command
    // report it (ConfigError, exit 2), saying what to change.
    let config = |err: Error| match err {
        Error::Config(message) => message,
        other => panic!("expected a configuration error, got {}", other.report()),
    };
    let message = config(err);
    assert!(message.contains("refused the password"), "{message}");
    assert!(!message.contains("nope"), "{message}");
    // No password at all: it says that the server needs one (not that INFO is refused).
    let none = format!("redis://127.0.0.1:{}/", server.port());
    let message = config(RedisStore::connect(&none).await.unwrap_err());
    assert!(message.contains("needs a password"), "{message}");
    assert!(!message.contains("allow_eviction"), "{message}");
    // A database index the server does not have.
    let index = format!("redis://:s3cret@127.0.0.1:{}/99999", server.port());
    let message = config(RedisStore::connect(&index).await.unwrap_err());
    assert!(message.contains("no such database index"), "{message}");
    assert!(!message.contains("s3cret"), "{message}");
}

#[tokio::test]
async fn connecting_to_a_server_that_is_not_there_is_unavailable() {
    let port = toolonce_testsupport::free_port();
    let err = RedisStore::builder(format!("redis://127.0.0.1:{port}/"))
        .reconnect_attempts(0)
        .connect()
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
}
