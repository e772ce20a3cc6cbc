//! No password of a store URL appears in what the library shows: an error's `Display`, `Debug`
//! and report, and the `Debug` of builders and stores, for unreachable servers, wrong
//! passwords and malformed URLs, against real servers where a server is needed.

use toolonce::Error;

/// A password no message has any other reason to contain.
const SECRET: &str = "s3cretPW7x";

/// Fails the test if `SECRET` appears anywhere in the error.
fn assert_hidden(what: &str, e: &Error) {
    for (form, text) in [
        ("Display", e.to_string()),
        ("Debug", format!("{e:?}")),
        ("report", e.report().to_string()),
    ] {
        assert!(
            !text.contains(SECRET),
            "{what}: the password appears in the error's {form}: {text}"
        );
    }
}

async fn open_error(url: &str) -> Error {
    match toolonce::store::open(url).await {
        Ok(store) => panic!("{url} opened: {store:?}"),
        Err(e) => e,
    }
}

#[test]
fn redact_url_hides_passwords_of_every_store_scheme() {
    for url in [
        format!("redis://:{SECRET}@127.0.0.1:6379/"),
        format!("redis://app:{SECRET}@127.0.0.1:6379/0?prefix=a%3A"),
        format!("redis://{SECRET}@127.0.0.1:6379/"),
        format!("rediss://default:{SECRET}@cache.example.com:6380"),
        format!("redis+cluster://:{SECRET}@10.0.0.1:7000,10.0.0.2:7001/"),
        format!("postgres://postgres:{SECRET}@db:5432/app?sslmode=require"),
        format!("postgresql://app@db/app?password={SECRET}"),
        format!("host=db user=app password={SECRET}"),
        format!("host=db password='{SECRET} x'"),
    ] {
        let shown = toolonce::store::redact_url(&url);
        assert!(!shown.contains(SECRET), "{url} shows as {shown}");
        assert!(
            shown.contains("db")
                || shown.contains("127.0.0.1")
                || shown.contains("10.0.0.1")
                || shown.contains("cache.example.com"),
            "{shown}"
        );
    }
}

#[tokio::test]
async fn a_url_the_library_cannot_open_is_shown_without_its_password() {
    for url in [
        format!("nosuch://u:{SECRET}@host/"),
        format!("u:{SECRET}@host"),
        format!("host=db user=app password={SECRET}"),
    ] {
        let e = open_error(&url).await;
        assert!(matches!(e, Error::Config(_)), "{}", e.report());
        assert_hidden(&url, &e);
    }
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use toolonce::store::redis::RedisStore;
    use toolonce_testsupport::{RedisCluster, RedisServer, free_port};

    #[test]
    fn the_debug_of_a_redis_builder_hides_the_password() {
        let builder = RedisStore::builder(format!("redis://:{SECRET}@127.0.0.1:6379/"));
        let text = format!("{builder:?}");
        assert!(!text.contains(SECRET), "{text}");
        assert!(text.contains("127.0.0.1:6379"), "{text}");
    }

    #[tokio::test]
    async fn unreachable_redis_urls_hide_the_password() {
        let port = free_port();
        let mut urls = vec![
            format!("redis://:{SECRET}@127.0.0.1:{port}/"),
            format!("redis://app:{SECRET}@127.0.0.1:{port}/"),
            format!(
                "redis+cluster://:{SECRET}@127.0.0.1:{port},127.0.0.1:{}/",
                free_port()
            ),
            format!("redis://:{SECRET}@127.0.0.1:notaport/"),
        ];
        // Without the TLS feature this is a configuration error; with it, a refused connection.
        urls.push(format!("rediss://:{SECRET}@127.0.0.1:{port}/"));
        for url in urls {
            let e = open_error(&url).await;
            assert_hidden(&url, &e);
        }
    }

    #[tokio::test]
    async fn a_wrong_redis_password_is_refused_without_showing_it() {
        let server = RedisServer::start();
        // Set after the start: the test support's readiness probe does not authenticate.
        assert_eq!(
            server.command(&["CONFIG", "SET", "requirepass", "the-right-one"]),
            "OK"
        );
        for url in [
            format!("redis://:{SECRET}@127.0.0.1:{}/", server.port()),
            format!("redis://default:{SECRET}@127.0.0.1:{}/", server.port()),
        ] {
            let e = open_error(&url).await;
            assert!(!e.is_retryable(), "{}", e.report());
            assert_hidden(&url, &e);
        }
        let store = RedisStore::connect(&format!(
            "redis://:the-right-one@127.0.0.1:{}/",
            server.port()
        ))
        .await
        .unwrap();
        let text = format!("{store:?}");
        assert!(!text.contains("the-right-one"), "{text}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wrong_redis_cluster_password_is_refused_without_showing_it() {
        let cluster = RedisCluster::start();
        for node in cluster.nodes() {
            assert_eq!(
                node.command(&["CONFIG", "SET", "requirepass", "the-right-one"]),
                "OK"
            );
        }
        let seeds: Vec<String> = cluster
            .ports()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let url = format!("redis+cluster://:{SECRET}@{}/", seeds.join(","));
        let e = open_error(&url).await;
        assert_hidden(&url, &e);
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use toolonce::store::postgres::PostgresStore;
    use toolonce_testsupport::{free_port, shared_postgres};

    #[test]
    fn the_debug_of_a_postgres_builder_hides_the_password() {
        let builder = PostgresStore::builder(format!("postgres://u:{SECRET}@db/app"));
        let text = format!("{builder:?}");
        assert!(!text.contains(SECRET), "{text}");
        assert!(text.contains("postgres://u:***@db/app"), "{text}");
    }

    #[tokio::test]
    async fn unreachable_postgres_urls_hide_the_password() {
        let port = free_port();
        for url in [
            format!("postgres://postgres:{SECRET}@127.0.0.1:{port}/postgres"),
            format!("postgresql://postgres@127.0.0.1:{port}/postgres?password={SECRET}"),
            format!("postgres://postgres:{SECRET}@127.0.0.1:{port}/postgres?sslmode=bogus"),
            format!("postgres://postgres:{SECRET}@127.0.0.1:notaport/postgres"),
        ] {
            let e = open_error(&url).await;
            assert_hidden(&url, &e);
        }
    }

    #[tokio::test]
    async fn a_wrong_postgres_password_is_refused_without_showing_it() {
        let server = shared_postgres();
        server.create_user_with_password("secret_user", "the-right-one");
        let url = format!(
            "postgres://secret_user:{SECRET}@127.0.0.1:{}/postgres",
            server.port()
        );
        let e = open_error(&url).await;
        let report = e.report().to_string();
        assert!(
            report.contains("password authentication failed"),
            "{report}"
        );
        assert_hidden(&url, &e);
    }
}
