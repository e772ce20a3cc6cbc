//! Protocol 2026-07-28 through the gateway: no sessions, each request names its version.

use super::*;

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
    // An unknown method gets the 404 a 2026-07-28 server answers it with over HTTP.
    let unknown = modern_answer(port, "", "com.example/frobnicate", "u-1", json!({"z": [1]}));
    assert_eq!(unknown.status(), 404, "{}", unknown.body);
    let unknown = unknown.messages().pop().unwrap();
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    assert_eq!(unknown["id"], "u-1", "{unknown}");

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
