//! The gateway's event streams: answers as SSE or JSON as the client accepts, what the server
//! sends while handling a request, the `GET` stream, and a closed stream as the cancellation.

use super::*;

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
