//! No principal can take every gateway session: each has a quota of sessions
//! (`--max-sessions-per-principal`, a quarter of `--max-sessions` by default), a session that
//! only did its handshake is ended after `--handshake-idle`, and one principal's requests
//! without a session cannot hold every shared proxy.

use super::jwt_issuer::{Signer, jwks, now};
use super::*;

const ISSUER: &str = "https://idp.example.test";
const RESOURCE: &str = "https://gateway.example.test/mcp";

/// A gateway in front of the stdio test server (its executions in `dir`'s counter) whose
/// clients are principals of `signer`'s tokens, with `extra` options.
fn gateway_of_principals(dir: &Path, signer: &Signer, extra: &[&str]) -> Gateway {
    let file = dir.join("jwks.json");
    std::fs::write(&file, jwks(&[signer]).to_string()).unwrap();
    let file = file.display().to_string();
    let mut args = vec![
        "--oauth-jwks",
        &file,
        "--oauth-issuer",
        ISSUER,
        "--oauth-resource",
        RESOURCE,
    ];
    args.extend_from_slice(extra);
    gateway_for_command_with(&dir.join("counter"), &args)
}

/// The `Authorization` line of `sub`'s token.
fn as_user(signer: &Signer, sub: &str) -> String {
    let token = signer.sign(&json!({"iss": ISSUER, "aud": RESOURCE, "sub": sub,
                                    "exp": now() + 300, "iat": now()}));
    format!("Authorization: Bearer {token}\r\n")
}

fn initialize_as(port: u16, auth: &str) -> Raw {
    raw(port, "POST", &format!("{JSON_ONLY}{auth}"), INITIALIZE)
}

#[test]
fn a_principal_beyond_its_quarter_of_max_sessions_gets_429_while_another_still_opens_one() {
    let dir = tempfile::tempdir().unwrap();
    let signer = Signer::ec("ec-1");
    let mut gateway = gateway_of_principals(dir.path(), &signer, &["--max-sessions", "8"]);
    let port = gateway.port;
    let (alice, bob) = (as_user(&signer, "alice"), as_user(&signer, "bob"));
    for _ in 0..2 {
        let opened = initialize_as(port, &alice);
        assert_eq!(opened.status(), 200, "{}", opened.body);
    }
    let refused = initialize_as(port, &alice);
    assert_eq!(refused.status(), 429, "{}", refused.body);
    assert!(
        refused.header("mcp-session-id").is_none(),
        "{}",
        refused.head
    );
    let body: Value = serde_json::from_str(&refused.body).unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("--max-sessions-per-principal") && message.contains('2'),
        "{body}"
    );
    let bobs = initialize_as(port, &bob);
    assert_eq!(bobs.status(), 200, "{}", bobs.body);
    assert_eq!(
        live_children(gateway.pid()),
        3,
        "no server for the refused one"
    );
    gateway.stop();
}

#[test]
fn max_sessions_per_principal_sets_the_quota_and_a_bad_value_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let signer = Signer::ec("ec-1");
    let mut gateway =
        gateway_of_principals(dir.path(), &signer, &["--max-sessions-per-principal", "1"]);
    let (alice, bob) = (as_user(&signer, "alice"), as_user(&signer, "bob"));
    assert_eq!(initialize_as(gateway.port, &alice).status(), 200);
    assert_eq!(initialize_as(gateway.port, &alice).status(), 429);
    assert_eq!(initialize_as(gateway.port, &bob).status(), 200);
    gateway.stop();
    refused_at_start(
        &[
            ("--max-sessions-per-principal", "0"),
            ("--handshake-idle", "0"),
        ],
        &[],
    );
}

#[test]
fn a_session_that_only_did_its_handshake_is_ended_after_handshake_idle_freeing_its_slot() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let mut gateway = gateway_for_command_with(
        &counter,
        &["--max-sessions", "2", "--handshake-idle", "0.5"],
    );
    let port = gateway.port;
    let abandoned = open_session(port);
    let working = open_session(port);
    let ping = raw(port, "POST", &format!("{JSON_ONLY}{working}"), PING);
    assert_eq!(ping.status(), 200, "{}", ping.body);
    assert_eq!(raw(port, "POST", JSON_ONLY, INITIALIZE).status(), 503);
    eventually("the abandoned handshake's server is stopped", || {
        live_children(gateway.pid()) == 1
    });
    let gone = raw(port, "POST", &format!("{JSON_ONLY}{abandoned}"), PING);
    assert_eq!(gone.status(), 404, "{}", gone.body);
    // The session that sent a request is kept (for --session-idle, 30 minutes).
    std::thread::sleep(Duration::from_millis(700));
    let ping = raw(port, "POST", &format!("{JSON_ONLY}{working}"), PING);
    assert_eq!(ping.status(), 200, "{}", ping.body);
    // The freed slot takes a new session.
    open_session(port);
    gateway.stop();
}

#[test]
fn requests_without_a_session_of_one_principal_cannot_take_the_proxies_another_needs() {
    let dir = tempfile::tempdir().unwrap();
    let signer = Signer::ec("ec-1");
    // A quarter of 4 sessions: one proxy without a session per principal (16 requests).
    let mut gateway = gateway_of_principals(dir.path(), &signer, &["--max-sessions", "4"]);
    let port = gateway.port;
    let (alice, bob) = (as_user(&signer, "alice"), as_user(&signer, "bob"));
    let held: Vec<TcpStream> = (0..16)
        .map(|i| {
            let params = json!({"name": "hang", "arguments": {"n": i}});
            modern_send(port, &alice, "tools/call", Some(json!(i)), params)
        })
        .collect();
    let counter = dir.path().join("counter");
    eventually("Alice's 16 calls are in progress", || {
        std::fs::read_to_string(&counter)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("hang\t"))
            .count()
            == 16
    });
    let refused = modern_answer(port, &alice, "tools/list", "more", json!({}));
    assert_eq!(refused.status(), 429, "{}", refused.body);
    assert!(
        refused.body.contains("--max-sessions-per-principal"),
        "{}",
        refused.body
    );
    let bobs = modern_answer(port, &bob, "tools/list", "b", json!({}));
    assert_eq!(bobs.status(), 200, "{}", bobs.body);
    drop(held);
    gateway.stop();
}
