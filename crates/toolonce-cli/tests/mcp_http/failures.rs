//! An HTTP server that is down, cancels, lost connections and event streams, ended sessions,
//! refusals told from unknown outcomes, and bad arguments.

use super::*;

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

/// A client's cancel of a write call in progress is POSTed to the server, which stops the
/// tool; the call is not answered, and a duplicate sent meanwhile is told it is in flight
/// rather than run again. The request given up is closed.
#[test]
fn a_cancelled_write_is_cancelled_on_the_server_and_never_runs_twice() {
    for mode in ["json", "sse"] {
        let server = HttpServer::start(mode, &[]);
        let mut peer = proxy_to(&server)
            .config(
                // The proxy gives up on the cancelled call after the grace and one lease.
                "[proxy]\ncancel_grace = \"500ms\"\nshutdown_timeout = \"5m\"\n\
                 [defaults]\nlease = \"3s\"",
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
        // The proxy gave the call up: a duplicate within the lease is told the truth, that its
        // outcome is unknown (issue 21, item 10), and is not run.
        let duplicate = peer.call("crash", json!({}));
        assert_eq!(
            duplicate["result"]["_meta"]["toolonce/outcome"], "unknown",
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
        duplicate["result"]["_meta"]["toolonce/outcome"], "unknown",
        "{duplicate}"
    );
    assert_eq!(posts("status-500"), 1);
    // Other calls go on as before.
    let write = peer.call("write", json!({"item": "still works"}));
    assert!(!is_error(&write), "{write}");
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

/// An answer serde_json cannot read (a text cut inside an emoji, as JSON.stringify writes it;
/// structuredContent nested 150 levels) from an HTTP server, in both answer modes: the write
/// ran, so it is recorded as it came; the client gets the server's bytes and every duplicate
/// the same bytes under its own id, and the tool never runs again.
#[test]
fn an_answer_serde_json_cannot_read_from_an_http_server_is_recorded_as_it_came_and_never_run_again()
{
    for mode in ["json", "sse"] {
        let server = HttpServer::start(mode, &[]);
        let mut peer = proxy_to(&server).start();
        peer.initialize();
        for (how, ids) in [
            ("surrogate", [101_u64, 102, 103]),
            ("deep", [201, 202, 203]),
        ] {
            let mut answers = Vec::new();
            for id in ids {
                let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                                  "params": {"name": "garbled", "arguments": {"how": how}}});
                peer.send(&call);
                answers.push(String::from_utf8(peer.raw_answer(id)).unwrap());
            }
            let ran = server
                .executions()
                .iter()
                .filter(|e| e["item"] == format!("garbled {how}"))
                .count();
            assert_eq!(ran, 1, "{mode}/{how}: the write ran again: {answers:?}");
            let first = &answers[0];
            assert!(first.contains(r"\ud83d"), "{mode}/{how}: {first}");
            for (answer, id) in answers.iter().zip(ids) {
                assert_eq!(
                    answer.replace(&format!(r#""id":{id}"#), &format!(r#""id":{}"#, ids[0])),
                    *first,
                    "{mode}/{how}: the duplicate {id} did not get the first answer's bytes"
                );
            }
        }
    }
}
