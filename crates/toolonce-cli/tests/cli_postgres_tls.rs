//! The `toolonce` command on PostgreSQL over TLS (the `postgres-tls` feature, on by default):
//! `exec` and `ls` with `sslmode=verify-full` and the server's CA, and a refusal that says why
//! when the certificate does not check out.

#![cfg(feature = "postgres-tls")]

mod cli_support;

use std::path::Path;
use std::process::Output;

use cli_support::{code, stderr, stdout, toolonce};
use toolonce_testsupport::{PostgresServer, TestCertificates};

/// `toolonce exec --store <url> --scope s --name <name> -- sh -c <script>`, run in `dir`.
fn exec_on(dir: &Path, url: &str, name: &str, script: &str) -> Output {
    toolonce()
        .current_dir(dir)
        .args(["exec", "--store", url, "--scope", "s", "--name", name])
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap()
}

#[test]
fn exec_and_ls_work_with_verify_full_and_a_wrong_ca_is_refused_naming_the_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let certs = TestCertificates::make(dir.path());
    let server = PostgresServer::start_with_tls(&certs.server_cert(), &certs.server_key());
    let base = server.create_unique_database();
    let url = format!(
        "{base}?sslmode=verify-full&sslrootcert={}",
        certs.ca().display()
    );

    for _ in 0..2 {
        let out = exec_on(dir.path(), &url, "tls", "echo ran >> counter; echo hello");
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert_eq!(stdout(&out), "hello\n");
    }
    assert_eq!(cli_support::lines(&dir.path().join("counter")), 1);
    let ls = toolonce().args(["ls", "--store", &url]).output().unwrap();
    assert_eq!(code(&ls), 0, "{}", stderr(&ls));
    assert!(stdout(&ls).contains("done"), "{}", stdout(&ls));

    // Another CA: the command is not run, and the message says what failed.
    let other = tempfile::tempdir().unwrap();
    let other = TestCertificates::make(other.path());
    let url = format!(
        "{base}?sslmode=verify-full&sslrootcert={}",
        other.ca().display()
    );
    let out = exec_on(dir.path(), &url, "tls2", "echo ran >> counter");
    assert_ne!(code(&out), 0);
    assert_eq!(cli_support::lines(&dir.path().join("counter")), 1);
    let err = stderr(&out);
    assert!(err.contains("TLS") && err.contains("certificate"), "{err}");
}

/// `toolonce bench` with a small run (one caller, one round), its table on stdout.
fn bench_table(url: &str) -> String {
    let out = toolonce()
        .args(["bench", "--store", url, "--ops", "20"])
        .args(["--concurrency", "1", "--rounds", "1"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    stdout(&out)
}

#[test]
fn bench_times_the_raw_floor_over_tls_whenever_the_store_uses_it_and_in_plain_text_only_when_it_does_not()
 {
    let dir = tempfile::tempdir().unwrap();
    let certs = TestCertificates::make(dir.path());
    let server = PostgresServer::start_with_tls(&certs.server_cert(), &certs.server_key());
    let base = server.create_unique_database();
    let verified = format!(
        "{base}?sslmode=verify-full&sslrootcert={}",
        certs.ca().display()
    );
    // The default `prefer` encrypts when the server offers TLS, as this one does.
    for url in [base.clone(), format!("{base}?sslmode=require"), verified] {
        let table = bench_table(&url);
        assert!(
            table.contains("one connection per caller, TLS;"),
            "{url}: {table}"
        );
    }
    let table = bench_table(&format!("{base}?sslmode=disable"));
    assert!(
        table.contains("one connection per caller, no TLS;"),
        "{table}"
    );
}
