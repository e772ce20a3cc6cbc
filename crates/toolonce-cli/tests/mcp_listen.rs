//! `toolonce mcp --listen`: the proxy as a Streamable HTTP gateway in front of a stdio server
//! (the `mcp_test_server` example). The client is the official TypeScript SDK's Streamable
//! HTTP client (npm `@modelcontextprotocol/sdk`, installed on first use into the target
//! directory). Node.js and npm must be installed: without them these tests fail (they are never
//! skipped), naming what is missing.

#[path = "support/mcp_gateway.rs"]
mod mcp_gateway;
#[path = "support/mcp_peer.rs"]
mod mcp_peer;
#[path = "support/mcp_sdk.rs"]
mod mcp_sdk;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use std::time::{Duration, Instant};

use mcp_gateway::Gateway;
use mcp_peer::{PATIENCE, is_error, test_server, text, toolonce, without_outcome};
use serde_json::{Value, json};

const CLIENT_SCRIPT: &str = include_str!("support/mcp_sdk_http_client.mjs");

/// A token no test would write by accident into a log.
const TOKEN: &str = "tok-3f9a1c77e2b04d5e";

/// The SDK's folder, with this file's scripts in it.
fn sdk_dir() -> &'static Path {
    mcp_sdk::sdk_dir(&[("mcp_sdk_http_client.mjs", CLIENT_SCRIPT)])
}

/// A `toolonce mcp --listen 127.0.0.1:0` process in front of the test server. `store` is the
/// store URL; `extra` adds options; `env` sets variables of the gateway (and of its servers,
/// which inherit them).
fn start_gateway(store: &str, counter: &Path, extra: &[&str], env: &[(&str, &str)]) -> Gateway {
    let mut command = Command::new(toolonce());
    command
        .args(["mcp", "--store", store, "--scope", "listen-test"])
        .args(["--listen", "127.0.0.1:0"])
        .args(extra)
        .arg("--")
        .arg(test_server())
        .env("MCP_TEST_COUNTER", counter)
        .env_remove("MCP_TEST_LOG")
        .envs(env.iter().copied());
    Gateway::spawn(command)
}

/// Starts the SDK's client against `url`; `env` sets CALLS, TOKEN, AMOUNT.
fn sdk_client(url: &str, env: &[(&str, &str)]) -> Child {
    Command::new("node")
        .arg(sdk_dir().join("mcp_sdk_http_client.mjs"))
        .arg(url)
        .env_remove("TOKEN")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the SDK client")
}

/// Waits for the client and returns the JSON object it printed.
fn finish(client: Child) -> Value {
    let output = client.wait_with_output().expect("wait for the SDK client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "the SDK client failed: {stdout}");
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("the SDK client printed {stdout:?}: {e}"))
}

/// The tools the test server ran, one per execution, from its counter file.
fn executions(counter: &Path) -> Vec<String> {
    std::fs::read_to_string(counter)
        .unwrap_or_default()
        .lines()
        .map(|line| line.split('\t').next().unwrap().to_owned())
        .collect()
}

fn count(counter: &Path, tool: &str) -> usize {
    executions(counter).iter().filter(|t| *t == tool).count()
}

fn outcome(result: &Value) -> Option<&str> {
    result["_meta"]["toolonce/outcome"].as_str()
}

/// One raw HTTP/1.1 POST; returns the status line and the whole answer.
fn raw_post(port: u16, headers: &str, body: &str) -> String {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nConnection: close\r\n{headers}\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;

#[test]
fn the_sdk_client_over_http_gets_a_write_run_once_and_its_duplicate_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let mut gateway = start_gateway("memory://", &counter, &[], &[]);
    let got = finish(sdk_client(&gateway.url(), &[]));
    assert!(got.get("error").is_none(), "{got}");
    assert_eq!(got["server"]["name"], "mcp_test_server", "{got}");
    assert!(
        got["tools"].as_array().unwrap().contains(&json!("charge")),
        "{got}"
    );
    assert!(!is_error(&json!({"result": got["first"]})), "{got}");
    assert_eq!(outcome(&got["first"]), None, "{got}");
    assert_eq!(outcome(&got["second"]), Some("replayed"), "{got}");
    assert_eq!(
        text(&json!({"result": got["second"]})),
        text(&json!({"result": got["first"]}))
    );
    assert_eq!(
        without_outcome(&json!({"result": got["second"]})),
        without_outcome(&json!({"result": got["first"]})),
        "the replay is the recorded answer"
    );
    // The read passes through: it runs every time and is never marked.
    assert_eq!(outcome(&got["read"]), None, "{got}");
    assert_eq!(outcome(&got["reread"]), None, "{got}");
    assert_eq!(count(&counter, "charge"), 1, "{:?}", executions(&counter));
    assert_eq!(count(&counter, "lookup"), 2, "{:?}", executions(&counter));
    gateway.stop();
}

#[test]
fn a_missing_or_wrong_bearer_token_gets_401_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let mut gateway = start_gateway(
        "memory://",
        &counter,
        &["--require-token", "LISTEN_TEST_TOKEN"],
        &[("LISTEN_TEST_TOKEN", TOKEN)],
    );
    for headers in [
        String::new(),
        "Authorization: Bearer wrong-token-0000000\r\n".to_owned(),
        format!("Authorization: Basic {TOKEN}\r\n"),
    ] {
        let answer = raw_post(gateway.port, &headers, INITIALIZE);
        assert!(answer.starts_with("HTTP/1.1 401 "), "{headers:?}: {answer}");
        assert!(!answer.contains(TOKEN), "{answer}");
    }
    for env in [vec![], vec![("TOKEN", "wrong-token-0000000")]] {
        let got = finish(sdk_client(&gateway.url(), &env));
        let error = got["error"].as_str().unwrap_or_else(|| panic!("{got}"));
        assert!(
            error.contains("a valid bearer token is required"),
            "{error}"
        );
    }
    // Nothing reached a server: none was even started.
    assert!(executions(&counter).is_empty());
    assert!(
        !counter.exists(),
        "a server was started for a refused client"
    );

    let got = finish(sdk_client(&gateway.url(), &[("TOKEN", TOKEN)]));
    assert!(got.get("error").is_none(), "{got}");
    assert_eq!(outcome(&got["second"]), Some("replayed"), "{got}");
    assert_eq!(count(&counter, "charge"), 1);
    let log = gateway.stop();
    assert!(!log.contains(TOKEN), "the token was logged: {log}");
}

#[test]
fn a_token_variable_that_is_not_set_stops_the_gateway_with_exit_code_2() {
    let output = Command::new(toolonce())
        .args(["mcp", "--store", "memory://", "--listen", "127.0.0.1:0"])
        .args(["--require-token", "LISTEN_TEST_UNSET_TOKEN", "--"])
        .arg(test_server())
        .env_remove("LISTEN_TEST_UNSET_TOKEN")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("LISTEN_TEST_UNSET_TOKEN"), "{stderr}");
}

#[test]
fn two_gateways_on_one_sqlite_file_run_a_write_sent_to_both_at_once_once() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let store = format!("sqlite://{}", dir.path().join("toolonce.db").display());
    let mut a = start_gateway(&store, &counter, &[], &[]);
    let mut b = start_gateway(&store, &counter, &[], &[]);
    for round in ["11", "12", "13"] {
        let env = [("CALLS", "once"), ("AMOUNT", round)];
        let (first, second) = (sdk_client(&a.url(), &env), sdk_client(&b.url(), &env));
        let answers = [finish(first), finish(second)];
        assert_eq!(
            count(&counter, "charge"),
            ["11", "12", "13"].iter().position(|r| *r == round).unwrap() + 1,
            "round {round}: {:?} {answers:?}",
            executions(&counter)
        );
        // One ran it; the other replayed it or was told it is in flight, never ran it again.
        let ran = answers
            .iter()
            .filter(|a| outcome(&a["first"]).is_none() && a["first"]["isError"] != json!(true))
            .count();
        assert!(ran <= 1, "{answers:?}");
    }
    // In sequence, the other gateway replays.
    let got = finish(sdk_client(&b.url(), &[("CALLS", "once"), ("AMOUNT", "11")]));
    assert_eq!(outcome(&got["first"]), Some("replayed"), "{got}");
    assert_eq!(count(&counter, "charge"), 3);
    a.stop();
    b.stop();
}

#[test]
fn a_request_without_a_session_gets_400_and_an_unknown_session_404() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let mut gateway = start_gateway("memory://", &counter, &[], &[]);
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge","arguments":{}}}"#;
    let answer = raw_post(gateway.port, "", call);
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    let answer = raw_post(gateway.port, "Mcp-Session-Id: 00000000\r\n", call);
    assert!(answer.starts_with("HTTP/1.1 404 "), "{answer}");
    let answer = raw_post(gateway.port, "Origin: http://evil.example\r\n", INITIALIZE);
    assert!(answer.starts_with("HTTP/1.1 403 "), "{answer}");
    assert!(executions(&counter).is_empty());
    gateway.stop();
}

/// The session id of an answer to `initialize`.
fn session_of(answer: &str) -> String {
    answer
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("mcp-session-id: ")
                .map(|v| v.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no session id in {answer}"))
}

#[test]
fn a_client_closing_its_connection_cancels_the_request_on_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let log = dir.path().join("server-log");
    let mut gateway = start_gateway(
        "memory://",
        &counter,
        &[],
        &[("MCP_TEST_LOG", log.to_str().unwrap())],
    );
    let answer = raw_post(gateway.port, "", INITIALIZE);
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    let session = format!("Mcp-Session-Id: {}\r\n", session_of(&answer));
    let answer = raw_post(
        gateway.port,
        &session,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert!(answer.starts_with("HTTP/1.1 202 "), "{answer}");

    let call = r#"{"jsonrpc":"2.0","id":"slow-1","method":"tools/call","params":{"name":"slow","arguments":{"ms":60000}}}"#;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", gateway.port)).unwrap();
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\n{session}Content-Length: {}\r\n\r\n{call}",
        call.len()
    )
    .unwrap();
    let deadline = Instant::now() + PATIENCE;
    while count(&counter, "slow") == 0 {
        assert!(
            Instant::now() < deadline,
            "the call never reached the server"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(stream);
    let cancelled = |text: &str| {
        text.lines()
            .any(|l| l.contains("notifications/cancelled") && l.contains("\"slow-1\""))
    };
    while !cancelled(&std::fs::read_to_string(&log).unwrap_or_default()) {
        assert!(
            Instant::now() < deadline,
            "the server was never told: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(count(&counter, "slow"), 1);
    gateway.stop();
}
