//! End-to-end tests of `toolonce mcp`: the real binary in front of the test MCP server (the
//! `mcp_test_server` example), driven over stdio as an MCP client would.

#[path = "support/mcp_peer.rs"]
mod mcp_peer;

use std::time::{Duration, Instant};

use mcp_peer::{Peer, Spawn, is_error, text, without_id, without_outcome};
use serde_json::{Value, json};

fn ready(spawn: Spawn) -> Peer {
    let mut peer = spawn.start();
    peer.initialize();
    peer.list_tools();
    peer
}

/// The key of a call of `tool` of the server named `server_id`.
fn key_of(scope: &str, server_id: &str, tool: &str, args: &Value) -> String {
    toolonce::key::derive(scope, &format!("{server_id}/{tool}"), args, None)
        .unwrap()
        .key
        .to_string()
}

#[test]
fn write_call_runs_once_and_a_duplicate_in_another_key_order_replays_it() {
    let mut peer = ready(
        Spawn::proxy()
            .arg("--scope")
            .arg("run-1")
            .arg("--server-id")
            .arg("test"),
    );
    let first = peer.call(
        "charge",
        json!({"amount": 100, "card": {"number": "4242", "exp": "12/30"}}),
    );
    let again = peer.call(
        "charge",
        json!({"card": {"exp": "12/30", "number": "4242"}, "amount": 100.0}),
    );
    assert_eq!(peer.count("charge"), 1);
    assert!(!is_error(&first), "{first}");
    assert_eq!(without_outcome(&first), without_outcome(&again));
    assert_ne!(first["id"], again["id"]);
    // The key reached the server in _meta, and it is the SPEC's key of the call, with the
    // server's id in the tool part.
    let want = key_of(
        "run-1",
        "test",
        "charge",
        &json!({"amount": 100, "card": {"number": "4242", "exp": "12/30"}}),
    );
    assert_eq!(first["result"]["_meta"]["received"]["toolonce/key"], want);
    assert_eq!(peer.executions()[0].2, want);
    // Other arguments are another operation.
    peer.call(
        "charge",
        json!({"amount": 101, "card": {"number": "4242", "exp": "12/30"}}),
    );
    assert_eq!(peer.count("charge"), 2);
}

#[test]
fn concurrent_duplicates_run_once_and_the_other_is_told_not_to_retry() {
    let mut peer = ready(Spawn::proxy());
    let a = peer.call_async("slow", json!({"ms": 400, "order": 7}));
    let b = peer.call_async("slow", json!({"order": 7, "ms": 400}));
    let (a, b) = (peer.response(&a), peer.response(&b));
    assert_eq!(peer.count("slow"), 1);
    let (done, rejected) = if is_error(&a) { (b, a) } else { (a, b) };
    assert!(!is_error(&done), "{done}");
    assert!(is_error(&rejected), "{rejected}");
    let message = text(&rejected);
    assert!(message.contains("must not retry"), "{message}");
    // Once settled, a duplicate gets the result.
    let later = peer.call("slow", json!({"ms": 400, "order": 7}));
    assert_eq!(without_outcome(&later), without_outcome(&done));
    assert_eq!(peer.count("slow"), 1);
}

#[test]
fn in_flight_wait_policy_answers_the_duplicate_with_the_result() {
    let mut peer =
        ready(Spawn::proxy().config("[tools.slow]\nin_flight = \"wait\"\nwait_timeout = \"10s\""));
    let a = peer.call_async("slow", json!({"ms": 300}));
    let b = peer.call_async("slow", json!({"ms": 300}));
    let (a, b) = (peer.response(&a), peer.response(&b));
    assert_eq!(peer.count("slow"), 1);
    assert!(!is_error(&a) && !is_error(&b), "{a} {b}");
    assert_eq!(without_outcome(&a), without_outcome(&b));
}

#[test]
fn read_tool_runs_every_time_and_reaches_the_server_untouched() {
    let mut peer = ready(Spawn::proxy());
    for _ in 0..3 {
        let answer = peer.call("lookup", json!({"q": 1}));
        assert!(!is_error(&answer));
        assert_eq!(answer["result"]["_meta"]["received"], Value::Null);
    }
    assert_eq!(peer.count("lookup"), 3);
}

#[test]
fn unannotated_tools_are_writes() {
    let mut peer = ready(Spawn::proxy());
    for tool in ["plain", "charge"] {
        peer.call(tool, json!({"x": 1}));
        peer.call(tool, json!({"x": 1}));
        assert_eq!(peer.count(tool), 1, "{tool}");
    }
}

#[test]
fn configuration_overrides_the_annotations() {
    let mut peer = ready(
        Spawn::proxy().config("[tools.lookup]\nkind = \"write\"\n[tools.plain]\nkind = \"read\""),
    );
    for _ in 0..2 {
        peer.call("lookup", json!({}));
        peer.call("plain", json!({}));
    }
    assert_eq!(peer.count("lookup"), 1);
    assert_eq!(peer.count("plain"), 2);
}

#[test]
fn is_error_result_is_recorded_and_replayed_identically() {
    let mut peer = ready(Spawn::proxy());
    let first = peer.call("fail", json!({"card": "declined"}));
    let again = peer.call("fail", json!({"card": "declined"}));
    assert!(is_error(&first));
    assert_eq!(without_outcome(&first), without_outcome(&again));
    assert_eq!(peer.count("fail"), 1);
}

#[test]
fn protocol_error_is_passed_on_as_is_and_releases_the_operation() {
    let mut peer = ready(Spawn::proxy());
    let first = peer.call("no_such_tool", json!({"a": 1}));
    assert_eq!(first["error"]["code"], -32602, "{first}");
    let again = peer.call("no_such_tool", json!({"a": 1}));
    assert_eq!(without_id(&first), without_id(&again));
    let forwarded = peer
        .server_received()
        .iter()
        .filter(|l| String::from_utf8_lossy(l).contains("no_such_tool"))
        .count();
    assert_eq!(
        forwarded, 2,
        "a refused call is not recorded, so it is tried again"
    );
}

#[test]
fn key_fields_conflict_is_reported_and_not_executed() {
    let mut peer = ready(Spawn::proxy().config("[tools.charge]\nkey_fields = [\"/order\"]"));
    peer.call("charge", json!({"order": "A-1", "note": "first"}));
    let replay = peer.call("charge", json!({"order": "A-1", "note": "first"}));
    assert!(!is_error(&replay));
    let conflict = peer.call("charge", json!({"order": "A-1", "note": "rephrased"}));
    assert!(is_error(&conflict));
    assert!(text(&conflict).contains("Conflict"), "{conflict}");
    assert_eq!(peer.count("charge"), 1);
}

#[test]
fn messages_pass_through_byte_for_byte_in_both_directions() {
    // Without the repeat argument, which the proxy otherwise adds to the listed schemas of
    // write tools (see mcp_repeat.rs): then no message is rewritten.
    let mut peer = Spawn::proxy().arg("--no-repeat-argument").start();
    // A recorded session, written with odd spacing, member order and fields no MCP version has.
    let session: Vec<&[u8]> = vec![
        br#"{ "jsonrpc":"2.0", "id":"init-1", "method":"initialize", "params":{"protocolVersion":"2025-03-26","capabilities":{"x-cap":{"deep":[1,2.50,{"k":null}]}},"clientInfo":{"name":"c","version":"1"}}, "x-extra":{"top":true} }"#,
        br#"{"method":"notifications/initialized","jsonrpc":"2.0","params":{"x-extra":"n"}}"#,
        br#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"cursor":null,"x-extra":{"a":1}}}"#,
        br#"{"jsonrpc":"2.0","id":3,"method":"test/echo","params":{"z":1,"a":{"big":123456789012345678901234567890,"f":1.0e2,"s":"\u00e9\n"}}}"#,
        br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"lookup","arguments":{"b":2,"a":1},"x-extra":[]}}"#,
        br#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#,
        br#"{"jsonrpc":"2.0","id":6,"method":"test/server_request","params":{}}"#,
    ];
    // The tools/list answer comes back before the tools/call goes out, as with a real client:
    // before it, every tool counts as a write.
    for line in &session[..3] {
        peer.send_line(line);
    }
    let mut received: Vec<Vec<u8>> = (0..2).map(|_| peer.recv_line()).collect();
    for line in &session[3..] {
        peer.send_line(line);
    }
    // Four answers and the server's request to the client.
    received.extend((0..5).map(|_| peer.recv_line()));
    let client_answer: &[u8] =
        br#"{"jsonrpc":"2.0","id":"srv-1","result":{"roots":[],"x-extra":{"c":[]}},"x-top":1}"#;
    peer.send_line(client_answer);
    peer.request("ping", json!({}));

    let log = peer.server_log();
    let server_got: Vec<&[u8]> = log
        .iter()
        .filter(|(d, _)| *d == '<')
        .map(|(_, l)| &l[..])
        .collect();
    // The answers to the proxy's own tools/list requests are the proxy's, not the client's.
    let server_sent: Vec<String> = log
        .iter()
        .filter(|(d, _)| *d == '>')
        .map(|(_, l)| format!("{}\n", String::from_utf8_lossy(l)))
        .filter(|l| !l.contains("\"id\":\"toolonce-"))
        .collect();
    // Client to server: every byte.
    for line in session.iter().chain([&client_answer]) {
        assert!(
            server_got.contains(line),
            "not received unchanged: {}",
            String::from_utf8_lossy(line)
        );
    }
    // Server to client: every byte, in order.
    let received_text: Vec<String> = received
        .iter()
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .collect();
    assert_eq!(received_text, server_sent[..7]);
    // Negotiation is the two ends' own.
    let init: Value = serde_json::from_slice(&received[0]).unwrap();
    assert_eq!(init["result"]["protocolVersion"], "2025-03-26");
    assert_eq!(
        init["result"]["capabilities"]["x-extra"],
        json!({"future": true})
    );
}

#[test]
fn the_intercepted_call_reaches_the_server_with_only_the_key_added() {
    let mut peer = ready(Spawn::proxy().arg("--scope").arg("s"));
    let line = br#"{"jsonrpc":"2.0","id":"w-1","method":"tools/call","params":{"name":"charge","arguments":{"n":12345678901234567891,"x":1.50},"_meta":{"progressToken":"p"},"x-extra":{"k":[1]}},"x-top":true}"#;
    peer.send_line(line);
    let answer = peer.recv_line();
    let log = peer.server_log();
    let position = log
        .iter()
        .position(|(d, l)| *d == '<' && String::from_utf8_lossy(l).contains("\"w-1\""))
        .expect("forwarded");
    let (_, forwarded) = &log[position];
    let key = peer.executions()[0].2.clone();
    let want = String::from_utf8_lossy(line).replace(
        r#""_meta":{"progressToken":"p"}"#,
        &format!(r#""_meta":{{"progressToken":"p","toolonce/key":"{key}"}}"#),
    );
    assert_eq!(String::from_utf8_lossy(forwarded), want);
    // The server's answer reaches the client as the server wrote it.
    let (_, sent) = &log[position + 1];
    assert_eq!(answer, [&sent[..], b"\n"].concat());
}

#[test]
fn batch_with_write_calls_is_deduplicated_and_answered_as_one_array() {
    let mut peer = ready(Spawn::proxy());
    let batch = json!([
        {"jsonrpc": "2.0", "id": 101, "method": "tools/call", "params": {"name": "charge", "arguments": {"a": 1}}},
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}},
        {"jsonrpc": "2.0", "id": 102, "method": "tools/call", "params": {"name": "lookup", "arguments": {}}},
        {"jsonrpc": "2.0", "id": 103, "method": "ping"},
    ]);
    peer.send(&batch);
    let first: Value = serde_json::from_slice(&peer.recv_line()).unwrap();
    let ids: Vec<&Value> = first.as_array().unwrap().iter().map(|m| &m["id"]).collect();
    assert_eq!(ids, [&json!(101), &json!(102), &json!(103)]);
    let mut again = batch.clone();
    for (member, id) in again
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .zip([201, 0, 202, 203])
    {
        if id != 0 {
            member["id"] = json!(id);
        }
    }
    peer.send(&again);
    let second: Value = serde_json::from_slice(&peer.recv_line()).unwrap();
    assert_eq!(without_outcome(&second[0]), without_outcome(&first[0]));
    assert_eq!(second[0]["result"]["_meta"]["toolonce/outcome"], "replayed");
    assert_eq!(peer.count("charge"), 1);
    assert_eq!(peer.count("lookup"), 2);
}

#[test]
fn batch_without_write_calls_passes_through_byte_for_byte() {
    let mut peer = ready(Spawn::proxy());
    let batch = br#"[ {"jsonrpc":"2.0","id":"b1","method":"ping"} , {"jsonrpc":"2.0","id":"b2","method":"tools/call","params":{"name":"lookup","arguments":{"z":1,"a":2}}} ]"#;
    peer.send_line(batch);
    let answer = peer.recv_line();
    let log = peer.server_log();
    assert!(log.iter().any(|(d, l)| *d == '<' && l == batch));
    let (_, sent) = log.iter().rev().find(|(d, _)| *d == '>').unwrap();
    assert_eq!(answer, [&sent[..], b"\n"].concat());
}

#[test]
fn cancelled_call_is_forwarded_and_its_entry_expires_with_the_lease() {
    // `rerun`: the lease's end makes the outcome unknown, and this policy runs it again (the
    // default, `hold`, is tested in mcp_unknown.rs).
    let mut peer = ready(Spawn::proxy().config(
        "[proxy]\ncancel_grace = \"100ms\"\n[defaults]\nlease = \"1s\"\non_expired = \"rerun\"",
    ));
    let args = json!({"ms": 5000});
    let id = peer.call_async("slow", args.clone());
    peer.eventually("the slow call to start", |p| p.count("slow") == 1);
    peer.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": id, "reason": "user"}}),
    );
    peer.eventually("the server to get the cancel", |p| {
        p.server_received()
            .iter()
            .any(|l| String::from_utf8_lossy(l).contains("notifications/cancelled"))
    });
    let cancelled_at = Instant::now();
    // No answer to a cancelled call.
    assert!(peer.try_recv_line(Duration::from_millis(300)).is_none());
    // Whether it took effect is unknown, so a duplicate is held off while the lease lasts...
    let duplicate = peer.call("slow", args.clone());
    assert!(is_error(&duplicate), "{duplicate}");
    assert!(text(&duplicate).contains("must not retry"), "{duplicate}");
    // ...and runs again, with the same key, once it ran out: nothing stays locked for good.
    // (The proxy waits the grace and one lease for a late answer, renewing the claim; the
    // lease then runs out at most one lease later.)
    std::thread::sleep(Duration::from_millis(2300).saturating_sub(cancelled_at.elapsed()));
    peer.call_async("slow", args);
    peer.eventually("the rerun", |p| p.count("slow") == 2);
    let keys: Vec<String> = peer.executions().into_iter().map(|(.., k)| k).collect();
    assert_eq!(keys[0], keys[1]);
}

#[test]
fn an_answer_after_the_cancel_grace_but_within_the_lease_is_recorded_and_replayed() {
    let mut peer = ready(
        Spawn::proxy().config("[proxy]\ncancel_grace = \"100ms\"\n[defaults]\nlease = \"5s\""),
    );
    // `late` answers after 700 ms even though the request was cancelled: well after the
    // grace, well within the lease.
    let args = json!({"ms": 700});
    let id = peer.call_async("late", args.clone());
    peer.eventually("the late call to start", |p| p.count("late") == 1);
    peer.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": id, "reason": "user"}}),
    );
    std::thread::sleep(Duration::from_millis(1200));
    let duplicate = peer.call("late", args);
    assert!(!is_error(&duplicate), "{duplicate}");
    assert_eq!(
        duplicate["result"]["_meta"]["toolonce/outcome"], "replayed",
        "{duplicate}"
    );
    assert_eq!(peer.count("late"), 1);
}

#[test]
fn server_that_never_answers_times_out_and_does_not_block_the_key_forever() {
    // Under `rerun`; under the default `hold` the key stays blocked until a person resolves it
    // (mcp_unknown.rs).
    let mut peer =
        ready(Spawn::proxy().config(
            "[defaults]\nlease = \"600ms\"\ncall_timeout = \"300ms\"\non_expired = \"rerun\"",
        ));
    let started = Instant::now();
    let answer = peer.call("hang", json!({"x": 1}));
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(is_error(&answer), "{answer}");
    assert!(text(&answer).contains("Timed out"), "{answer}");
    peer.eventually("the proxy to cancel the request at the server", |p| {
        p.server_received()
            .iter()
            .any(|l| String::from_utf8_lossy(l).contains("notifications/cancelled"))
    });
    std::thread::sleep(Duration::from_millis(700));
    let again = peer.call("hang", json!({"x": 1}));
    assert!(text(&again).contains("Timed out"), "{again}");
    assert_eq!(
        peer.count("hang"),
        2,
        "after the lease, the operation runs again"
    );
}

#[test]
fn the_proxy_exits_with_the_server_exit_code() {
    let mut peer = ready(Spawn::proxy());
    peer.send(&json!({"jsonrpc": "2.0", "id": 9, "method": "test/exit", "params": {"code": 7}}));
    assert_eq!(peer.wait(Duration::from_secs(10)).code(), Some(7));
}

#[test]
fn client_hanging_up_closes_the_server_and_ends_with_its_code() {
    let mut peer = ready(Spawn::proxy().env("MCP_TEST_EOF_EXIT", "3"));
    // A call sent right before hanging up still reaches the server, as it would without us.
    let id = peer.call_async("charge", json!({"last": true}));
    peer.close_stdin();
    assert!(!is_error(&peer.response(&id)));
    assert_eq!(peer.count("charge"), 1);
    assert_eq!(peer.wait(Duration::from_secs(10)).code(), Some(3));
}

#[test]
fn a_server_that_ignores_its_closed_input_is_stopped() {
    let mut peer = ready(
        Spawn::proxy()
            .env("MCP_TEST_IGNORE_EOF", "1")
            .config("[proxy]\nshutdown_timeout = \"300ms\""),
    );
    let started = Instant::now();
    peer.close_stdin();
    let status = peer.wait(Duration::from_secs(10));
    assert!(started.elapsed() >= Duration::from_millis(300));
    // SIGTERM: 128 + 15.
    assert_eq!(status.code(), Some(143));
}

#[test]
fn malformed_lines_pass_through_both_ways_and_the_proxy_carries_on() {
    let mut peer = ready(Spawn::proxy());
    peer.send_line(b"{this is not json");
    let answer: Value = serde_json::from_slice(&peer.recv_line()).unwrap();
    assert_eq!(answer["error"]["code"], -32700);
    assert!(
        peer.server_received()
            .iter()
            .any(|l| l == b"{this is not json")
    );
    let id = peer.request_async("test/garbage", json!({}));
    assert_eq!(peer.recv_line(), b"this is not json {\n");
    peer.response(&id);
    peer.send_line(b"[1, 2");
    peer.send_line(b"\"just a string\"");
    let answer = peer.call("charge", json!({"still": "works"}));
    assert!(!is_error(&answer), "{answer}");
}

#[test]
fn without_a_scope_the_proxy_picks_and_logs_a_random_one() {
    let mut a = ready(Spawn::proxy());
    let b_answer = {
        let mut b = ready(Spawn::proxy());
        b.call("charge", json!({"x": 1}))
    };
    let a_answer = a.call("charge", json!({"x": 1}));
    assert_ne!(
        a_answer["result"]["_meta"]["received"]["toolonce/key"],
        b_answer["result"]["_meta"]["received"]["toolonce/key"]
    );
    assert!(a.stderr().contains("random scope"), "{}", a.stderr());
}

/// Node.js clients (libuv) give a child UNIX sockets, not pipes, for its stdio.
#[test]
fn works_when_the_client_talks_over_unix_sockets() {
    use std::io::{BufRead, BufReader, Write};
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    use std::process::{Command, Stdio};

    let (mut ours, theirs) = UnixStream::pair().unwrap();
    ours.set_read_timeout(Some(mcp_peer::PATIENCE)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("executions");
    let mut proxy = Command::new(mcp_peer::toolonce())
        .args(["mcp", "--store", "memory://", "--scope", "socket", "--"])
        .arg(mcp_peer::test_server())
        .env("MCP_TEST_COUNTER", &counter)
        .stdin(Stdio::from(OwnedFd::from(theirs.try_clone().unwrap())))
        .stdout(Stdio::from(OwnedFd::from(theirs)))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(ours.try_clone().unwrap());
    let mut answers = Vec::new();
    for id in 1..=3 {
        writeln!(
            ours,
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"charge","arguments":{{"n":1}}}}}}"#
        )
        .unwrap();
        let mut line = String::new();
        lines.read_line(&mut line).unwrap();
        answers.push(without_outcome(&serde_json::from_str(&line).unwrap()));
    }
    assert_eq!(answers[0], answers[1]);
    assert_eq!(answers[1], answers[2]);
    assert_eq!(
        std::fs::read_to_string(&counter).unwrap().lines().count(),
        1
    );
    ours.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(proxy.wait().unwrap().code(), Some(0));
}

/// Neither a pipe nor a socket (here: files), stdin and stdout fall back to blocking I/O.
#[test]
fn works_when_stdin_and_stdout_are_files() {
    use std::process::{Command, Stdio};

    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let output = dir.path().join("out.jsonl");
    std::fs::write(
        &input,
        concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge","arguments":{}}}"#,
            "\n",
        ),
    )
    .unwrap();
    let status = Command::new(mcp_peer::toolonce())
        .args(["mcp", "--store", "memory://", "--"])
        .arg(mcp_peer::test_server())
        .stdin(std::fs::File::open(&input).unwrap())
        .stdout(std::fs::File::create(&output).unwrap())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let out = std::fs::read_to_string(&output).unwrap();
    let answers: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(answers.len(), 2, "{out}");
    assert!(
        answers.iter().any(|a| a["id"] == 2 && !is_error(a)),
        "{out}"
    );
}
