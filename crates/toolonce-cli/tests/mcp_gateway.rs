//! `toolonce mcp --listen` as a gateway: in front of a Streamable HTTP server (`--upstream`,
//! the official TypeScript SDK's server), its event streams (answers as SSE, messages the
//! server sends while handling a request, the `GET` stream), and two gateway processes sharing
//! one real Redis. The clients are the SDK's Streamable HTTP client and raw HTTP/1.1 requests.
//! Node.js, npm and redis-server must be installed: without them these tests fail (they are
//! never skipped), naming what is missing.

#[path = "support/mcp_gateway.rs"]
mod mcp_gateway;
#[path = "support/mcp_http_upstream.rs"]
mod mcp_http_upstream;
#[path = "support/mcp_peer.rs"]
mod mcp_peer;
#[path = "support/mcp_sdk.rs"]
mod mcp_sdk;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use mcp_gateway::Gateway;
use mcp_http_upstream::HttpServer;
use mcp_peer::{PATIENCE, test_server, text, toolonce};
use serde_json::{Value, json};
use toolonce_testsupport::RedisServer;

const SERVER_SCRIPT: &str = include_str!("support/mcp_http_server.mjs");
const BRIDGE_SCRIPT: &str = include_str!("support/mcp_http_bridge.mjs");
const CLIENT_SCRIPT: &str = include_str!("support/mcp_sdk_gateway_client.mjs");

/// A token no test would write by accident into a log.
const UPSTREAM_TOKEN: &str = "up-7c1d0e93a4f25b68";
const GATEWAY_TOKEN: &str = "gw-52b8e0f1c9d74a36";

/// The SDK's folder, with this file's scripts in it.
fn sdk_dir() -> &'static Path {
    mcp_sdk::sdk_dir(&[
        ("mcp_http_server.mjs", SERVER_SCRIPT),
        ("mcp_http_bridge.mjs", BRIDGE_SCRIPT),
        ("mcp_sdk_gateway_client.mjs", CLIENT_SCRIPT),
    ])
}

/// A gateway in front of the HTTP server at `url`; `extra` adds options, `env` variables.
fn gateway_to(url: &str, extra: &[&str], env: &[(&str, &str)]) -> Gateway {
    gateway_on("memory://", url, extra, env)
}

/// The same on the store `store`.
fn gateway_on(store: &str, url: &str, extra: &[&str], env: &[(&str, &str)]) -> Gateway {
    let mut command = Command::new(toolonce());
    command
        .args(["mcp", "--store", store, "--scope", "gateway-test"])
        .args(["--listen", "127.0.0.1:0", "--upstream", url])
        .args(extra)
        .envs(env.iter().copied());
    Gateway::spawn(command)
}

/// A gateway in front of the stdio test server, on `store`, its executions in `counter`.
fn gateway_for_command(store: &str, counter: &Path, env: &[(&str, &str)]) -> Gateway {
    let mut command = Command::new(toolonce());
    command
        .args(["mcp", "--store", store, "--scope", "gateway-test"])
        .args(["--listen", "127.0.0.1:0", "--"])
        .arg(test_server())
        .env("MCP_TEST_COUNTER", counter)
        .env_remove("MCP_TEST_LOG")
        .envs(env.iter().copied());
    Gateway::spawn(command)
}

/// Runs the SDK's client against `url` through `steps` (`[{tool, args}]`) and returns the JSON
/// object it printed; `env` may set TOKEN and ROOT.
fn sdk_client(url: &str, steps: &Value, env: &[(&str, &str)]) -> Value {
    let child: Child = Command::new("node")
        .arg(sdk_dir().join("mcp_sdk_gateway_client.mjs"))
        .arg(url)
        .env_remove("TOKEN")
        .env("STEPS", steps.to_string())
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the SDK client");
    let output = child.wait_with_output().expect("wait for the SDK client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "the SDK client failed: {stdout}");
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("the SDK client printed {stdout:?}: {e}"))
}

fn outcome(result: &Value) -> Option<&str> {
    result["_meta"]["toolonce/outcome"].as_str()
}

fn result_text(result: &Value) -> String {
    text(&json!({ "result": result }))
}

/// Waits until `check` holds, for at most PATIENCE.
fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn a_gateway_in_front_of_an_http_server_runs_a_write_once_across_sessions(mode: &str) {
    let server = HttpServer::start(mode, &[]);
    let mut gateway = gateway_to(&server.url(), &[], &[]);
    let root = "file:///srv/gateway-client";
    let steps = json!([
        {"tool": "write", "args": {"item": "a"}},
        {"tool": "write", "args": {"item": "a"}},
        {"tool": "roots"},
        {"tool": "read"},
    ]);
    let got = sdk_client(&gateway.url(), &steps, &[("ROOT", root)]);
    assert!(got.get("error").is_none(), "{got}");
    assert_eq!(got["server"]["name"], "toolonce-http-test", "{got}");
    let results = got["results"].as_array().unwrap();
    assert_eq!(result_text(&results[0]), "wrote a (execution 1)", "{got}");
    assert_eq!(outcome(&results[0]), None, "{got}");
    assert_eq!(outcome(&results[1]), Some("replayed"), "{got}");
    assert_eq!(result_text(&results[1]), "wrote a (execution 1)", "{got}");
    // The server asked the client for its roots while handling the call: the request went
    // through both legs and the client's answer came back.
    assert_eq!(result_text(&results[2]), root, "{got}");
    assert_eq!(result_text(&results[3]), "1", "{got}");
    if mode == "sse" {
        // The log message the server sent on the call's event stream reached the client.
        assert!(
            got["logs"]
                .as_array()
                .unwrap()
                .contains(&json!("writing a")),
            "{got}"
        );
    }

    // Another session of the gateway: its own session on the server, the same operation.
    let got = sdk_client(
        &gateway.url(),
        &json!([{"tool": "write", "args": {"item": "a"}}]),
        &[],
    );
    assert_eq!(outcome(&got["results"][0]), Some("replayed"), "{got}");
    let executions = server.executions();
    assert_eq!(executions.len(), 1, "{executions:?}");
    assert!(
        executions[0]["key"].as_str().unwrap().starts_with("idem:"),
        "{executions:?}"
    );
    // Each client session had a session of its own on the server, ended with it.
    let count = |method: &str, initialize: bool| {
        server
            .requests()
            .iter()
            .filter(|r| r["method"] == method)
            .filter(|r| {
                !initialize
                    || r["body"]
                        .as_str()
                        .is_some_and(|b| b.contains("\"initialize\""))
            })
            .count()
    };
    assert_eq!(count("POST", true), 2, "{:?}", server.requests());
    eventually("both sessions on the server are ended", || {
        count("DELETE", false) == 2
    });
    assert!(
        server
            .requests()
            .iter()
            .filter(|r| r["method"] != "POST"
                || !r["body"].as_str().unwrap().contains("\"initialize\""))
            .all(|r| r["session"] == true),
        "every request after initialize carries its session: {:?}",
        server.requests()
    );
    gateway.stop();
}

#[test]
fn a_gateway_in_front_of_an_http_server_with_json_answers_runs_a_write_once_across_sessions() {
    a_gateway_in_front_of_an_http_server_runs_a_write_once_across_sessions("json");
}

#[test]
fn a_gateway_in_front_of_an_http_server_with_sse_answers_runs_a_write_once_across_sessions() {
    a_gateway_in_front_of_an_http_server_runs_a_write_once_across_sessions("sse");
}

#[test]
fn the_clients_authorization_reaches_the_http_server_unless_the_gateway_checks_its_own_token() {
    let server = HttpServer::start("sse", &[("REQUIRE_TOKEN", UPSTREAM_TOKEN)]);
    let steps = json!([{"tool": "write", "args": {"item": "t"}}]);
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("toolonce.db").display());

    // No token of the gateway's own: the client's goes on.
    let mut open = gateway_on(&store, &server.url(), &[], &[]);
    let got = sdk_client(&open.url(), &steps, &[("TOKEN", UPSTREAM_TOKEN)]);
    assert!(got.get("error").is_none(), "{got}");
    assert_eq!(result_text(&got["results"][0]), "wrote t (execution 1)");
    let got = sdk_client(&open.url(), &steps, &[]);
    let error = got["error"].as_str().unwrap_or_else(|| panic!("{got}"));
    assert!(error.contains("401"), "{error}");
    // The server's refusal of the client's credentials is the gateway's answer too, so a
    // client that can authenticate learns it must; no session is left open.
    for headers in [
        String::new(),
        "Authorization: Bearer wrong-00000000\r\n".to_owned(),
    ] {
        let refused = raw(
            open.port,
            "POST",
            &format!("{JSON_ONLY}{headers}"),
            INITIALIZE,
        );
        assert_eq!(refused.status(), 401, "{}", refused.body);
        assert_eq!(
            refused.header("www-authenticate").as_deref(),
            Some("Bearer")
        );
        assert!(
            refused.header("mcp-session-id").is_none(),
            "{}",
            refused.head
        );
        assert!(!refused.body.contains(UPSTREAM_TOKEN), "{}", refused.body);
    }
    let log = open.stop();
    assert!(!log.contains(UPSTREAM_TOKEN), "the token was logged: {log}");

    // The gateway checks a token of its own: it stays at the gateway, even when it is the
    // very token the server would take; the server's comes from --header.
    let env = [("GATEWAY_TOKEN", UPSTREAM_TOKEN)];
    let mut guarded = gateway_on(
        &store,
        &server.url(),
        &["--require-token", "GATEWAY_TOKEN"],
        &env,
    );
    let got = sdk_client(&guarded.url(), &steps, &[("TOKEN", UPSTREAM_TOKEN)]);
    let error = got["error"].as_str().unwrap_or_else(|| panic!("{got}"));
    assert!(
        error.contains("401"),
        "the gateway's token went on: {error}"
    );
    let log = guarded.stop();
    assert!(!log.contains(UPSTREAM_TOKEN), "the token was logged: {log}");

    let header = format!("Authorization: Bearer {UPSTREAM_TOKEN}");
    let env = [("GATEWAY_TOKEN", GATEWAY_TOKEN)];
    let mut both = gateway_on(
        &store,
        &server.url(),
        &["--require-token", "GATEWAY_TOKEN", "--header", &header],
        &env,
    );
    let got = sdk_client(&both.url(), &steps, &[("TOKEN", GATEWAY_TOKEN)]);
    assert!(got.get("error").is_none(), "{got}");
    assert_eq!(outcome(&got["results"][0]), Some("replayed"), "{got}");
    let got = sdk_client(&both.url(), &steps, &[("TOKEN", UPSTREAM_TOKEN)]);
    let error = got["error"].as_str().unwrap_or_else(|| panic!("{got}"));
    assert!(
        error.contains("a valid bearer token is required"),
        "{error}"
    );
    let log = both.stop();
    assert!(
        !log.contains(UPSTREAM_TOKEN) && !log.contains(GATEWAY_TOKEN),
        "{log}"
    );
    assert_eq!(server.executions().len(), 1);
}

/// A raw HTTP/1.1 exchange on its own connection: the head and the body as received (chunked
/// framing left in: the tests look for messages in it).
struct Raw {
    head: String,
    body: String,
}

impl Raw {
    fn status(&self) -> u16 {
        self.head.split(' ').nth(1).unwrap().parse().unwrap()
    }

    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }

    /// The JSON-RPC messages in the body: a JSON body, or the `data:` lines of events.
    fn messages(&self) -> Vec<Value> {
        if let Ok(message) = serde_json::from_str(&self.body) {
            return vec![message];
        }
        self.body
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{d:?}: {e}")))
            .collect()
    }
}

fn send_request(port: u16, method: &str, headers: &str, body: &str) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        stream,
        "{method} /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Connection: close\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    stream
}

fn raw(port: u16, method: &str, headers: &str, body: &str) -> Raw {
    let mut stream = send_request(port, method, headers, body);
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Raw {
        head: head.to_owned(),
        body,
    }
}

/// The body of a chunked HTTP/1.1 message.
fn dechunk(mut rest: &str) -> String {
    let mut body = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap();
        if size == 0 {
            break;
        }
        body.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
    body
}

const JSON_ONLY: &str = "Accept: application/json\r\n";
const BOTH: &str = "Accept: application/json, text/event-stream\r\n";
const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"roots":{}},"clientInfo":{"name":"raw","version":"1"}}}"#;

/// Opens a session on the gateway; returns its `Mcp-Session-Id` header line.
fn open_session(port: u16) -> String {
    let answer = raw(port, "POST", JSON_ONLY, INITIALIZE);
    assert_eq!(answer.status(), 200, "{}", answer.body);
    let session = format!(
        "Mcp-Session-Id: {}\r\n",
        answer.header("mcp-session-id").expect("a session id")
    );
    let answer = raw(
        port,
        "POST",
        &format!("{JSON_ONLY}{session}"),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert_eq!(answer.status(), 202, "{}", answer.body);
    session
}

#[test]
fn a_client_that_accepts_events_gets_an_event_stream_and_one_that_accepts_only_json_gets_json() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let mut gateway = gateway_for_command("memory://", &counter, &[]);
    let session = open_session(gateway.port);
    let call = |id: u32, accept: &str| {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"charge","arguments":{{"amount":5}}}}}}"#
        );
        raw(gateway.port, "POST", &format!("{accept}{session}"), &body)
    };
    let first = call(2, BOTH);
    assert_eq!(first.status(), 200);
    assert_eq!(
        first.header("content-type").as_deref(),
        Some("text/event-stream")
    );
    let messages = first.messages();
    assert_eq!(messages.len(), 1, "{}", first.body);
    assert_eq!(messages[0]["id"], 2, "{messages:?}");
    assert!(
        first.body.starts_with("event: message\ndata: {"),
        "{}",
        first.body
    );

    let second = call(3, JSON_ONLY);
    assert_eq!(second.status(), 200);
    assert_eq!(
        second.header("content-type").as_deref(),
        Some("application/json")
    );
    let answer: Value = serde_json::from_str(&second.body).unwrap();
    assert_eq!(answer["id"], 3);
    assert_eq!(
        answer["result"]["_meta"]["toolonce/outcome"], "replayed",
        "{answer}"
    );
    assert_eq!(
        std::fs::read_to_string(&counter).unwrap().lines().count(),
        1
    );
    gateway.stop();
}

#[test]
fn a_request_the_server_sends_while_handling_a_request_goes_on_its_stream_and_the_answer_back() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let log = dir.path().join("server-log");
    let mut gateway = gateway_for_command(
        "memory://",
        &counter,
        &[("MCP_TEST_LOG", log.to_str().unwrap())],
    );
    let session = open_session(gateway.port);
    let asked = raw(
        gateway.port,
        "POST",
        &format!("{BOTH}{session}"),
        r#"{"jsonrpc":"2.0","id":"ask","method":"test/server_request","params":{}}"#,
    );
    let messages = asked.messages();
    assert_eq!(messages.len(), 2, "{}", asked.body);
    assert_eq!(messages[0]["method"], "roots/list", "{messages:?}");
    assert_eq!(messages[0]["params"]["x-extra"]["from"], "server");
    assert_eq!(
        messages[1]["id"], "ask",
        "the answer ends the stream: {messages:?}"
    );

    // The client's answer to the server's request is POSTed back and reaches the server.
    let answer = r#"{"jsonrpc":"2.0","id":"srv-1","result":{"roots":[{"uri":"file:///r"}]}}"#;
    let posted = raw(gateway.port, "POST", &format!("{BOTH}{session}"), answer);
    assert_eq!(posted.status(), 202);
    eventually("the server received the client's answer", || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .any(|l| l.contains("\"srv-1\"") && l.contains("file:///r"))
    });
    gateway.stop();
}

#[test]
fn messages_outside_any_event_stream_wait_for_the_get_stream() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let mut gateway = gateway_for_command("memory://", &counter, &[]);
    let session = open_session(gateway.port);
    assert_eq!(raw(gateway.port, "GET", BOTH, "").status(), 400);
    assert_eq!(
        raw(
            gateway.port,
            "GET",
            &format!("{BOTH}Mcp-Session-Id: 00\r\n"),
            ""
        )
        .status(),
        404
    );
    assert_eq!(
        raw(gateway.port, "GET", &format!("{JSON_ONLY}{session}"), "").status(),
        406
    );
    // Asked with a JSON-only POST, the server's request has no request stream to go on.
    let asked = raw(
        gateway.port,
        "POST",
        &format!("{JSON_ONLY}{session}"),
        r#"{"jsonrpc":"2.0","id":"ask","method":"test/server_request","params":{}}"#,
    );
    assert_eq!(asked.messages()[0]["id"], "ask", "{}", asked.body);
    let mut stream = send_request(
        gateway.port,
        "GET",
        &format!("Accept: text/event-stream\r\n{session}"),
        "",
    );
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    let deadline = Instant::now() + PATIENCE;
    while !String::from_utf8_lossy(&seen).contains("roots/list") {
        assert!(
            Instant::now() < deadline,
            "{}",
            String::from_utf8_lossy(&seen)
        );
        let n = stream.read(&mut buffer).unwrap();
        assert!(
            n > 0,
            "the stream ended: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buffer[..n]);
    }
    let seen = String::from_utf8_lossy(&seen);
    assert!(seen.starts_with("HTTP/1.1 200 "), "{seen}");
    assert!(
        seen.to_ascii_lowercase()
            .contains("content-type: text/event-stream"),
        "{seen}"
    );
    // Deleting the session ends the stream.
    let deleted = raw(gateway.port, "DELETE", &session, "");
    assert_eq!(deleted.status(), 200);
    let mut rest = String::new();
    stream.read_to_string(&mut rest).unwrap();
    gateway.stop();
}

/// Redis-backed gateways: a session on each, then the same write POSTed to both at the same
/// moment, round after round.
#[test]
fn two_gateways_on_one_redis_run_a_write_sent_to_both_at_once_or_in_turn_once() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let mut a = gateway_for_command(&redis.url(), &counter, &[]);
    let mut b = gateway_for_command(&redis.url(), &counter, &[]);
    let sessions = [
        (a.port, open_session(a.port)),
        (b.port, open_session(b.port)),
    ];
    let charges = || {
        std::fs::read_to_string(&counter)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("charge\t"))
            .count()
    };
    let rounds = 8;
    for round in 0..rounds {
        let barrier = Arc::new(Barrier::new(2));
        let answers: Vec<Value> = std::thread::scope(|scope| {
            let threads: Vec<_> = sessions
                .iter()
                .map(|(port, session)| {
                    let barrier = barrier.clone();
                    scope.spawn(move || {
                        let body = format!(
                            r#"{{"jsonrpc":"2.0","id":{round},"method":"tools/call","params":{{"name":"charge","arguments":{{"amount":{}}}}}}}"#,
                            100 + round
                        );
                        let headers = format!("{BOTH}{session}");
                        barrier.wait();
                        raw(*port, "POST", &headers, &body).messages().pop().unwrap()
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert_eq!(charges(), round as usize + 1, "round {round}: {answers:?}");
        // One ran it; the other replayed it or was told it is in flight.
        let ran = answers
            .iter()
            .filter(|a| a["result"]["_meta"].get("toolonce/outcome").is_none())
            .count();
        assert!(ran <= 1, "{answers:?}");
    }
    // In turn: every duplicate, on either gateway, is the replay.
    for (i, (port, session)) in sessions.iter().enumerate() {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":"again-{i}","method":"tools/call","params":{{"name":"charge","arguments":{{"amount":100}}}}}}"#
        );
        let answer = raw(*port, "POST", &format!("{BOTH}{session}"), &body)
            .messages()
            .pop()
            .unwrap();
        assert_eq!(
            answer["result"]["_meta"]["toolonce/outcome"], "replayed",
            "{answer}"
        );
    }
    let body = r#"{"jsonrpc":"2.0","id":"fresh","method":"tools/call","params":{"name":"charge","arguments":{"amount":999}}}"#;
    for (port, session) in &sessions {
        raw(*port, "POST", &format!("{BOTH}{session}"), body);
    }
    assert_eq!(charges(), rounds as usize + 1);
    a.stop();
    b.stop();
}

/// One tools/call as a raw POST on `session` headers; returns the answer.
fn raw_call(port: u16, headers: &str, id: &str, tool: &str, arguments: &Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": tool, "arguments": arguments}});
    raw(port, "POST", &format!("{BOTH}{headers}"), &body.to_string())
        .messages()
        .pop()
        .unwrap()
}

#[test]
fn a_store_that_is_down_gets_writes_through_the_gateway_answered_not_executed_and_reads_pass() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let store = format!("redis://127.0.0.1:{}", toolonce_testsupport::free_port());
    let mut gateway = gateway_for_command(&store, &counter, &[]);
    let session = open_session(gateway.port);
    let answer = raw_call(gateway.port, &session, "w", "charge", &json!({"amount": 5}));
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(text(&answer).contains("Not executed"), "{answer}");
    let read = raw_call(gateway.port, &session, "r", "lookup", &json!({}));
    assert_ne!(read["result"]["isError"], true, "{read}");
    let executed = std::fs::read_to_string(&counter).unwrap_or_default();
    assert!(!executed.contains("charge"), "{executed}");
    assert!(executed.contains("lookup"), "{executed}");
    gateway.stop();
}

const MODERN: &str = "2026-07-28";

/// A 2026-07-28 request as a raw POST without a session: `MCP-Protocol-Version` on the
/// request and the version in its `_meta`, as that protocol has them.
fn modern_post(port: u16, method: &str, id: &str, params: Value) -> Value {
    modern_post_with(port, "", method, id, params)
}

/// The same with more headers (`Name: value\r\n` each).
fn modern_post_with(port: u16, headers: &str, method: &str, id: &str, mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
        "com.example/trace": "t-1",
    });
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let answer = raw(
        port,
        "POST",
        &format!("{BOTH}{headers}MCP-Protocol-Version: {MODERN}\r\n"),
        &body.to_string(),
    );
    assert_eq!(answer.status(), 200, "{}", answer.body);
    assert!(answer.header("mcp-session-id").is_none(), "{}", answer.head);
    answer.messages().pop().unwrap()
}

#[test]
fn the_2026_07_28_flow_works_through_the_gateway_without_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let log = dir.path().join("server-log");
    let mut command = Command::new(toolonce());
    command
        .args(["mcp", "--store", "memory://", "--scope", "gateway-test"])
        .args(["--server-id", "mail", "--listen", "127.0.0.1:0", "--"])
        .arg(mcp_peer::modern_server())
        .env("MCP_TEST_COUNTER", &counter)
        .env("MCP_TEST_LOG", &log);
    let mut gateway = Gateway::spawn(command);
    let port = gateway.port;
    let sends = || {
        std::fs::read_to_string(&counter)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("send_mail\t"))
            .count()
    };

    let discovered = modern_post(port, "server/discover", "d-1", json!({}));
    assert_eq!(
        discovered["result"]["supportedVersions"],
        json!([MODERN]),
        "{discovered}"
    );
    let unknown = modern_post(port, "com.example/frobnicate", "u-1", json!({"z": [1]}));
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");

    let args = json!({"to": "ops@example.com", "body": "deploy done"});
    let call = |id: &str, extra: Value| {
        let mut params = json!({"name": "send_mail", "arguments": args});
        for (name, value) in extra.as_object().unwrap() {
            params[name] = value.clone();
        }
        modern_post(port, "tools/call", id, params)
    };
    let first = call("c-1", json!({}));
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    assert_eq!(sends(), 0);
    let continuation = json!({
        "requestState": first["result"]["requestState"],
        "inputResponses": {"confirm": {"action": "accept", "content": {}}},
    });
    let done = call("c-2", continuation.clone());
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(sends(), 1);
    let duplicate = call("c-3", json!({}));
    assert_eq!(
        duplicate["result"]["_meta"]["toolonce/outcome"], "replayed",
        "{duplicate}"
    );
    let resent = call("c-4", continuation);
    assert_eq!(
        resent["result"]["_meta"]["toolonce/outcome"], "replayed",
        "{resent}"
    );
    assert_eq!(sends(), 1);
    // The client's own `_meta` members reached the server untouched.
    let received = std::fs::read_to_string(&log).unwrap();
    assert!(
        received
            .lines()
            .filter(|l| l.starts_with('<'))
            .filter(|l| l.contains("server/discover") || l.contains("com.example/frobnicate"))
            .all(|l| l.contains("\"com.example/trace\":\"t-1\"")),
        "{received}"
    );
    // A request of an earlier protocol without a session is still refused.
    let old = raw(
        port,
        "POST",
        BOTH,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#,
    );
    assert_eq!(old.status(), 400, "{}", old.body);
    gateway.stop();
}

/// Over HTTP, closing the answer's stream (or, for a JSON answer, the connection) is the
/// cancellation: the gateway tells the proxy, which tells the server, and the write's claim
/// follows the proxy's rules (it stays locked: whether it took effect is unknown).
#[test]
fn a_client_closing_a_writes_stream_cancels_it_on_the_http_server_and_it_never_runs_twice() {
    for accept in [BOTH, JSON_ONLY] {
        let server = HttpServer::start("sse", &[]);
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("toolonce-mcp.toml");
        std::fs::write(
            &config,
            "[proxy]\ncancel_grace = \"500ms\"\n[defaults]\nlease = \"60s\"\n",
        )
        .unwrap();
        let mut gateway = gateway_to(&server.url(), &["--config", config.to_str().unwrap()], &[]);
        let session = open_session(gateway.port);
        let body = r#"{"jsonrpc":"2.0","id":"slow-1","method":"tools/call","params":{"name":"slow","arguments":{}}}"#;
        let stream = send_request(gateway.port, "POST", &format!("{accept}{session}"), body);
        eventually("slow started on the server", || !server.slow().is_empty());
        drop(stream);
        eventually("the cancellation reached the server", || {
            server.slow().len() == 2
        });
        assert_eq!(server.slow(), ["started", "cancelled"], "{accept}");
        let duplicate = raw_call(gateway.port, &session, "slow-2", "slow", &json!({}));
        assert_eq!(
            duplicate["result"]["_meta"]["toolonce/outcome"], "in_flight",
            "{accept}: {duplicate}"
        );
        assert_eq!(server.slow().len(), 2, "{accept}: slow ran again");
        gateway.stop();
    }
}

#[test]
fn a_server_that_exits_mid_request_ends_the_event_stream_with_an_error_answer() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let mut gateway = gateway_for_command("memory://", &counter, &[]);
    let session = open_session(gateway.port);
    let answer = raw(
        gateway.port,
        "POST",
        &format!("{BOTH}{session}"),
        r#"{"jsonrpc":"2.0","id":"bye","method":"test/exit","params":{"code":3}}"#,
    );
    assert_eq!(answer.status(), 200);
    let messages = answer.messages();
    let last = messages.last().unwrap_or_else(|| panic!("{}", answer.body));
    assert_eq!(last["id"], "bye", "{messages:?}");
    assert_eq!(last["error"]["code"], -32603, "{messages:?}");
    assert!(
        last["error"]["message"]
            .as_str()
            .unwrap()
            .contains("exited before answering"),
        "{last}"
    );
    // The session ended with its server.
    let again = raw(
        gateway.port,
        "POST",
        &format!("{BOTH}{session}"),
        r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
    );
    assert_eq!(again.status(), 404, "{}", again.body);
    gateway.stop();
}

/// Requests without a session share proxies, but never across credentials: a request goes to
/// the HTTP server with the `Authorization` it came with, whatever came in between.
#[test]
fn sessionless_requests_through_the_gateway_reach_the_http_server_with_their_own_authorization() {
    let server = HttpServer::bridge(&mcp_peer::modern_server());
    let mut gateway = gateway_to(&server.url(), &["--server-id", "mail"], &[]);
    let port = gateway.port;
    let tokens = ["alice-0a1b2c3d4e5f", "bob-9f8e7d6c5b4a"];
    std::thread::scope(|scope| {
        for token in tokens {
            scope.spawn(move || {
                for round in 0..5 {
                    let headers = format!("Authorization: Bearer {token}\r\n");
                    let id = format!("{token}-{round}");
                    let answer = modern_post_with(port, &headers, "tools/list", &id, json!({}));
                    assert!(answer["result"]["tools"].is_array(), "{answer}");
                }
            });
        }
    });
    let requests = server.requests();
    let mut checked = 0;
    for request in &requests {
        let Some(id) = request["id"].as_str() else {
            continue;
        };
        for token in tokens {
            if id.starts_with(token) {
                assert_eq!(
                    request["authorization"],
                    format!("Bearer {token}"),
                    "{requests:#?}"
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 10, "{requests:#?}");
    // The proxy's own listings went with the credentials of the proxy's clients too.
    assert!(
        requests.iter().all(|r| r["authorization"] != Value::Null),
        "{requests:#?}"
    );
    let log = gateway.stop();
    assert!(
        !log.contains(tokens[0]) && !log.contains(tokens[1]),
        "{log}"
    );
}

/// Two gateways in front of two different HTTP servers, on one store and one scope: the same
/// tool with the same arguments is a different operation on each server (the server id,
/// derived from the URL, is part of the key), and the same one again on either.
#[test]
fn gateways_in_front_of_different_http_servers_on_one_store_keep_their_keys_apart() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("toolonce.db").display());
    let (one, two) = (
        HttpServer::start("json", &[]),
        HttpServer::start("json", &[]),
    );
    let mut a = gateway_on(&store, &one.url(), &[], &[]);
    let mut b = gateway_on(&store, &two.url(), &[], &[]);
    let steps = json!([{"tool": "write", "args": {"item": "same"}}]);
    let got = sdk_client(&a.url(), &steps, &[]);
    assert_eq!(
        result_text(&got["results"][0]),
        "wrote same (execution 1)",
        "{got}"
    );
    let got = sdk_client(&b.url(), &steps, &[]);
    assert_eq!(
        result_text(&got["results"][0]),
        "wrote same (execution 1)",
        "{got}"
    );
    assert_eq!(outcome(&got["results"][0]), None, "{got}");
    // A third gateway in front of the first server, started later, replays its write.
    let mut c = gateway_on(&store, &one.url(), &[], &[]);
    let got = sdk_client(&c.url(), &steps, &[]);
    assert_eq!(outcome(&got["results"][0]), Some("replayed"), "{got}");
    assert_eq!((one.executions().len(), two.executions().len()), (1, 1));
    let keys = [&one.executions()[0]["key"], &two.executions()[0]["key"]];
    assert_ne!(keys[0], keys[1], "{keys:?}");
    a.stop();
    b.stop();
    c.stop();
}

/// The HTTP server behind the gateway goes down: a write is answered "not executed" (it never
/// left), a duplicate of one that ran still replays, and a read gets an error.
#[test]
fn an_http_server_that_is_down_behind_the_gateway_gets_writes_answered_not_executed() {
    let mut server = HttpServer::start("json", &[]);
    let mut gateway = gateway_to(&server.url(), &[], &[]);
    let session = open_session(gateway.port);
    let write = |id: &str, item: &str| {
        raw_call(gateway.port, &session, id, "write", &json!({"item": item}))
    };
    let first = write("w-1", "before");
    assert_eq!(text(&first), "wrote before (execution 1)", "{first}");
    server.stop();

    let down = write("w-2", "while down");
    assert_eq!(down["result"]["isError"], true, "{down}");
    assert_eq!(
        down["result"]["_meta"]["toolonce/outcome"], "not_executed",
        "{down}"
    );
    let again = write("w-3", "before");
    assert_eq!(
        again["result"]["_meta"]["toolonce/outcome"], "replayed",
        "{again}"
    );
    let read = raw_call(gateway.port, &session, "r-1", "read", &json!({}));
    let message = read["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("cannot be reached"), "{read}");
    assert_eq!(server.executions().len(), 1);
    gateway.stop();
}

/// A gateway in front of the stdio test server with more options (`--session-idle`, ...).
fn gateway_for_command_with(counter: &Path, extra: &[&str]) -> Gateway {
    let mut command = Command::new(toolonce());
    command
        .args(["mcp", "--store", "memory://", "--scope", "gateway-test"])
        .args(["--listen", "127.0.0.1:0"])
        .args(extra)
        .arg("--")
        .arg(test_server())
        .env("MCP_TEST_COUNTER", counter)
        .env_remove("MCP_TEST_LOG");
    Gateway::spawn(command)
}

/// The live (not zombie) child processes of `pid`: the servers a gateway started.
fn live_children(pid: u32) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| std::fs::read_to_string(entry.ok()?.path().join("stat")).ok())
        .filter(|stat| {
            // After the command's `(name)`: the state, then the parent's pid.
            let mut fields = stat
                .rsplit_once(')')
                .map_or("", |(_, r)| r)
                .split_whitespace();
            let state = fields.next();
            let parent = fields.next().and_then(|p| p.parse::<u32>().ok());
            parent == Some(pid) && state != Some("Z") && state != Some("X")
        })
        .count()
}

const PING: &str = r#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#;

#[test]
fn an_idle_session_is_ended_as_a_delete_would_its_server_stopped_and_later_requests_get_404() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let mut gateway = gateway_for_command_with(&counter, &["--session-idle", "1"]);
    let session = open_session(gateway.port);
    assert_eq!(
        live_children(gateway.pid()),
        1,
        "one server for the session"
    );
    // Requests keep it open past the idle time.
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(300));
        let ping = raw(gateway.port, "POST", &format!("{JSON_ONLY}{session}"), PING);
        assert_eq!(ping.status(), 200, "{}", ping.body);
    }
    assert_eq!(live_children(gateway.pid()), 1);
    eventually("the idle session's server is stopped", || {
        live_children(gateway.pid()) == 0
    });
    let again = raw(gateway.port, "POST", &format!("{JSON_ONLY}{session}"), PING);
    assert_eq!(again.status(), 404, "{}", again.body);
    assert!(again.body.contains("initialize again"), "{}", again.body);
    // A new session works as before.
    open_session(gateway.port);
    assert_eq!(live_children(gateway.pid()), 1);
    gateway.stop();
}

#[test]
fn a_session_with_a_call_in_progress_is_not_ended_however_long_the_call_runs() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let mut gateway = gateway_for_command_with(&counter, &["--session-idle", "0.3"]);
    for accept in [JSON_ONLY, BOTH] {
        let session = open_session(gateway.port);
        let call = raw(
            gateway.port,
            "POST",
            &format!("{accept}{session}"),
            r#"{"jsonrpc":"2.0","id":"slow","method":"tools/call","params":{"name":"slow","arguments":{"ms":2000}}}"#,
        );
        assert_eq!(call.status(), 200, "{}", call.body);
        let answer = if accept == BOTH {
            call.messages().pop().unwrap()
        } else {
            serde_json::from_str(&call.body).unwrap()
        };
        assert_eq!(answer["id"], "slow", "{answer}");
        assert!(answer.get("result").is_some(), "{answer}");
        // Idleness counts from the end of the call, not from its start.
        let ping = raw(gateway.port, "POST", &format!("{JSON_ONLY}{session}"), PING);
        assert_eq!(ping.status(), 200, "{}", ping.body);
    }
    gateway.stop();
}

#[test]
fn an_initialize_beyond_max_sessions_gets_503_naming_the_limit_and_starts_no_server() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let mut gateway = gateway_for_command_with(&counter, &["--max-sessions", "2"]);
    let first = open_session(gateway.port);
    open_session(gateway.port);
    assert_eq!(live_children(gateway.pid()), 2);
    let refused = raw(gateway.port, "POST", JSON_ONLY, INITIALIZE);
    assert_eq!(refused.status(), 503, "{}", refused.body);
    assert!(refused.header("mcp-session-id").is_none());
    let body: Value = serde_json::from_str(&refused.body).unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("--max-sessions") && message.contains('2'),
        "{body}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(live_children(gateway.pid()), 2, "no server was started");
    // Ending one makes room.
    let deleted = raw(gateway.port, "DELETE", &first, "");
    assert!(deleted.status() < 300, "{}", deleted.body);
    eventually("the deleted session's server is stopped", || {
        live_children(gateway.pid()) == 1
    });
    open_session(gateway.port);
    gateway.stop();
}

#[test]
fn a_bad_session_idle_or_max_sessions_exits_2_naming_the_option() {
    for (option, value) in [
        ("--session-idle", "5parsecs"),
        ("--session-idle", "0"),
        ("--max-sessions", "0"),
    ] {
        let output = Command::new(toolonce())
            .args(["mcp", "--store", "memory://", "--listen", "127.0.0.1:0"])
            .args([option, value, "--", "true"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{option} {value}: {stderr}");
        assert!(
            stderr.contains("invalid value") && stderr.contains(option),
            "{option} {value}: {stderr}"
        );
    }
}
