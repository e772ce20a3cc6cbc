//! What the proxy relays between a stdio client and an HTTP server: writes once and replays,
//! the server's own messages and requests, the `--header`s, the client's bytes exactly.

use super::*;

fn a_write_sent_twice_runs_once_and_the_duplicate_replays(mode: &str) {
    let server = HttpServer::start(mode, &[]);
    let mut peer = proxy_to(&server).start();
    let init = peer.initialize();
    assert_eq!(init["serverInfo"]["name"], "toolonce-http-test", "{init}");
    let tools = peer.list_tools();
    assert_eq!(tools.len(), 8, "{tools:?}");

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
                "write", "read", "slow", "crash", "expire", "roots", "garbled", "announce"
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
        // The replay is the recorded result, then the note that says it is one.
        assert_eq!(got["second"]["content"][0], got["first"]["content"][0]);
        let note = got["second"]["content"][1]["text"].as_str().unwrap_or("");
        assert!(note.starts_with("Already done:"), "{mode}: {got}");
        assert_eq!(got["second"]["content"].as_array().map(Vec::len), Some(2));
        assert_eq!(got["read"]["content"][0]["text"], "1");
        assert_eq!(server.executions().len(), 1, "{mode}");
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
