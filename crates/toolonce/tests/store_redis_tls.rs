//! `rediss://` against a real `redis-server` with TLS on, with a certificate authority made for
//! the test by the `openssl` command. The client trusts the system's roots
//! (rustls-native-certs), which honour `SSL_CERT_FILE`; setting that variable in this process
//! would be `unsafe`, so the TLS client runs in a child process of this test binary.

use std::process::Command;
use std::sync::Arc;

use serde_json::json;
use toolonce::store::redis::RedisStore;
use toolonce::{Layer, Outcome, WriteOptions, key};
use toolonce_testsupport::{RedisServer, TestCertificates, free_port};

const URL_VAR: &str = "TOOLONCE_REDIS_TLS_URL";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rediss_url_talks_tls_and_checks_the_server_certificate() {
    let dir = tempfile::tempdir().unwrap();
    TestCertificates::make(dir.path());
    let file = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    let tls_port = free_port().to_string();
    let server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &file("server.crt"),
        "--tls-key-file",
        &file("server.key"),
        "--tls-ca-cert-file",
        &file("ca.crt"),
        "--tls-auth-clients",
        "no",
    ]);
    let url = format!("rediss://127.0.0.1:{tls_port}/?prefix=tls%3A");

    // Trusting the test CA, the child connects and runs write calls over TLS.
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "tls_worker",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(URL_VAR, &url)
        .env("SSL_CERT_FILE", file("ca.crt"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "TLS worker failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("tls worker done"));
    // What it wrote went through the TLS port of this very server.
    assert_eq!(server.command(&["DBSIZE"]), "1");

    // Without trusting it (the system roots only), the certificate is refused.
    let refused = RedisStore::builder(&url)
        .reconnect_attempts(0)
        .connect()
        .await
        .unwrap_err();
    let message = format!("{:?}", refused);
    assert!(
        !refused.is_retryable(),
        "a certificate refusal is not worth retrying: {message}"
    );
    assert!(
        message.to_lowercase().contains("certificate") || message.contains("UnknownIssuer"),
        "{message}"
    );
}

/// The TLS client of the test above; does nothing in a normal test run.
#[tokio::test]
async fn tls_worker() {
    let Ok(url) = std::env::var(URL_VAR) else {
        return;
    };
    let layer = Layer::new(Arc::new(RedisStore::connect(&url).await.unwrap()));
    let op = key::derive("tls", "charge", &json!({"amount": 1}), None).unwrap();
    for expected in [Outcome::Executed, Outcome::Replayed] {
        let answer = layer
            .run("charge", &op, &WriteOptions::new(), |_| async {
                Ok(json!("ok"))
            })
            .await;
        assert_eq!(answer.outcome, expected);
    }
    println!("tls worker done");
}
