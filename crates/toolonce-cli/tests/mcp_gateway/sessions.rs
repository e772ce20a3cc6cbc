//! The gateway's sessions are bounded: idle ones are ended, busy ones are not, and no more
//! than `--max-sessions` are open.

use super::*;

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
    // The ended session counts until its proxy has seen its server exit, a moment after the
    // process is gone: then a new one is accepted.
    eventually(
        "a new session is accepted once the ended one is gone",
        || raw(gateway.port, "POST", JSON_ONLY, INITIALIZE).status() == 200,
    );
    gateway.stop();
}

#[test]
fn a_bad_session_idle_or_max_sessions_exits_2_naming_the_option() {
    refused_at_start(
        &[
            ("--session-idle", "5parsecs"),
            ("--session-idle", "0"),
            ("--max-sessions", "0"),
        ],
        &["invalid value"],
    );
}
