//! `sslmode` and `sslrootcert` against a real PostgreSQL server with `ssl=on` and a server
//! certificate for 127.0.0.1 signed by a CA the test makes with `openssl`. Whether a
//! connection really uses TLS is read from the server's own `pg_stat_ssl`.

#![cfg(feature = "postgres")]

use std::sync::{Arc, OnceLock};

use serde_json::json;
use toolonce::store::postgres::PostgresStore;
use toolonce::{Error, Layer, Outcome, WriteOptions, key};
use toolonce_testsupport::{PostgresServer, TestCertificates};

/// One TLS server for the file, and its certificates.
fn tls_server() -> &'static (PostgresServer, TestCertificates, tempfile::TempDir) {
    static SERVER: OnceLock<(PostgresServer, TestCertificates, tempfile::TempDir)> =
        OnceLock::new();
    SERVER.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let certs = TestCertificates::make(dir.path());
        let server = PostgresServer::start_with_tls(&certs.server_cert(), &certs.server_key());
        (server, certs, dir)
    })
}

/// A fresh database on the TLS server and a URL for it with `options` as its query.
fn database_url(options: &str) -> (String, String) {
    let (server, _, _) = tls_server();
    let url = server.create_unique_database();
    let database = url.rsplit('/').next().unwrap().to_owned();
    (format!("{url}?{options}"), database)
}

async fn connect(url: &str) -> Result<PostgresStore, Error> {
    PostgresStore::builder(url).pool_size(2).connect().await
}

/// Runs a write call twice (executed, then replayed) so the pool holds a connection, then
/// returns what the server says about the TLS of this database's connections: one `t` or `f`
/// per connection.
async fn ssl_of_connections(store: PostgresStore, database: &str) -> String {
    let layer = Layer::new(Arc::new(store));
    let op = key::derive("tls", "charge", &json!({"n": 1}), None).unwrap();
    for expected in [Outcome::Executed, Outcome::Replayed] {
        let answer = layer
            .run("charge", &op, &WriteOptions::new(), |_| async {
                Ok(json!("ok"))
            })
            .await;
        assert_eq!(answer.outcome, expected, "{answer:?}");
    }
    let ssl = tls_server().0.psql(&format!(
        "SELECT string_agg(s.ssl::text, ',') FROM pg_stat_ssl s \
         JOIN pg_stat_activity a USING (pid) WHERE a.datname = '{database}'"
    ));
    drop(layer);
    ssl
}

fn refusal(result: Result<PostgresStore, Error>) -> Error {
    match result {
        Ok(store) => panic!("connected: {store:?}"),
        Err(e) => e,
    }
}

#[cfg(feature = "postgres-tls")]
mod with_tls {
    use super::*;

    fn ca() -> String {
        tls_server().1.ca().to_str().unwrap().to_owned()
    }

    #[tokio::test]
    async fn require_connects_over_tls() {
        let (url, db) = database_url("sslmode=require");
        let ssl = ssl_of_connections(connect(&url).await.unwrap(), &db).await;
        assert!(
            !ssl.is_empty() && !ssl.contains('f'),
            "ssl per connection: {ssl}"
        );
    }

    #[tokio::test]
    async fn verify_full_with_the_ca_connects_over_tls() {
        let (url, db) = database_url(&format!("sslmode=verify-full&sslrootcert={}", ca()));
        let ssl = ssl_of_connections(connect(&url).await.unwrap(), &db).await;
        assert!(
            !ssl.is_empty() && !ssl.contains('f'),
            "ssl per connection: {ssl}"
        );
    }

    #[tokio::test]
    async fn verify_full_refuses_a_certificate_for_another_host_name() {
        // Connect to 127.0.0.1 while naming another host: the certificate is for 127.0.0.1.
        let (url, _) = database_url(&format!(
            "sslmode=verify-full&sslrootcert={}&hostaddr=127.0.0.1",
            ca()
        ));
        let url = url.replace("@127.0.0.1:", "@db.toolonce.invalid:");
        let e = refusal(connect(&url).await);
        let report = e.report().to_string();
        assert!(matches!(e, Error::Store(_)), "{report}");
        assert!(!e.is_retryable(), "{report}");
        assert!(
            report.contains("TLS") && report.contains("not valid for name"),
            "{report}"
        );

        // verify-ca checks the chain only: the same URL connects.
        let url = url.replace("sslmode=verify-full", "sslmode=verify-ca");
        connect(&url).await.unwrap();
    }

    #[tokio::test]
    async fn verify_full_and_verify_ca_without_the_ca_are_refused() {
        for mode in ["verify-full", "verify-ca"] {
            // The system's trust store does not know the test CA.
            let (url, _) = database_url(&format!("sslmode={mode}"));
            let e = refusal(connect(&url).await);
            let report = e.report().to_string();
            assert!(matches!(e, Error::Store(_)), "{mode}: {report}");
            assert!(!e.is_retryable(), "{mode}: {report}");
            assert!(
                report.contains("TLS") && report.contains("UnknownIssuer"),
                "{mode}: {report}"
            );
        }
        // `require` with a root certificate checks the chain, as libpq does: another CA's
        // certificate fails it.
        let other = tempfile::tempdir().unwrap();
        let other = TestCertificates::make(other.path());
        let (url, _) = database_url(&format!(
            "sslmode=require&sslrootcert={}",
            other.ca().display()
        ));
        let report = refusal(connect(&url).await).report().to_string();
        assert!(report.contains("TLS"), "{report}");
    }

    #[tokio::test]
    async fn require_against_a_server_without_tls_is_refused() {
        let plain = toolonce_testsupport::shared_postgres();
        let url = format!("{}?sslmode=require", plain.create_unique_database());
        let e = refusal(connect(&url).await);
        let report = e.report().to_string();
        assert!(matches!(e, Error::Store(_)), "{report}");
        assert!(!e.is_retryable(), "{report}");
        assert!(report.contains("server does not support TLS"), "{report}");
    }

    #[tokio::test]
    async fn prefer_uses_tls_when_offered_and_disable_never_does() {
        let (url, db) = database_url("sslmode=prefer");
        let ssl = ssl_of_connections(connect(&url).await.unwrap(), &db).await;
        assert!(!ssl.is_empty() && !ssl.contains('f'), "prefer: {ssl}");
        let (url, db) = database_url("sslmode=disable");
        let ssl = ssl_of_connections(connect(&url).await.unwrap(), &db).await;
        assert!(!ssl.is_empty() && !ssl.contains('t'), "disable: {ssl}");
        // A server without TLS: prefer falls back to plain text.
        let plain = toolonce_testsupport::shared_postgres();
        connect(&format!(
            "{}?sslmode=prefer",
            plain.create_unique_database()
        ))
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn an_unreadable_root_certificate_file_is_a_configuration_error() {
        let (url, _) = database_url("sslmode=verify-full&sslrootcert=/nonexistent/ca.pem");
        match refusal(connect(&url).await) {
            Error::Config(m) => assert!(m.contains("/nonexistent/ca.pem"), "{m}"),
            other => panic!("{}", other.report()),
        }
    }
}

#[cfg(not(feature = "postgres-tls"))]
#[tokio::test]
async fn a_build_without_tls_refuses_sslmode_require_rather_than_connect_in_plain_text() {
    for mode in ["require", "verify-ca", "verify-full"] {
        let (url, db) = database_url(&format!("sslmode={mode}"));
        match refusal(connect(&url).await) {
            Error::Config(m) => assert!(m.contains("postgres-tls") && m.contains(mode), "{m}"),
            other => panic!("{mode}: {}", other.report()),
        }
        let connections = tls_server().0.psql(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = '{db}'"
        ));
        assert_eq!(connections, "0", "{mode}: nothing may connect");
    }
    // disable and prefer connect in plain text, as libpq built without TLS does.
    for mode in ["disable", "prefer"] {
        let (url, db) = database_url(&format!("sslmode={mode}"));
        let ssl = ssl_of_connections(connect(&url).await.unwrap(), &db).await;
        assert!(!ssl.is_empty() && !ssl.contains('t'), "{mode}: {ssl}");
    }
}
