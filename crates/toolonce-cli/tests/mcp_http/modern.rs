//! Protocol 2026-07-28 over HTTP.

use super::*;

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

/// A 2026-07-28 server refuses a request with a 4xx status and its own JSON-RPC error (an
/// unknown method: 404 and -32601; a capability the client did not declare: 400 and -32021
/// naming it): the client gets the server's error, code, message and data, with the status
/// beside them, not a -32600 of the proxy's, so it learns what to fix. The official SDK's
/// 2026-07-28 server (the conformance suite's reference server) over HTTP.
#[test]
fn a_2026_07_28_servers_own_refusal_reaches_the_client_with_its_code_and_data() {
    let server = mcp_conformance_npm::Reference::start();
    let mut peer = Spawn::proxy()
        .arg("--scope")
        .arg("http-test")
        .upstream(&server.url)
        .start();
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let unknown = peer.request("unknown/method", json!({"_meta": meta}));
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    assert_eq!(
        unknown["error"]["data"]["toolonce/httpStatus"], 404,
        "{unknown}"
    );
    for attempt in 0..2 {
        let refused = peer.request(
            "tools/call",
            json!({"name": "test_missing_capability", "arguments": {}, "_meta": meta}),
        );
        assert_eq!(refused["error"]["code"], -32021, "{attempt}: {refused}");
        assert!(
            refused["error"]["data"]["requiredCapabilities"]["sampling"].is_object(),
            "{refused}"
        );
        assert_eq!(
            refused["error"]["data"]["toolonce/httpStatus"], 400,
            "{refused}"
        );
        // Not recorded: the same call is refused by the server again, never replayed.
        assert!(
            refused["error"]["data"].get("toolonce/outcome").is_none(),
            "{refused}"
        );
    }
}
