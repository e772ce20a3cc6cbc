//! `toolonce mcp` with protocol 2026-07-28 (no `initialize`, `server/discover`, per-request
//! `_meta`, multi round-trip calls) against a strict server of that version (the
//! `mcp_modern_server` example), and operation keys supplied by the client
//! (`_meta["toolonce/key"]`), over stdio with the real binary.

#[path = "support/mcp_peer.rs"]
mod mcp_peer;

use mcp_peer::{Peer, Spawn, is_error, modern_server, text, without_outcome};
use serde_json::{Value, json};

const VERSION: &str = "2026-07-28";

/// The `_meta` every 2026-07-28 request carries.
fn request_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "toolonce-tests", "version": "0"},
    })
}

/// The proxy in front of the 2026-07-28 server; nothing sent yet (there is no handshake).
fn modern() -> Peer {
    Spawn::proxy()
        .arg("--scope")
        .arg("run-1")
        .arg("--server-id")
        .arg("mail")
        .server([modern_server()])
        .start()
}

/// A 2026-07-28 `tools/call` of `tool` with `arguments` and the other `params` members in
/// `extra` (`requestState`, `inputResponses`); returns the whole answer.
fn call(peer: &mut Peer, tool: &str, arguments: &Value, extra: &Value) -> Value {
    let mut params = json!({"name": tool, "arguments": arguments, "_meta": request_meta()});
    for (name, value) in extra.as_object().expect("an object") {
        params[name] = value.clone();
    }
    peer.request("tools/call", params)
}

fn outcome(answer: &Value) -> &Value {
    &answer["result"]["_meta"]["toolonce/outcome"]
}

/// The operation key the server received with a tool call, as its result echoes it.
fn key_received(answer: &Value) -> &Value {
    &answer["result"]["_meta"]["received"]["toolonce/key"]
}

#[test]
fn input_required_is_passed_on_unrecorded_and_the_continuation_runs_once_then_duplicates_replay_it()
{
    let mut peer = modern();
    let args = json!({"to": "ops@example.com", "body": "deploy done"});
    let first = call(&mut peer, "send_mail", &args, &json!({}));
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    assert!(
        outcome(&first).is_null(),
        "the server's own answer: {first}"
    );
    assert_eq!(peer.count("send_mail"), 0);
    let state = first["result"]["requestState"].clone();

    // Nothing took effect, so nothing was recorded: the same call asks again.
    let again = call(&mut peer, "send_mail", &args, &json!({}));
    assert_eq!(again["result"]["resultType"], "input_required", "{again}");
    assert!(outcome(&again).is_null(), "{again}");

    // The continuation (a new id, the state and the answers) is forwarded and runs.
    let continuation = json!({
        "requestState": state,
        "inputResponses": {"confirm": {"action": "accept", "content": {}}},
    });
    let done = call(&mut peer, "send_mail", &args, &continuation);
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(text(&done), "send_mail done, execution #1");
    assert_eq!(peer.count("send_mail"), 1);
    // One operation from the first round to the last: the server saw one key.
    assert!(key_received(&first).as_str().unwrap().starts_with("idem:"));
    assert_eq!(key_received(&first), key_received(&done));

    // A plain duplicate, and the continuation sent again (its answer lost), replay the final
    // answer.
    let duplicate = call(&mut peer, "send_mail", &args, &json!({}));
    assert_eq!(outcome(&duplicate), "replayed", "{duplicate}");
    assert_eq!(without_outcome(&duplicate), without_outcome(&done));
    let resent = call(&mut peer, "send_mail", &args, &continuation);
    assert_eq!(outcome(&resent), "replayed", "{resent}");
    assert_eq!(without_outcome(&resent), without_outcome(&done));
    assert_eq!(peer.count("send_mail"), 1);

    // Other arguments are another operation, which asks again.
    let other = call(
        &mut peer,
        "send_mail",
        &json!({"to": "ops@example.com", "body": "rollback"}),
        &json!({}),
    );
    assert_eq!(other["result"]["resultType"], "input_required", "{other}");
}

#[test]
fn the_proxy_lists_a_modern_servers_tools_itself_with_the_clients_protocol_meta() {
    let mut peer = modern();
    // `inbox` is read-only, listed on the server's second page: it runs every time.
    for _ in 0..3 {
        let answer = call(&mut peer, "inbox", &json!({"folder": "in"}), &json!({}));
        assert!(!is_error(&answer), "{answer}");
        assert!(key_received(&answer).is_null(), "{answer}");
    }
    assert_eq!(peer.count("inbox"), 3);
    // `charge` is a write.
    call(&mut peer, "charge", &json!({"amount": 5}), &json!({}));
    call(&mut peer, "charge", &json!({"amount": 5}), &json!({}));
    assert_eq!(peer.count("charge"), 1);

    // The proxy's own listing: both pages, under ids no client uses, with the protocol version
    // and capabilities the strict server requires (copied from the client's request), and
    // answered with results, not errors.
    let log = peer.server_log();
    let own: Vec<Value> = log
        .iter()
        .filter(|(d, _)| *d == '<')
        .map(|(_, l)| serde_json::from_slice::<Value>(l).unwrap())
        .filter(|m| m["method"] == "tools/list")
        .collect();
    assert_eq!(own.len(), 2, "{own:?}");
    for request in &own {
        let id = request["id"].as_str().expect("a string id");
        assert!(id.starts_with("toolonce-"), "{id}");
        let meta = &request["params"]["_meta"];
        assert_eq!(meta["io.modelcontextprotocol/protocolVersion"], VERSION);
        assert_eq!(
            meta["io.modelcontextprotocol/clientCapabilities"],
            request_meta()["io.modelcontextprotocol/clientCapabilities"]
        );
        let answer = log
            .iter()
            .filter(|(d, _)| *d == '>')
            .map(|(_, l)| serde_json::from_slice::<Value>(l).unwrap())
            .find(|m| m["id"] == request["id"])
            .expect("the server answered the proxy's listing");
        assert!(answer.get("result").is_some(), "{answer}");
    }
    assert_eq!(own[1]["params"]["cursor"], "page-2");
    // No handshake was invented.
    assert!(
        !log.iter()
            .any(|(_, l)| String::from_utf8_lossy(l).contains("initialize")),
        "{log:?}"
    );
}

#[test]
fn a_tools_list_changed_on_a_subscription_makes_the_proxy_list_again_with_the_protocol_meta() {
    let mut peer = modern();
    for _ in 0..2 {
        call(&mut peer, "inbox", &json!({}), &json!({}));
    }
    assert_eq!(peer.count("inbox"), 2);
    let listen = peer.request_async(
        "subscriptions/listen",
        json!({"_meta": request_meta(), "notifications": {"toolsListChanged": true}}),
    );
    let ack: Value = serde_json::from_slice(&peer.recv_line()).unwrap();
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        listen
    );
    // The server's tools change: `inbox` is now a write.
    let retooled = peer.request("test/retool", json!({"_meta": request_meta()}));
    assert!(retooled.get("result").is_some(), "{retooled}");
    let listings = |p: &Peer| {
        p.server_received()
            .iter()
            .map(|l| serde_json::from_slice::<Value>(l).unwrap())
            .filter(|m| m["method"] == "tools/list")
            .collect::<Vec<_>>()
    };
    peer.eventually("the proxy listed again", |p| listings(p).len() == 4);
    for request in listings(&peer) {
        assert_eq!(
            request["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
            VERSION
        );
    }
    for _ in 0..2 {
        call(&mut peer, "inbox", &json!({}), &json!({}));
    }
    assert_eq!(peer.count("inbox"), 3);
}

#[test]
fn a_stale_listing_is_listed_again_before_the_next_call() {
    // A listing fresh for 0 ms is fresh for the proxy's minimum, one second.
    let mut peer = Spawn::proxy()
        .env("MCP_TEST_TTL_MS", "0")
        .server([modern_server()])
        .start();
    let listings = |p: &Peer| {
        p.server_received()
            .iter()
            .filter(|l| String::from_utf8_lossy(l).contains("\"tools/list\""))
            .count()
    };
    call(&mut peer, "inbox", &json!({}), &json!({}));
    call(&mut peer, "inbox", &json!({}), &json!({}));
    assert_eq!(peer.count("inbox"), 2);
    // `inbox` becomes a write, and nobody subscribed to hear it.
    peer.request("test/retool", json!({"_meta": request_meta()}));
    std::thread::sleep(std::time::Duration::from_millis(1500));
    call(&mut peer, "inbox", &json!({}), &json!({}));
    call(&mut peer, "inbox", &json!({}), &json!({}));
    assert_eq!(peer.count("inbox"), 3);
    assert_eq!(listings(&peer), 4, "two listings of two pages");
}

#[test]
fn a_first_call_that_cannot_be_read_exactly_is_still_classified_by_a_listing() {
    let mut peer = modern();
    // A read with a lone surrogate escape, which a JavaScript server accepts: the proxy lists
    // (its `_meta` is exact), finds `inbox` read-only and passes it on as it came.
    let line = format!(
        r#"{{"jsonrpc":"2.0","id":"odd-1","method":"tools/call","params":{{"name":"inbox","arguments":{{"q":"\ud800"}},"_meta":{}}}}}"#,
        request_meta()
    );
    peer.send_line(line.as_bytes());
    peer.eventually("the call reached the server", |p| {
        p.server_received().iter().any(|l| *l == line.as_bytes())
    });
    // A write that cannot be read exactly is still refused.
    let write = line.replace("inbox", "charge").replace("odd-1", "odd-2");
    peer.send_line(write.as_bytes());
    let refused = peer.response(&json!("odd-2"));
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        !peer
            .server_received()
            .iter()
            .any(|l| *l == write.as_bytes())
    );
}

#[test]
fn discover_and_unknown_methods_pass_through_byte_for_byte() {
    let mut peer = modern();
    let discover = br#"{ "method" : "server/discover", "jsonrpc":"2.0","id":"d-1","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"x-future":{"n":1.50}},"com.example/trace":"\u0061bc"}} }"#;
    peer.send_line(discover);
    let discovered = peer.recv_line();
    let unknown = br#"{"jsonrpc":"2.0","id":7,"method":"com.example/frobnicate","params":{"z":[1,2.0,1e2],"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    peer.send_line(unknown);
    let refused = peer.recv_line();
    let notification =
        br#"{"jsonrpc":"2.0","method":"com.example/notice","params":{"_meta":{"k":[]}}}"#;
    peer.send_line(notification);

    let answer: Value = serde_json::from_slice(&discovered).unwrap();
    assert_eq!(answer["result"]["supportedVersions"], json!([VERSION]));
    let answer: Value = serde_json::from_slice(&refused).unwrap();
    assert_eq!(answer["error"]["code"], -32601);
    peer.eventually("the notification reached the server", |p| {
        p.server_received().len() == 3
    });
    let trim = |line: &[u8]| line.strip_suffix(b"\n").unwrap_or(line).to_vec();
    assert_eq!(
        peer.server_log(),
        vec![
            ('<', discover.to_vec()),
            ('>', trim(&discovered)),
            ('<', unknown.to_vec()),
            ('>', trim(&refused)),
            ('<', notification.to_vec()),
        ]
    );
}

#[test]
fn a_continuation_under_a_client_key_is_the_same_operation() {
    let mut peer = modern();
    let args = json!({"to": "ops@example.com", "body": "weekly report"});
    let keyed = |extra: Value| {
        let mut extra = extra;
        extra["_meta"] = request_meta();
        extra["_meta"]["toolonce/key"] = json!("report-2026-w48");
        extra
    };
    let first = call(&mut peer, "send_mail", &args, &keyed(json!({})));
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    let continuation = keyed(json!({
        "requestState": first["result"]["requestState"],
        "inputResponses": {"confirm": {"action": "accept"}},
    }));
    let done = call(&mut peer, "send_mail", &args, &continuation);
    assert_eq!(text(&done), "send_mail done, execution #1");
    let duplicate = call(&mut peer, "send_mail", &args, &keyed(json!({})));
    assert_eq!(outcome(&duplicate), "replayed", "{duplicate}");
    assert_eq!(peer.count("send_mail"), 1);
    assert_eq!(key_received(&first), key_received(&done));
    // Other arguments under the key: a conflict, which the proxy answers as a complete result
    // (every 2026-07-28 result names its type).
    let other = json!({"to": "ops@example.com", "body": "monthly report"});
    let conflict = call(&mut peer, "send_mail", &other, &keyed(json!({})));
    assert_eq!(outcome(&conflict), "conflict", "{conflict}");
    assert_eq!(conflict["result"]["resultType"], "complete");
    assert_eq!(peer.count("send_mail"), 1);
}

// Keys from the client, over the 2025 protocol (the rules do not depend on the version).

fn ready() -> Peer {
    let mut peer = Spawn::proxy()
        .arg("--scope")
        .arg("wf")
        .arg("--server-id")
        .arg("test")
        .start();
    peer.initialize();
    peer
}

/// A `tools/call` with `key` as `_meta["toolonce/key"]`.
fn keyed(peer: &mut Peer, tool: &str, arguments: Value, key: Value) -> Value {
    peer.request(
        "tools/call",
        json!({"name": tool, "arguments": arguments, "_meta": {"toolonce/key": key}}),
    )
}

#[test]
fn a_client_key_names_the_operation_and_its_arguments_are_the_fingerprint() {
    let mut peer = ready();
    let step = json!("wf-42/step-3");
    let first = keyed(
        &mut peer,
        "charge",
        json!({"amount": 5, "card": "x"}),
        step.clone(),
    );
    assert!(!is_error(&first), "{first}");
    // The same key and the same arguments (another spelling): a duplicate.
    let again = keyed(
        &mut peer,
        "charge",
        json!({"card": "x", "amount": 5.0}),
        step.clone(),
    );
    assert_eq!(again["result"]["_meta"]["toolonce/outcome"], "replayed");
    assert_eq!(without_outcome(&again), without_outcome(&first));
    assert_eq!(peer.count("charge"), 1);

    // The same key with other arguments: a conflict, not run.
    let conflict = keyed(&mut peer, "charge", json!({"amount": 6, "card": "x"}), step);
    assert!(is_error(&conflict), "{conflict}");
    assert_eq!(conflict["result"]["_meta"]["toolonce/outcome"], "conflict");
    assert!(text(&conflict).contains("toolonce/key"), "{conflict}");
    assert_eq!(peer.count("charge"), 1);

    // Another key with the same arguments: another operation, which runs.
    let next = keyed(
        &mut peer,
        "charge",
        json!({"amount": 5, "card": "x"}),
        json!("wf-42/step-4"),
    );
    assert!(!is_error(&next), "{next}");
    assert!(next["result"]["_meta"].get("toolonce/outcome").is_none());
    assert_eq!(peer.count("charge"), 2);
    // Without a key, the arguments name the operation, apart from every client key.
    peer.call("charge", json!({"amount": 5, "card": "x"}));
    assert_eq!(peer.count("charge"), 3);

    // The server received the proxy's operation keys, one per operation, never the client's
    // text.
    let keys: Vec<String> = peer.executions().into_iter().map(|(.., k)| k).collect();
    assert!(keys.iter().all(|k| k.starts_with("idem:")), "{keys:?}");
    assert!(keys[0] != keys[1] && keys[1] != keys[2] && keys[0] != keys[2]);
    // Another tool under the same key is another operation.
    keyed(
        &mut peer,
        "plain",
        json!({"amount": 5, "card": "x"}),
        json!("wf-42/step-3"),
    );
    assert_eq!(peer.count("plain"), 1);
}

#[test]
fn a_malformed_client_key_is_refused_without_reaching_the_server() {
    let mut peer = ready();
    for key in [
        json!(""),
        json!("k".repeat(256)),
        json!("has space"),
        json!("tab\tinside"),
        json!("caf\u{e9}"),
        json!(42),
        json!(null),
        json!({"id": 1}),
    ] {
        let answer = keyed(&mut peer, "charge", json!({"amount": 1}), key.clone());
        assert_eq!(answer["error"]["code"], -32602, "{key}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("toolonce/key"), "{message}");
        assert_eq!(answer["error"]["data"]["toolonce/outcome"], "not_executed");
    }
    assert_eq!(peer.count("charge"), 0);
    assert!(
        !peer
            .server_received()
            .iter()
            .any(|l| String::from_utf8_lossy(l).contains("tools/call")),
        "a refused call reached the server"
    );
    // The longest key accepted, of every visible ASCII character.
    let longest: String = (0..255u8).map(|i| char::from(b'!' + i % 94)).collect();
    let answer = keyed(&mut peer, "charge", json!({"amount": 1}), json!(longest));
    assert!(!is_error(&answer), "{answer}");
    assert_eq!(peer.count("charge"), 1);
    // A read never touches the store: its `_meta` reaches the server as the client sent it.
    for _ in 0..2 {
        let answer = keyed(&mut peer, "lookup", json!({}), json!("not a key!"));
        assert_eq!(
            answer["result"]["_meta"]["received"]["toolonce/key"],
            "not a key!"
        );
    }
    assert_eq!(peer.count("lookup"), 2);
}

#[test]
fn a_call_refused_for_its_protocol_version_is_not_recorded_and_the_retry_runs() {
    let mut peer = modern();
    let args = json!({"amount": 12});
    let mut params = json!({"name": "charge", "arguments": args, "_meta": request_meta()});
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let refused = peer.request("tools/call", params);
    assert_eq!(refused["error"]["code"], -32022, "{refused}");
    assert_eq!(refused["error"]["data"]["supported"], json!([VERSION]));
    // The client retries with a version the server supports, as the specification says: the
    // same operation, which has not run yet.
    let done = call(&mut peer, "charge", &args, &json!({}));
    assert!(!is_error(&done), "{done}");
    assert_eq!(text(&done), "charge done, execution #1");
    assert_eq!(peer.count("charge"), 1);
    // And the proxy listed again, for that version: `inbox` is a read.
    call(&mut peer, "inbox", &json!({}), &json!({}));
    call(&mut peer, "inbox", &json!({}), &json!({}));
    assert_eq!(peer.count("inbox"), 2);
}

#[test]
fn the_2025_11_25_session_flow_still_lists_after_initialized() {
    let mut peer = Spawn::proxy().start();
    let init = peer.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "toolonce-tests", "version": "0"}}),
    );
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    peer.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    for _ in 0..2 {
        peer.call("lookup", json!({"q": 1}));
        peer.call("charge", json!({"amount": 1}));
    }
    assert_eq!(peer.count("lookup"), 2);
    assert_eq!(peer.count("charge"), 1);
    // The proxy's listing carried no 2026 `_meta`: a session server gets none.
    let lists: Vec<Value> = peer
        .server_received()
        .iter()
        .map(|l| serde_json::from_slice::<Value>(l).unwrap())
        .filter(|m| m["method"] == "tools/list")
        .collect();
    assert_eq!(lists.len(), 1, "{lists:?}");
    assert!(lists[0]["params"].get("_meta").is_none(), "{lists:?}");
}

#[test]
fn a_client_key_names_the_same_operation_after_the_proxy_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("toolonce.db").display());
    let start = || {
        let mut peer = Spawn::proxy()
            .arg("--store")
            .arg(&store)
            .arg("--scope")
            .arg("wf")
            .arg("--server-id")
            .arg("test")
            .start();
        peer.initialize();
        peer
    };
    let mut first = start();
    let done = keyed(
        &mut first,
        "charge",
        json!({"amount": 9}),
        json!("wf-7/step-1"),
    );
    assert!(!is_error(&done), "{done}");
    assert_eq!(first.count("charge"), 1);
    drop(first);
    // A resumed agent sends the step again, through a new proxy and a new server.
    let mut second = start();
    let again = keyed(
        &mut second,
        "charge",
        json!({"amount": 9}),
        json!("wf-7/step-1"),
    );
    assert_eq!(
        again["result"]["_meta"]["toolonce/outcome"], "replayed",
        "{again}"
    );
    assert_eq!(without_outcome(&again), without_outcome(&done));
    assert_eq!(second.count("charge"), 0);
}
