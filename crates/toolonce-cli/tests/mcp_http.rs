//! `toolonce mcp --upstream URL`: a stdio client reaching a Streamable HTTP MCP server through
//! the proxy. The server is built on the official TypeScript SDK (npm
//! `@modelcontextprotocol/sdk`, installed on first use into the target directory) and runs in
//! both of its answer modes, JSON and SSE; one test drives the proxy with the SDK's own stdio
//! client. Node.js and npm must be installed: without them these tests fail (they are never
//! skipped), naming what is missing.

#[path = "support/mcp_http_upstream.rs"]
mod mcp_http_upstream;
#[path = "support/mcp_peer.rs"]
mod mcp_peer;
#[path = "support/mcp_sdk.rs"]
mod mcp_sdk;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use mcp_http_upstream::HttpServer;
use mcp_peer::{PATIENCE, Peer, Spawn, is_error, text, without_outcome};
use serde_json::{Value, json};

const SERVER_SCRIPT: &str = include_str!("support/mcp_http_server.mjs");
const CLIENT_SCRIPT: &str = include_str!("support/mcp_sdk_client.mjs");
const BRIDGE_SCRIPT: &str = include_str!("support/mcp_http_bridge.mjs");

/// The SDK's folder, with this file's scripts in it.
fn sdk_dir() -> &'static Path {
    mcp_sdk::sdk_dir(&[
        ("mcp_http_server.mjs", SERVER_SCRIPT),
        ("mcp_sdk_client.mjs", CLIENT_SCRIPT),
        ("mcp_http_bridge.mjs", BRIDGE_SCRIPT),
    ])
}

fn proxy_to(server: &HttpServer) -> Spawn {
    Spawn::proxy()
        .arg("--scope")
        .arg("http-test")
        .upstream(&server.url())
}

/// The messages received within `wait` that are not answers.
fn notifications(peer: &mut Peer, wait: Duration) -> Vec<Value> {
    let mut found = Vec::new();
    while let Some(line) = peer.try_recv_line(wait) {
        let message: Value = serde_json::from_slice(&line).unwrap();
        if message.get("method").is_some() {
            found.push(message);
        }
    }
    found
}

fn a_write_sent_twice_runs_once_and_the_duplicate_replays(mode: &str) {
    let server = HttpServer::start(mode, &[]);
    let mut peer = proxy_to(&server).start();
    let init = peer.initialize();
    assert_eq!(init["serverInfo"]["name"], "toolonce-http-test", "{init}");
    let tools = peer.list_tools();
    assert_eq!(tools.len(), 7, "{tools:?}");

    let first = peer.call("write", json!({"item": "a"}));
    assert!(!is_error(&first), "{first}");
    assert_eq!(text(&first), "wrote a (execution 1)");
    // The server's own answer passes on as it came: nothing added.
    assert!(first["result"].get("_meta").is_none(), "{first}");
    let again = peer.call("write", json!({"item": "a"}));
    assert_eq!(again["result"]["_meta"]["toolonce/outcome"], "replayed");
    assert_eq!(without_outcome(&again), without_outcome(&first));

    for _ in 0..2 {
        let read = peer.call("read", json!({}));
        assert_eq!(text(&read), "1", "{read}");
        assert!(
            read["result"].get("_meta").is_none(),
            "reads pass through: {read}"
        );
    }
    let executions = server.executions();
    assert_eq!(executions.len(), 1, "{executions:?}");
    assert_eq!(executions[0]["item"], "a");
    assert!(
        executions[0]["key"].as_str().unwrap().starts_with("idem:"),
        "the key went along in _meta: {executions:?}"
    );
    if mode == "sse" {
        // The log notification the tool sent on its call's stream came before the answer.
        let logs = notifications(&mut peer, Duration::from_millis(200));
        assert!(
            logs.iter()
                .any(|m| m["method"] == "notifications/message"
                    && m["params"]["data"] == "writing a"),
            "{logs:?}"
        );
    }

    peer.close_stdin();
    assert_eq!(peer.wait(PATIENCE).code(), Some(0), "{}", peer.stderr());
}

#[test]
fn a_write_sent_twice_runs_once_and_the_duplicate_replays_with_json_answers() {
    a_write_sent_twice_runs_once_and_the_duplicate_replays("json");
}

#[test]
fn a_write_sent_twice_runs_once_and_the_duplicate_replays_with_sse_answers() {
    a_write_sent_twice_runs_once_and_the_duplicate_replays("sse");
}

/// Whether a message the server sends outside any request reaches the client: `announce`
/// until a `notifications/tools/list_changed` comes (the GET stream opens just after the
/// session does, and the SDK drops what it sends before).
fn get_stream_is_open(peer: &mut Peer) -> bool {
    for _ in 0..40 {
        let answer = peer.call("announce", json!({}));
        assert_eq!(text(&answer), "announced");
        let messages = notifications(peer, Duration::from_millis(250));
        if messages
            .iter()
            .any(|m| m["method"] == "notifications/tools/list_changed")
        {
            return true;
        }
    }
    false
}

/// `announce` makes the server send `notifications/tools/list_changed` outside any request:
/// it reaches the client only through the GET stream the proxy opened. The stream opens just
/// after the session does, so the test announces until one arrives.
#[test]
fn messages_the_server_sends_outside_requests_reach_the_client() {
    for mode in ["json", "sse"] {
        let server = HttpServer::start(mode, &[]);
        let mut peer = proxy_to(&server).start();
        peer.initialize();
        assert!(
            get_stream_is_open(&mut peer),
            "{mode}: no list_changed came; stderr:\n{}",
            peer.stderr()
        );
        // The proxy listed the tools again when told they changed, and writes still work.
        let write = peer.call("write", json!({"item": "after"}));
        assert!(!is_error(&write), "{write}");
    }
}

#[test]
fn headers_given_with_header_reach_the_server_and_are_never_logged() {
    let token = "s3cr3t-t0ken-value";
    let server = HttpServer::start("sse", &[("REQUIRE_TOKEN", token)]);
    let mut peer = proxy_to(&server)
        .arg("--header")
        .arg(&format!("Authorization: Bearer {token}"))
        .arg("--header")
        .arg("X-Test-Tag: tagged")
        .env("RUST_LOG", "trace")
        .start();
    peer.initialize();
    let write = peer.call("write", json!({"item": "with token"}));
    assert!(!is_error(&write), "{write}");
    peer.close_stdin();
    assert_eq!(peer.wait(PATIENCE).code(), Some(0));
    let requests = server.requests();
    assert!(
        requests.iter().all(|r| r["tag"] == "tagged"),
        "{requests:#?}"
    );
    // The session: every request after `initialize` carries its id and the negotiated
    // version, the GET stream was opened, and the session was ended when the client left.
    assert_eq!(requests[0]["mcpMethod"], "initialize", "{requests:#?}");
    assert_eq!(requests[0]["session"], false);
    for later in &requests[1..] {
        assert_eq!(later["session"], true, "{later}");
        assert_eq!(later["version"], "2025-06-18", "{later}");
    }
    assert!(
        requests.iter().any(|r| r["method"] == "GET"),
        "{requests:#?}"
    );
    assert_eq!(
        requests.last().unwrap()["method"],
        "DELETE",
        "{requests:#?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r["mcpMethod"] == "tools/call" && r["mcpName"] == "write"),
        "{requests:#?}"
    );
    let stderr = peer.stderr();
    assert!(
        stderr.contains("toolonce::mcp"),
        "logs were written: {stderr}"
    );
    assert!(!stderr.contains(token), "the token was logged:\n{stderr}");

    // Without it the server refuses everything: the client is told, and nothing runs.
    let mut refused = proxy_to(&server).start();
    let init = refused.request(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "toolonce-tests", "version": "0"}}),
    );
    let message = init["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("401"), "{init}");
    let write = refused.call("write", json!({"item": "without token"}));
    assert!(
        write["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("401")),
        "{write}"
    );
    assert_eq!(server.executions().len(), 1);
}

/// The server goes away: a new write is answered "not executed" (it never left, so its claim
/// is released), a duplicate of an earlier write is still replayed from the store, and a read
/// gets an error saying the server cannot be reached.
#[test]
fn an_upstream_that_is_down_gets_writes_answered_not_executed() {
    let mut server = HttpServer::start("json", &[]);
    let mut peer = proxy_to(&server).start();
    peer.initialize();
    let first = peer.call("write", json!({"item": "before"}));
    assert!(!is_error(&first), "{first}");
    server.stop();

    let write = peer.call("write", json!({"item": "while down"}));
    assert!(is_error(&write), "{write}");
    assert!(text(&write).contains("cannot be reached"), "{write}");
    assert_eq!(
        write["result"]["_meta"]["toolonce/outcome"], "not_executed",
        "{write}"
    );
    let again = peer.call("write", json!({"item": "before"}));
    assert_eq!(again["result"]["_meta"]["toolonce/outcome"], "replayed");
    assert_eq!(without_outcome(&again), without_outcome(&first));
    let read = peer.call("read", json!({}));
    let message = read["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("cannot be reached"), "{read}");
    assert_eq!(server.executions().len(), 1);

    // A proxy whose server is down from the start answers too (nothing listens on the port).
    let mut down = Spawn::proxy().upstream(&server.url()).start();
    let init = down.request(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "toolonce-tests", "version": "0"}}),
    );
    assert!(init.get("error").is_some(), "{init}");
    let write = down.call("write", json!({"item": "never"}));
    assert_eq!(
        write["result"]["_meta"]["toolonce/outcome"], "not_executed",
        "{write}"
    );
    down.close_stdin();
    assert_eq!(down.wait(PATIENCE).code(), Some(0));
}

/// The SDK's own client, over stdio, with `toolonce mcp --upstream` as its server command.
#[test]
fn the_sdk_client_over_stdio_reaches_the_sdk_http_server_through_the_proxy() {
    for (mode, resumable) in [("json", "0"), ("sse", "0"), ("sse", "1")] {
        let server = HttpServer::start(mode, &[("RESUMABLE", resumable)]);
        let output = Command::new("node")
            .arg(sdk_dir().join("mcp_sdk_client.mjs"))
            .arg(mcp_peer::toolonce())
            .args([
                "mcp",
                "--store",
                "memory://",
                "--scope",
                "sdk",
                "--upstream",
            ])
            .arg(server.url())
            .env_remove("TOOLONCE_STORE")
            .env_remove("TOOLONCE_SCOPE")
            .stderr(Stdio::inherit())
            .output()
            .expect("run the SDK client");
        assert!(output.status.success(), "{mode}: {output:?}");
        let got: Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("{mode}: {e}: {output:?}"));
        assert_eq!(got["server"]["name"], "toolonce-http-test", "{got}");
        assert_eq!(
            got["tools"],
            json!([
                "write", "read", "slow", "crash", "expire", "roots", "announce"
            ])
        );
        assert_eq!(
            got["first"]["content"][0]["text"],
            "wrote sdk (execution 1)"
        );
        assert_eq!(
            got["second"]["_meta"]["toolonce/outcome"], "replayed",
            "{got}"
        );
        assert_eq!(got["second"]["content"], got["first"]["content"]);
        assert_eq!(got["read"]["content"][0]["text"], "1");
        assert_eq!(server.executions().len(), 1, "{mode}");
    }
}

/// A client's cancel of a write call in progress is POSTed to the server, which stops the
/// tool; the call is not answered, and a duplicate sent meanwhile is told it is in flight
/// rather than run again. The request given up is closed.
#[test]
fn a_cancelled_write_is_cancelled_on_the_server_and_never_runs_twice() {
    for mode in ["json", "sse"] {
        let server = HttpServer::start(mode, &[]);
        let mut peer = proxy_to(&server)
            .config(
                "[proxy]\ncancel_grace = \"500ms\"\nshutdown_timeout = \"5m\"\n\
                 [defaults]\nlease = \"60s\"",
            )
            .start();
        peer.initialize();
        let id = peer.call_async("slow", json!({}));
        let deadline = std::time::Instant::now() + PATIENCE;
        while server.slow().is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "{mode}: slow never started"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        peer.send(
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                          "params": {"requestId": id, "reason": "test"}}),
        );
        while server.slow().len() < 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "{mode}: the cancel never reached the server: {:?}",
                server.slow()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(server.slow(), ["started", "cancelled"], "{mode}");
        let duplicate = peer.call("slow", json!({}));
        assert_eq!(
            duplicate["result"]["_meta"]["toolonce/outcome"], "in_flight",
            "{mode}: {duplicate}"
        );
        // The cancelled call itself gets no answer.
        let answers: Vec<Value> = std::iter::from_fn(|| peer.try_recv_line(Duration::from_secs(1)))
            .map(|l| serde_json::from_slice::<Value>(&l).unwrap())
            .filter(|m| m.get("id") == Some(&id))
            .collect();
        assert!(answers.is_empty(), "{mode}: {answers:?}");
        assert_eq!(server.slow().len(), 2, "{mode}: slow ran again");
        // The server never answers the cancelled request: once the call is given up, the
        // proxy closes its request rather than keep a connection waiting for good.
        while !server.aborted().contains(&json!("slow")) {
            assert!(
                std::time::Instant::now() < deadline,
                "{mode}: the given-up request is still open"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // Nothing is left to wait for when the client hangs up (the server never answers the
        // cancelled request): the proxy exits long before its shutdown timeout.
        peer.close_stdin();
        assert_eq!(peer.wait(PATIENCE).code(), Some(0), "{mode}");
    }
}

/// Writes a PEM file with openssl; panics naming what failed.
fn openssl(args: &[&str], dir: &Path) {
    let status = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("`openssl` is required by this test (it makes a test CA): install it");
    assert!(status.success(), "openssl {args:?} failed");
}

/// A CA, and a certificate for `localhost` it signed (all in `dir`).
fn test_ca(dir: &Path, name: &str) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509", "-days", "2", "-subj"];
    let subject = format!("/CN=toolonce test {name}");
    let (key, pem) = (format!("{name}.key"), format!("{name}.pem"));
    ca.push(&subject);
    ca.extend(ec);
    ca.extend(["-keyout", &key, "-out", &pem]);
    ca.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
    ca.extend(["-addext", "keyUsage=critical,keyCertSign"]);
    openssl(&ca, dir);
    if name == "ca" {
        let mut csr = vec!["req", "-new", "-subj", "/CN=localhost"];
        csr.extend(ec);
        csr.extend(["-keyout", "server.key", "-out", "server.csr"]);
        openssl(&csr, dir);
        std::fs::write(
            dir.join("server.ext"),
            "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(
            &[
                "x509",
                "-req",
                "-days",
                "2",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-extfile",
                "server.ext",
                "-out",
                "server.pem",
            ],
            dir,
        );
    }
}

/// HTTPS with the trusted roots of the system's store, which `SSL_CERT_FILE` replaces here: a
/// server whose CA is trusted is reached; one whose CA is not is never sent anything.
#[test]
fn https_upstreams_are_checked_against_the_trusted_roots() {
    let pki = tempfile::tempdir().unwrap();
    test_ca(pki.path(), "ca");
    test_ca(pki.path(), "other");
    let key = pki.path().join("server.key");
    let cert = pki.path().join("server.pem");
    let server = HttpServer::start(
        "sse",
        &[
            ("TLS_KEY", key.to_str().unwrap()),
            ("TLS_CERT", cert.to_str().unwrap()),
        ],
    );
    let url = format!("https://localhost:{}/mcp", server.port);
    let trusted = pki.path().join("ca.pem");
    let mut peer = Spawn::proxy()
        .upstream(&url)
        .env("SSL_CERT_FILE", trusted.to_str().unwrap())
        .start();
    let init = peer.initialize();
    assert_eq!(init["serverInfo"]["name"], "toolonce-http-test", "{init}");
    let write = peer.call("write", json!({"item": "over tls"}));
    assert_eq!(text(&write), "wrote over tls (execution 1)");

    let other = pki.path().join("other.pem");
    let mut untrusted = Spawn::proxy()
        .upstream(&url)
        .env("SSL_CERT_FILE", other.to_str().unwrap())
        .start();
    let write = untrusted.call("write", json!({"item": "untrusted"}));
    assert_eq!(
        write["result"]["_meta"]["toolonce/outcome"], "not_executed",
        "{write}"
    );
    assert!(untrusted.stderr().contains("TLS"), "{}", untrusted.stderr());
    assert_eq!(server.executions().len(), 1);
}

/// A server may close a call's event stream before answering (protocol 2025-11-25, with an
/// event store): the proxy resumes it with a GET carrying the last event id, and the answer
/// and the notification before it reach the client. The stream opens with an event that has
/// an id and no data, which is no message and is not passed on.
#[test]
fn a_call_whose_event_stream_the_server_closes_is_resumed() {
    let server = HttpServer::start("sse", &[("RESUMABLE", "1")]);
    let mut peer = proxy_to(&server).start();
    let init = peer.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "toolonce-tests", "version": "0"}}),
    );
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    peer.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let first = peer.call("write", json!({"item": "resumed"}));
    assert_eq!(text(&first), "wrote resumed (execution 1)", "{first}");
    let again = peer.call("write", json!({"item": "resumed"}));
    assert_eq!(again["result"]["_meta"]["toolonce/outcome"], "replayed");
    let logs = notifications(&mut peer, Duration::from_millis(200));
    assert!(
        logs.iter()
            .any(|m| m["params"]["data"] == "writing resumed"),
        "{logs:?}"
    );
    let requests = server.requests();
    assert!(
        requests.iter().filter(|r| r["method"] == "GET").count() >= 2,
        "the GET stream and the resumption: {requests:#?}"
    );
    // Every line the client got was a message.
    peer.close_stdin();
    assert_eq!(peer.wait(PATIENCE).code(), Some(0));
    while let Some(line) = peer.try_recv_line(Duration::from_millis(100)) {
        assert!(serde_json::from_slice::<Value>(&line).is_ok(), "{line:?}");
    }
}

/// The server dies while a write call is in progress, after its effect: the connection breaks
/// after the request left, so whether it took effect is unknown. The call is answered
/// `server_gone`, and a duplicate is told the operation is in flight (locked for its lease),
/// never run again.
#[test]
fn a_connection_lost_after_a_write_left_leaves_its_operation_locked() {
    for mode in ["json", "sse"] {
        let server = HttpServer::start(mode, &[]);
        let mut peer = proxy_to(&server)
            .config("[defaults]\nlease = \"60s\"")
            .start();
        peer.initialize();
        let lost = peer.call("crash", json!({}));
        assert!(is_error(&lost), "{mode}: {lost}");
        assert!(
            text(&lost).contains("connection to it broke"),
            "{mode}: {lost}"
        );
        assert_eq!(
            lost["result"]["_meta"]["toolonce/outcome"], "server_gone",
            "{mode}: {lost}"
        );
        let duplicate = peer.call("crash", json!({}));
        assert_eq!(
            duplicate["result"]["_meta"]["toolonce/outcome"], "in_flight",
            "{mode}: {duplicate}"
        );
        assert_eq!(server.executions().len(), 1, "{mode}");
        // A read lost the same way is answered with an error that says so.
        let read = peer.call("read", json!({}));
        assert!(read.get("error").is_some(), "{mode}: {read}");
    }
}

/// The server ends the session (404 to a request that carried it): the proxy opens a new one
/// with the client's own `initialize` and sends the request again, so the client never notices,
/// and the new session's answers are recorded and replayed as before.
#[test]
fn a_session_the_server_ended_is_replaced_and_the_request_sent_again() {
    for mode in ["json", "sse"] {
        let server = HttpServer::start(mode, &[]);
        let mut peer = proxy_to(&server).start();
        peer.initialize();
        let first = peer.call("write", json!({"item": "one"}));
        assert!(!is_error(&first), "{mode}: {first}");
        assert_eq!(text(&peer.call("expire", json!({}))), "expiring");
        std::thread::sleep(Duration::from_millis(500));

        let second = peer.call("write", json!({"item": "two"}));
        assert_eq!(text(&second), "wrote two (execution 2)", "{mode}: {second}");
        let duplicate = peer.call("write", json!({"item": "one"}));
        assert_eq!(duplicate["result"]["_meta"]["toolonce/outcome"], "replayed");
        assert_eq!(text(&peer.call("read", json!({}))), "2");
        let requests = server.requests();
        let initializes = requests
            .iter()
            .filter(|r| r["mcpMethod"] == "initialize")
            .count();
        assert_eq!(initializes, 2, "{mode}: {requests:#?}");
        assert!(
            requests.iter().any(|r| r["method"] == "POST"
                && r["session"] == true
                && r["version"] == "2025-06-18"),
            "{requests:#?}"
        );
        // The new session's `initialize` answer went nowhere: the client has its own.
        let stray: Vec<Value> =
            std::iter::from_fn(|| peer.try_recv_line(Duration::from_millis(200)))
                .map(|l| serde_json::from_slice::<Value>(&l).unwrap())
                .filter(|m| m.get("method").is_none())
                .collect();
        assert!(stray.is_empty(), "{mode}: {stray:?}");
        assert_eq!(server.executions().len(), 2, "{mode}");
    }
}

/// What the client writes reaches the server as it was written (member order, spacing, number
/// spelling, escapes), a write call with only the key spliced into its `_meta`.
#[test]
fn messages_reach_the_server_byte_for_byte() {
    let server = HttpServer::start("json", &[]);
    let mut peer = proxy_to(&server).start();
    peer.initialize();
    let read = br#"{ "params" : {"arguments":{"z":1.50,"a":[1e2, -0.0]},"name":"read"}, "id":"r-1","method":"tools/call","jsonrpc":"2.0" }"#;
    peer.send_line(read);
    let answer = peer.response(&json!("r-1"));
    assert_eq!(text(&answer), "0");
    let write = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"write","arguments":{"item":"b\u00e9","n":10.0}}}"#;
    peer.send_line(write);
    let answer = peer.response(&json!(7));
    assert_eq!(text(&answer), "wrote b\u{e9} (execution 1)");
    let bodies: Vec<String> = server
        .requests()
        .iter()
        .filter_map(|r| r["body"].as_str().map(str::to_owned))
        .collect();
    let read = std::str::from_utf8(read).unwrap();
    assert!(bodies.iter().any(|b| b == read), "{bodies:#?}");
    let key = server.executions()[0]["key"].as_str().unwrap().to_owned();
    let spliced = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"write","arguments":{{"item":"b\u00e9","n":10.0}},"_meta":{{"toolonce/key":"{key}"}}}}}}"#
    );
    assert!(bodies.contains(&spliced), "{spliced}\n{bodies:#?}");
}

/// HTTP statuses: a 4xx (and a redirect, which the proxy does not follow) refused the request
/// before anything ran, so the client gets an error naming it and nothing is recorded (the
/// same call goes to the server again); after a 5xx the outcome is unknown, so the operation
/// stays locked like one whose server died.
#[test]
fn http_statuses_tell_refused_requests_from_unknown_outcomes() {
    let server = HttpServer::start("json", &[]);
    let mut peer = proxy_to(&server)
        .config("[defaults]\nlease = \"60s\"")
        .start();
    peer.initialize();
    let posts = |name: &str| {
        server
            .requests()
            .iter()
            .filter(|r| r["mcpName"] == name)
            .count()
    };
    for status in ["status-403", "status-307"] {
        for attempt in 1..=2 {
            let refused = peer.call(status, json!({}));
            let message = refused["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains(&status[7..]), "{refused}");
            assert_eq!(refused["error"]["code"], -32600, "{refused}");
            assert_eq!(posts(status), attempt, "{status} is never recorded");
        }
    }
    let unknown = peer.call("status-500", json!({}));
    assert_eq!(
        unknown["result"]["_meta"]["toolonce/outcome"], "server_gone",
        "{unknown}"
    );
    let duplicate = peer.call("status-500", json!({}));
    assert_eq!(
        duplicate["result"]["_meta"]["toolonce/outcome"], "in_flight",
        "{duplicate}"
    );
    assert_eq!(posts("status-500"), 1);
    // Other calls go on as before.
    let write = peer.call("write", json!({"item": "still works"}));
    assert!(!is_error(&write), "{write}");
}

/// A request from the server (`roots/list`, sent while a call is in progress: on the call's
/// event stream, or on the GET stream) reaches the client, and the client's answer reaches the
/// server, which then answers the call.
#[test]
fn requests_from_the_server_are_answered_by_the_client() {
    for mode in ["json", "sse"] {
        let server = HttpServer::start(mode, &[]);
        let mut peer = proxy_to(&server).start();
        peer.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {"roots": {}},
                   "clientInfo": {"name": "toolonce-tests", "version": "0"}}),
        );
        peer.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert!(get_stream_is_open(&mut peer), "{mode}");
        let id = peer.call_async("roots", json!({}));
        let request = loop {
            let line = peer.recv_line();
            let message: Value = serde_json::from_slice(&line).unwrap();
            assert_ne!(
                message.get("id"),
                Some(&id),
                "{mode}: answered first: {message}"
            );
            if message["method"] == "roots/list" {
                break message;
            }
        };
        peer.send(&json!({"jsonrpc": "2.0", "id": request["id"],
                          "result": {"roots": [{"uri": "file:///work", "name": "work"}]}}));
        let answer = peer.response(&id);
        assert_eq!(text(&answer), "file:///work", "{mode}: {answer}");
    }
}

/// A URL or header the proxy cannot use stops it at once with exit code 2, naming the problem
/// without echoing a secret.
#[test]
fn bad_upstream_arguments_stop_the_proxy_with_exit_code_2_and_no_secret() {
    let cases: [&[&str]; 6] = [
        &["--upstream", "ftp://example.com/mcp"],
        &["--upstream", "https://user:s3cret@example.com/mcp"],
        &["--upstream", "not a url s3cret"],
        &[
            "--upstream",
            "http://example.com/mcp",
            "--header",
            "NoColon s3cret",
        ],
        &[
            "--upstream",
            "http://example.com/mcp",
            "--header",
            "X-Key: s3\u{1}cret",
        ],
        &["--header", "Authorization: s3cret", "--", "true"],
    ];
    for args in cases {
        let output = Command::new(mcp_peer::toolonce())
            .args(["mcp", "--store", "memory://", "--scope", "s"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("toolonce:"), "{args:?}: {stderr}");
        assert!(!stderr.contains("s3cret"), "{args:?}: {stderr}");
    }
}

/// Protocol 2026-07-28 over HTTP: no `initialize`, no session, every request naming itself
/// in headers that a strict server checks against the body (the `mcp_modern_server` example
/// behind a bridge that serves it over Streamable HTTP and refuses mismatched headers). An
/// `input_required` answer is passed on unrecorded; the continuation runs once; duplicates
/// replay its final answer.
#[test]
fn the_2026_07_28_flow_works_over_http() {
    let server = HttpServer::bridge(&mcp_peer::modern_server());
    let mut peer = proxy_to(&server).arg("--server-id").arg("mail").start();
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "toolonce-tests", "version": "0"},
    });
    let discover = peer.request("server/discover", json!({"_meta": meta}));
    assert!(discover.get("result").is_some(), "{discover}");
    let call = |peer: &mut Peer, extra: Value| {
        let mut params = json!({"name": "send_mail", "arguments": {"to": "ops@example.com"},
                                "_meta": meta});
        for (name, value) in extra.as_object().unwrap() {
            params[name] = value.clone();
        }
        peer.request("tools/call", params)
    };
    let executions = || {
        std::fs::read_to_string(server.dir.path().join("counter"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("send_mail\t"))
            .count()
    };
    let first = call(&mut peer, json!({}));
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    assert!(
        first["result"]["_meta"].get("toolonce/outcome").is_none(),
        "{first}"
    );
    assert_eq!(executions(), 0);
    let continuation = json!({
        "requestState": first["result"]["requestState"],
        "inputResponses": {"confirm": {"action": "accept", "content": {}}},
    });
    let done = call(&mut peer, continuation);
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(text(&done), "send_mail done, execution #1");
    let duplicate = call(&mut peer, json!({}));
    assert_eq!(duplicate["result"]["_meta"]["toolonce/outcome"], "replayed");
    assert_eq!(without_outcome(&duplicate), without_outcome(&done));
    assert_eq!(executions(), 1);

    let requests = server.requests();
    assert!(
        requests.iter().all(|r| r["version"] == "2026-07-28"),
        "{requests:#?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r["method"] == "tools/list" && r["mcpMethod"] == "tools/list"),
        "the proxy listed the tools itself: {requests:#?}"
    );
    peer.close_stdin();
    assert_eq!(peer.wait(PATIENCE).code(), Some(0));
}

/// A client that sends its requests and closes its input at once still gets every answer (and
/// the write's answer is recorded) before the proxy exits, as a stdio server would answer
/// what it read before its input closed.
#[test]
fn a_client_that_hangs_up_at_once_still_gets_its_answers() {
    for mode in ["json", "sse"] {
        let server = HttpServer::start(mode, &[]);
        let mut peer = proxy_to(&server).start();
        peer.initialize();
        let write = peer.call_async("write", json!({"item": "last words"}));
        let read = peer.call_async("read", json!({}));
        peer.close_stdin();
        assert_eq!(peer.wait(PATIENCE).code(), Some(0), "{mode}");
        let mut answered = Vec::new();
        while let Some(line) = peer.try_recv_line(Duration::from_millis(500)) {
            let message: Value = serde_json::from_slice(&line).unwrap();
            if message.get("method").is_none() {
                answered.push(message);
            }
        }
        let answer = |id: &Value| answered.iter().find(|m| m.get("id") == Some(id));
        let written = answer(&write).unwrap_or_else(|| panic!("{mode}: {answered:?}"));
        assert_eq!(text(written), "wrote last words (execution 1)", "{mode}");
        assert!(answer(&read).is_some(), "{mode}: {answered:?}");
        assert_eq!(server.executions().len(), 1, "{mode}");
    }
}
