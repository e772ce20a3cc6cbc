//! A 2026-07-28 request without a session that the server refuses (an envelope missing from
//! `_meta`, headers that disagree with the body, an unsupported version, an unknown or removed
//! method, a client capability not declared) is refused through the gateway as by the server
//! directly: same JSON-RPC code, same HTTP status (400 or 404), the client's id. And no client's
//! request changes the stdio server that every sessionless client shares: the official SDK's
//! stdio entry takes the first message's protocol era for the whole connection, so a probe
//! without the envelope must not reach it. The server is the conformance suite's 2026-07-28
//! reference server on the official SDK (`@modelcontextprotocol/server`), over stdio and HTTP.

use super::*;
use crate::mcp_conformance_npm::{Reference, SERVER_2026, node, suite_dir};

/// The `_meta` every well-formed 2026-07-28 request carries (no client capabilities).
fn envelope() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// A gateway in front of the reference server over stdio.
fn gateway_for_reference_over_stdio() -> Gateway {
    let mut command = Command::new(toolonce());
    command
        .args(["mcp", "--store", "memory://", "--scope", "gateway-test"])
        .args(["--listen", "127.0.0.1:0", "--"])
        .arg(node())
        .arg(suite_dir().join(SERVER_2026))
        .arg("stdio");
    Gateway::spawn(command)
}

/// A POST of `method` with `id` and `params` as they are (no `_meta` added), with
/// `MCP-Protocol-Version: version` and `accept`; the whole answer.
fn post(port: u16, accept: &str, version: &str, method: &str, id: Value, params: Value) -> Raw {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    raw(
        port,
        "POST",
        &format!("{accept}MCP-Protocol-Version: {version}\r\nMcp-Method: {method}\r\n"),
        &body.to_string(),
    )
}

/// Asserts that `answer` is a refusal with HTTP `status`, JSON-RPC `code` and the id `id`, as
/// a JSON body; returns the error.
fn refused(answer: &Raw, status: u16, code: i64, id: &Value, what: &str) -> Value {
    assert_eq!(
        answer.status(),
        status,
        "{what}: {}{}",
        answer.head,
        answer.body
    );
    let messages = answer.messages();
    assert_eq!(messages.len(), 1, "{what}: {}", answer.body);
    let message = &messages[0];
    assert_eq!(message["error"]["code"], code, "{what}: {message}");
    assert_eq!(&message["id"], id, "{what}: {message}");
    message["error"].clone()
}

#[test]
fn a_probe_without_the_protocol_version_in_its_meta_is_refused_and_the_shared_stdio_server_stays_on_2026_07_28()
 {
    let gateway = gateway_for_reference_over_stdio();
    let port = gateway.port;
    // What the conformance suite sends first: the header says 2026-07-28, the body says no
    // version (no `_meta`; a `_meta` without the version).
    let bare = post(port, BOTH, MODERN, "server/discover", json!(101), json!({}));
    refused(&bare, 400, -32602, &json!(101), "no _meta");
    let mut meta = envelope();
    meta.as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/protocolVersion");
    let versionless = post(
        port,
        JSON_ONLY,
        MODERN,
        "server/discover",
        json!(102),
        json!({"_meta": meta}),
    );
    refused(
        &versionless,
        400,
        -32602,
        &json!(102),
        "no protocol version",
    );
    // The server every sessionless client shares still speaks 2026-07-28.
    let discovered = post(
        port,
        BOTH,
        MODERN,
        "server/discover",
        json!(201),
        json!({"_meta": envelope()}),
    );
    assert_eq!(discovered.status(), 200, "{}", discovered.body);
    let discovered = discovered.messages().pop().unwrap();
    assert!(
        discovered["result"]["supportedVersions"]
            .as_array()
            .is_some_and(|v| v.contains(&json!(MODERN))),
        "{discovered}"
    );
    let listed = post(
        port,
        BOTH,
        MODERN,
        "tools/list",
        json!(202),
        json!({"_meta": envelope()}),
    )
    .messages()
    .pop()
    .unwrap();
    assert_eq!(listed["result"]["resultType"], "complete", "{listed}");
}

/// The refusals of `server-stateless`, each as the reference server answers it directly.
fn assert_refused_as_directly(port: u16, shape: &str) {
    let with = |members: Value| {
        let mut meta = envelope();
        for (name, value) in members.as_object().unwrap() {
            meta[name] = value.clone();
        }
        json!({"_meta": meta})
    };
    for accept in [BOTH, JSON_ONLY] {
        let what = |case: &str| format!("{shape}, {}: {case}", accept.trim());
        let mut meta = envelope();
        meta.as_object_mut()
            .unwrap()
            .remove("io.modelcontextprotocol/clientCapabilities");
        let answer = post(
            port,
            accept,
            MODERN,
            "server/discover",
            json!(104),
            json!({"_meta": meta}),
        );
        refused(
            &answer,
            400,
            -32602,
            &json!(104),
            &what("no client capabilities"),
        );

        let v999 = "v999.0.0";
        let answer = post(
            port,
            accept,
            v999,
            "server/discover",
            json!(301),
            with(json!({"io.modelcontextprotocol/protocolVersion": v999})),
        );
        let error = refused(&answer, 400, -32022, &json!(301), &what("unsupported"));
        assert_eq!(
            error["data"]["requested"],
            v999,
            "{}: {error}",
            what("unsupported")
        );
        assert_eq!(error["data"]["supported"], json!([MODERN]), "{error}");
        assert!(
            error["data"].get("toolonce/httpStatus").is_none(),
            "{error}"
        );

        let answer = post(
            port,
            accept,
            MODERN,
            "server/discover",
            json!(302),
            with(json!({"io.modelcontextprotocol/protocolVersion": v999})),
        );
        refused(&answer, 400, -32020, &json!(302), &what("header mismatch"));

        let answer = post(
            port,
            accept,
            MODERN,
            "tools/call",
            json!(401),
            json!({"name": "test_missing_capability", "arguments": {}, "_meta": envelope()}),
        );
        let error = refused(&answer, 400, -32021, &json!(401), &what("capability"));
        assert!(
            error["data"]["requiredCapabilities"]["sampling"].is_object(),
            "{error}"
        );

        for method in ["initialize", "ping", "logging/setLevel", "unknown/method"] {
            let answer = post(port, accept, MODERN, method, json!(500), with(json!({})));
            refused(&answer, 404, -32601, &json!(500), &what(method));
        }

        // What is not refused is answered as the client asked.
        let listed = post(
            port,
            accept,
            MODERN,
            "tools/list",
            json!(202),
            with(json!({})),
        );
        assert_eq!(listed.status(), 200, "{}", listed.body);
        let streamed = listed
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/event-stream"));
        assert_eq!(streamed, accept == BOTH, "{}", listed.head);
        let listed = listed.messages().pop().unwrap();
        assert!(listed["result"]["tools"].is_array(), "{listed}");
    }
}

#[test]
fn refusals_of_a_stdio_server_get_the_http_status_a_2026_07_28_server_gives_them() {
    let gateway = gateway_for_reference_over_stdio();
    assert_refused_as_directly(gateway.port, "stdio");
}

#[test]
fn refusals_of_an_http_server_keep_its_code_and_its_http_status_through_the_gateway() {
    let reference = Reference::start();
    let gateway = gateway_to(&reference.url, &[], &[]);
    assert_refused_as_directly(gateway.port, "--upstream");
}
