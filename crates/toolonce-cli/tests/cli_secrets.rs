//! No store password reaches the terminal: `toolonce ls`, `show`, `exec`, `mcp` and `demo` given store
//! URLs with a password, for servers that are unreachable and real servers that refuse the
//! password, never print it in their messages or logs (debug logs included).

mod cli_support;

use cli_support::{stderr, toolonce};
use toolonce_testsupport::{PostgresServer, RedisServer, free_port};

/// A password no message has any other reason to contain.
const SECRET: &str = "s3cretPW7x";

/// The subcommands that open a store, each with `--store URL`.
fn commands(url: &str) -> Vec<Vec<String>> {
    let key = "idem:0123456789abcdef0123456789abcdef";
    let strings = |args: &[&str]| args.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
    vec![
        strings(&["ls", "--store", url]),
        strings(&["show", key, "--store", url]),
        strings(&[
            "exec", "--store", url, "--scope", "s", "--name", "n", "--", "true",
        ]),
        strings(&["mcp", "--store", url, "--scope", "s", "--", "true"]),
        strings(&["demo", "--store", url]),
        strings(&["bench", "--store", url, "--ops", "1"]),
    ]
}

/// Runs every subcommand on `url` with debug logs and fails if the password shows.
fn assert_hidden_everywhere(url: &str, host: &str) {
    for args in commands(url) {
        let out = toolonce()
            .env("RUST_LOG", "debug")
            .args(&args)
            .write_stdin("")
            .output()
            .unwrap();
        let err = stderr(&out);
        assert!(
            !err.contains(SECRET),
            "`toolonce {}` shows the password:\n{err}",
            args[0]
        );
        // The subcommands that fail say which store they could not open, without its password.
        if args[0] != "mcp" {
            assert!(
                !out.status.success(),
                "`toolonce {}` succeeded: {err}",
                args[0]
            );
            assert!(
                err.contains(host),
                "`toolonce {}` does not name the store:\n{err}",
                args[0]
            );
        } else {
            assert!(
                err.contains(host),
                "`toolonce mcp` does not log the store:\n{err}"
            );
        }
    }
}

#[test]
fn unreachable_stores_are_named_without_their_password() {
    let port = free_port();
    let other = free_port();
    for url in [
        format!("redis://:{SECRET}@127.0.0.1:{port}/"),
        format!("redis://app:{SECRET}@127.0.0.1:{port}/0"),
        format!("rediss://:{SECRET}@127.0.0.1:{port}/"),
        format!("redis+cluster://:{SECRET}@127.0.0.1:{port},127.0.0.1:{other}/"),
        format!("postgres://postgres:{SECRET}@127.0.0.1:{port}/postgres"),
    ] {
        // A build without `redis-tls` refuses rediss:// before it looks at the host.
        let host = if url.starts_with("rediss:") && !cfg!(feature = "redis-tls") {
            String::new()
        } else {
            format!("127.0.0.1:{port}")
        };
        assert_hidden_everywhere(&url, &host);
    }
}

#[test]
fn a_wrong_redis_password_is_not_shown() {
    let server = RedisServer::start();
    // Set after the start: the test support's readiness probe does not authenticate.
    assert_eq!(
        server.command(&["CONFIG", "SET", "requirepass", "the-right-one"]),
        "OK"
    );
    let host = format!("127.0.0.1:{}", server.port());
    assert_hidden_everywhere(&format!("redis://:{SECRET}@{host}/"), &host);
}

#[test]
fn a_wrong_postgres_password_is_not_shown() {
    let server = PostgresServer::start();
    server.create_user_with_password("app", "the-right-one");
    let host = format!("127.0.0.1:{}", server.port());
    assert_hidden_everywhere(&format!("postgres://app:{SECRET}@{host}/postgres"), &host);
}

#[test]
fn a_malformed_url_is_named_without_its_password() {
    for url in [
        format!("nosuch://u:{SECRET}@db.example:1/"),
        format!("u:{SECRET}@db.example"),
    ] {
        assert_hidden_everywhere(&url, "db.example");
    }
}
