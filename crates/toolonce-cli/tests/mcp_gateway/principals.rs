//! Principals through the gateway: two clients with different credentials never share an
//! operation (neither its result nor, with a client-named key, the knowledge that it exists),
//! sessions of one principal do, a session answers only its own principal, and the client's
//! `Authorization` goes on to the server only when asked (`--forward-authorization`).

use super::*;

const ALICE: &str = "Authorization: Bearer alice-4c1e9a70b2d5\r\n";
const BOB: &str = "Authorization: Bearer bob-8e2f6d31c0a9\r\n";

/// Opens a session with the credentials in `auth` (`Authorization: ...\r\n`); returns the
/// headers of its later requests (the same credentials and the session id).
pub(super) fn open_session_as(port: u16, auth: &str) -> String {
    let answer = raw(port, "POST", &format!("{JSON_ONLY}{auth}"), INITIALIZE);
    assert_eq!(answer.status(), 200, "{}", answer.body);
    let headers = format!(
        "{auth}Mcp-Session-Id: {}\r\n",
        answer.header("mcp-session-id").expect("a session id")
    );
    let answer = raw(
        port,
        "POST",
        &format!("{JSON_ONLY}{headers}"),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert_eq!(answer.status(), 202, "{}", answer.body);
    headers
}

/// A `tools/call` of `write` named by the client key `key`.
fn named_write(port: u16, headers: &str, id: &str, key: &str, item: &str) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": "write", "arguments": {"item": item},
                                 "_meta": {"toolonce/key": key}}});
    raw(port, "POST", &format!("{BOTH}{headers}"), &body.to_string())
        .messages()
        .pop()
        .unwrap()
}

/// The reproduction of issue 22, item 1: Bob, with his own credentials, calling the write
/// Alice called got her stored result and his call never ran.
#[test]
fn two_principals_calling_the_same_write_each_run_it_and_one_principals_sessions_share_it() {
    let server = HttpServer::start("sse", &[]);
    let mut gateway = gateway_to(&server.url(), &["--forward-authorization"], &[]);
    let port = gateway.port;
    let alice = open_session_as(port, ALICE);
    let bob = open_session_as(port, BOB);
    let write =
        |headers: &str, id: &str| raw_call(port, headers, id, "write", &json!({"item": "issue"}));
    let first = write(&alice, "1");
    assert_eq!(text(&first), "wrote issue (execution 1)", "{first}");
    let bobs = write(&bob, "1");
    assert_eq!(
        outcome(&bobs["result"]),
        None,
        "Bob got Alice's result: {bobs}"
    );
    assert_eq!(text(&bobs), "wrote issue (execution 2)", "{bobs}");
    // Another session of Alice's is Alice: her result, not a third run.
    let alice_again = open_session_as(port, ALICE);
    let again = write(&alice_again, "2");
    assert_eq!(outcome(&again["result"]), Some("replayed"), "{again}");
    assert_eq!(text(&again), "wrote issue (execution 1)", "{again}");
    assert_eq!(server.executions().len(), 2);
    gateway.stop();
}

/// A client-named key is the principal's own: Bob naming his call with a key Alice used gets
/// neither her result (same arguments) nor a conflict (other arguments), which would tell him
/// that someone used it.
#[test]
fn a_client_named_key_of_one_principal_is_neither_replayed_to_nor_a_conflict_for_another() {
    let server = HttpServer::start("json", &[]);
    let mut gateway = gateway_to(&server.url(), &["--forward-authorization"], &[]);
    let port = gateway.port;
    let alice = open_session_as(port, ALICE);
    let bob = open_session_as(port, BOB);
    let a7 = named_write(port, &alice, "a7", "step-7", "alpha");
    assert_eq!(text(&a7), "wrote alpha (execution 1)", "{a7}");
    let a8 = named_write(port, &alice, "a8", "step-8", "gamma");
    assert_eq!(text(&a8), "wrote gamma (execution 2)", "{a8}");
    let b7 = named_write(port, &bob, "b7", "step-7", "beta");
    assert_eq!(outcome(&b7["result"]), None, "a conflict oracle: {b7}");
    assert_eq!(text(&b7), "wrote beta (execution 3)", "{b7}");
    let b8 = named_write(port, &bob, "b8", "step-8", "gamma");
    assert_eq!(outcome(&b8["result"]), None, "Bob got Alice's result: {b8}");
    assert_eq!(text(&b8), "wrote gamma (execution 4)", "{b8}");
    // Each principal's own key still is one operation.
    let again = named_write(port, &alice, "a7-again", "step-7", "alpha");
    assert_eq!(outcome(&again["result"]), Some("replayed"), "{again}");
    let conflict = named_write(port, &bob, "b7-other", "step-7", "delta");
    assert_eq!(outcome(&conflict["result"]), Some("conflict"), "{conflict}");
    assert_eq!(server.executions().len(), 4);
    gateway.stop();
}

/// Issue 22, item 4: another principal's session id is answered as an unknown one, for every
/// method, and does not end or touch the session.
#[test]
fn a_session_id_presented_with_another_principals_credentials_gets_404_as_an_unknown_one() {
    let server = HttpServer::start("sse", &[]);
    let mut gateway = gateway_to(&server.url(), &["--forward-authorization"], &[]);
    let port = gateway.port;
    let alice = open_session_as(port, ALICE);
    let session = alice.strip_prefix(ALICE).unwrap();
    let as_bob = format!("{BOB}{session}");
    let unknown = format!("{BOB}Mcp-Session-Id: 00000000000000000000000000000000\r\n");
    for headers in [&as_bob, &unknown] {
        let post = raw(port, "POST", &format!("{BOTH}{headers}"), PING);
        assert_eq!(post.status(), 404, "{}", post.body);
        assert!(post.body.contains("no such session"), "{}", post.body);
        let get = raw(
            port,
            "GET",
            &format!("Accept: text/event-stream\r\n{headers}"),
            "",
        );
        assert_eq!(get.status(), 404, "{}", get.body);
        let delete = raw(port, "DELETE", headers, "");
        assert_eq!(delete.status(), 404, "{}", delete.body);
    }
    // Without credentials, too: the session is Alice's.
    let bare = raw(port, "POST", &format!("{BOTH}{session}"), PING);
    assert_eq!(bare.status(), 404, "{}", bare.body);
    // Alice's session is still hers, and still open.
    let call = raw_call(port, &alice, "1", "write", &json!({"item": "mine"}));
    assert_eq!(text(&call), "wrote mine (execution 1)", "{call}");
    let delete = raw(port, "DELETE", &alice, "");
    assert_eq!(delete.status(), 200, "{}", delete.body);
    gateway.stop();
}

/// Issue 22, item 2: by default the client's `Authorization` stays at the gateway, which
/// reaches the server with its own (`--header`); a client's token never reaches the server.
#[test]
fn by_default_the_clients_authorization_stays_at_the_gateway_and_the_server_gets_the_gateways() {
    let server = HttpServer::bridge(&mcp_peer::modern_server());
    let own = "Authorization: Bearer gateway-own-51d0c3";
    let mut gateway = gateway_to(
        &server.url(),
        &["--server-id", "mail", "--header", own],
        &[],
    );
    let answer = modern_post_with(gateway.port, ALICE, "tools/list", "a-1", json!({}));
    assert!(answer["result"]["tools"].is_array(), "{answer}");
    let answer = modern_post_with(gateway.port, "", "tools/list", "n-1", json!({}));
    assert!(answer["result"]["tools"].is_array(), "{answer}");
    let requests = server.requests();
    assert!(!requests.is_empty());
    for request in &requests {
        assert_eq!(
            request["authorization"], "Bearer gateway-own-51d0c3",
            "{requests:#?}"
        );
    }
    let log = gateway.stop();
    assert!(!log.contains("alice-4c1e9a70b2d5"), "{log}");
    assert!(!log.contains("gateway-own-51d0c3"), "{log}");
}

/// Without `--forward-authorization` and without `--header`, a server that wants credentials
/// refuses the gateway, not the client: the client gets 502, never the server's challenge
/// (which would send it to authenticate with the server, whose token the gateway would not
/// pass on anyway). With the flag, the client's own token reaches the server.
#[test]
fn a_client_token_reaches_the_server_only_with_forward_authorization() {
    let server = HttpServer::start("json", &[("REQUIRE_TOKEN", UPSTREAM_TOKEN)]);
    let auth = format!("Authorization: Bearer {UPSTREAM_TOKEN}\r\n");
    let mut kept = gateway_to(&server.url(), &[], &[]);
    let refused = raw(kept.port, "POST", &format!("{JSON_ONLY}{auth}"), INITIALIZE);
    assert_eq!(refused.status(), 502, "{}", refused.body);
    assert!(
        refused.header("www-authenticate").is_none(),
        "{}",
        refused.head
    );
    assert!(
        refused.header("mcp-session-id").is_none(),
        "{}",
        refused.head
    );
    let log = kept.stop();
    assert!(!log.contains(UPSTREAM_TOKEN), "the token was logged: {log}");

    let mut forwarding = gateway_to(&server.url(), &["--forward-authorization"], &[]);
    let session = open_session_as(forwarding.port, &auth);
    let call = raw_call(
        forwarding.port,
        &session,
        "1",
        "write",
        &json!({"item": "f"}),
    );
    assert_eq!(text(&call), "wrote f (execution 1)", "{call}");
    let log = forwarding.stop();
    assert!(!log.contains(UPSTREAM_TOKEN), "the token was logged: {log}");
    assert_eq!(server.executions().len(), 1);
}

#[test]
fn forward_authorization_without_an_upstream_or_with_a_shared_token_exits_2_naming_it() {
    for extra in [
        vec!["--forward-authorization", "--"],
        vec![
            "--forward-authorization",
            "--require-token",
            "T",
            "--upstream",
            "http://127.0.0.1:9/mcp",
        ],
    ] {
        let mut command = Command::new(toolonce());
        command
            .args(["mcp", "--store", "memory://", "--listen", "127.0.0.1:0"])
            .args(&extra)
            .env("T", "a-token-of-sorts");
        if extra.last() == Some(&"--") {
            command.arg(test_server());
        }
        let output = command.output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{extra:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("--forward-authorization"), "{stderr}");
    }
}
