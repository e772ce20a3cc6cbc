//! `toolonce mcp --listen` as a gateway: in front of a Streamable HTTP server (`--upstream`,
//! the official TypeScript SDK's server), its event streams (answers as SSE, messages the
//! server sends while handling a request, the `GET` stream), and two gateway processes sharing
//! one real Redis. The clients are the SDK's Streamable HTTP client and raw HTTP/1.1 requests.
//! Node.js, npm and redis-server must be installed: without them these tests fail (they are
//! never skipped), naming what is missing.

#[path = "../support/jwt_issuer.rs"]
mod jwt_issuer;
#[path = "../support/mcp_conformance_npm.rs"]
mod mcp_conformance_npm;
#[path = "../support/mcp_gateway.rs"]
mod mcp_gateway;
#[path = "../support/mcp_http_upstream.rs"]
mod mcp_http_upstream;
#[path = "../support/mcp_peer.rs"]
mod mcp_peer;
#[path = "../support/mcp_sdk.rs"]
mod mcp_sdk;

mod bounds;
mod fairness;
mod http_upstream;
mod key_refresh;
mod metrics;
mod modern;
mod oauth;
mod principals;
mod refusals;
mod sessions;
mod shared;
mod stores;
mod streams;
mod unreadable;

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

const SERVER_SCRIPT: &str = include_str!("../support/mcp_http_server.mjs");
const BRIDGE_SCRIPT: &str = include_str!("../support/mcp_http_bridge.mjs");
const STREAM_SERVER_SCRIPT: &str = include_str!("../support/mcp_http_stream_server.mjs");
const CLIENT_SCRIPT: &str = include_str!("../support/mcp_sdk_gateway_client.mjs");

/// A token no test would write by accident into a log.
const UPSTREAM_TOKEN: &str = "up-7c1d0e93a4f25b68";
const GATEWAY_TOKEN: &str = "gw-52b8e0f1c9d74a36";

/// The SDK's folder, with this file's scripts in it.
fn sdk_dir() -> &'static Path {
    mcp_sdk::sdk_dir(&[
        ("mcp_http_server.mjs", SERVER_SCRIPT),
        ("mcp_http_bridge.mjs", BRIDGE_SCRIPT),
        ("mcp_http_stream_server.mjs", STREAM_SERVER_SCRIPT),
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

/// Starts the gateway with each `(option, value)` and checks that it exits 2 at once, naming
/// the option (and each of `also`) on stderr: a bad setting never starts a gateway.
fn refused_at_start(cases: &[(&str, &str)], also: &[&str]) {
    for (option, value) in cases {
        let output = Command::new(toolonce())
            .args(["mcp", "--store", "memory://", "--listen", "127.0.0.1:0"])
            .args([option, value, "--", "true"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{option} {value}: {stderr}");
        assert!(
            stderr.contains(option) && also.iter().all(|a| stderr.contains(a)),
            "{option} {value}: {stderr}"
        );
    }
}

/// Waits until `check` holds, for at most PATIENCE.
fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
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
    read_raw(send_request(port, method, headers, body))
}

/// The whole answer on `stream`.
fn read_raw(mut stream: TcpStream) -> Raw {
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

/// One tools/call as a raw POST on `session` headers; returns the answer.
fn raw_call(port: u16, headers: &str, id: &str, tool: &str, arguments: &Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": tool, "arguments": arguments}});
    raw(port, "POST", &format!("{BOTH}{headers}"), &body.to_string())
        .messages()
        .pop()
        .unwrap()
}

const MODERN: &str = "2026-07-28";

/// A 2026-07-28 request as a raw POST without a session: `MCP-Protocol-Version` on the
/// request and the version in its `_meta`, as that protocol has them.
fn modern_post(port: u16, method: &str, id: &str, params: Value) -> Value {
    modern_post_with(port, "", method, id, params)
}

/// The same with more headers (`Name: value\r\n` each).
fn modern_post_with(port: u16, headers: &str, method: &str, id: &str, params: Value) -> Value {
    let answer = modern_answer(port, headers, method, id, params);
    assert_eq!(answer.status(), 200, "{}", answer.body);
    answer.messages().pop().unwrap()
}

/// The whole answer to such a request, whatever its status.
fn modern_answer(port: u16, headers: &str, method: &str, id: &str, mut params: Value) -> Raw {
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
    assert!(answer.header("mcp-session-id").is_none(), "{}", answer.head);
    answer
}

/// A 2026-07-28 request with `id` (none: a notification) and `params`, whose `_meta` gets the
/// protocol's members besides its own, as a raw POST without a session with more `headers`;
/// its connection is left open.
fn modern_send(
    port: u16,
    headers: &str,
    method: &str,
    id: Option<Value>,
    mut params: Value,
) -> TcpStream {
    let mut meta = params.get("_meta").cloned().unwrap_or_else(|| json!({}));
    meta["io.modelcontextprotocol/protocolVersion"] = json!(MODERN);
    meta["io.modelcontextprotocol/clientCapabilities"] = json!({});
    meta["io.modelcontextprotocol/clientInfo"] = json!({"name": "raw", "version": "0"});
    params["_meta"] = meta;
    let mut body = json!({"jsonrpc": "2.0", "method": method, "params": params});
    if let Some(id) = id {
        body["id"] = id;
    }
    send_request(
        port,
        "POST",
        &format!("{BOTH}{headers}MCP-Protocol-Version: {MODERN}\r\n"),
        &body.to_string(),
    )
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
