//! The gateway in front of a Streamable HTTP server (`--upstream`): writes run once across
//! sessions and gateways, and each client's credentials reach the server, or stay at the gateway.

use super::*;

fn a_gateway_in_front_of_an_http_server_runs_a_write_once_across_sessions(mode: &str) {
    let server = HttpServer::start(mode, &[]);
    let mut gateway = gateway_to(&server.url(), &[], &[]);
    let root = "file:///srv/gateway-client";
    let steps = json!([
        {"tool": "write", "args": {"item": "a"}},
        {"tool": "write", "args": {"item": "a"}},
        {"tool": "roots"},
        {"tool": "read"},
    ]);
    let got = sdk_client(&gateway.url(), &steps, &[("ROOT", root)]);
    assert!(got.get("error").is_none(), "{got}");
    assert_eq!(got["server"]["name"], "toolonce-http-test", "{got}");
    let results = got["results"].as_array().unwrap();
    assert_eq!(result_text(&results[0]), "wrote a (execution 1)", "{got}");
    assert_eq!(outcome(&results[0]), None, "{got}");
    assert_eq!(outcome(&results[1]), Some("replayed"), "{got}");
    assert_eq!(result_text(&results[1]), "wrote a (execution 1)", "{got}");
    // The server asked the client for its roots while handling the call: the request went
    // through both legs and the client's answer came back.
    assert_eq!(result_text(&results[2]), root, "{got}");
    assert_eq!(result_text(&results[3]), "1", "{got}");
    if mode == "sse" {
        // The log message the server sent on the call's event stream reached the client.
        assert!(
            got["logs"]
                .as_array()
                .unwrap()
                .contains(&json!("writing a")),
            "{got}"
        );
    }

    // Another session of the gateway: its own session on the server, the same operation.
    let got = sdk_client(
        &gateway.url(),
        &json!([{"tool": "write", "args": {"item": "a"}}]),
        &[],
    );
    assert_eq!(outcome(&got["results"][0]), Some("replayed"), "{got}");
    let executions = server.executions();
    assert_eq!(executions.len(), 1, "{executions:?}");
    assert!(
        executions[0]["key"].as_str().unwrap().starts_with("idem:"),
        "{executions:?}"
    );
    // Each client session had a session of its own on the server, ended with it.
    let count = |method: &str, initialize: bool| {
        server
            .requests()
            .iter()
            .filter(|r| r["method"] == method)
            .filter(|r| {
                !initialize
                    || r["body"]
                        .as_str()
                        .is_some_and(|b| b.contains("\"initialize\""))
            })
            .count()
    };
    assert_eq!(count("POST", true), 2, "{:?}", server.requests());
    eventually("both sessions on the server are ended", || {
        count("DELETE", false) == 2
    });
    assert!(
        server
            .requests()
            .iter()
            .filter(|r| r["method"] != "POST"
                || !r["body"].as_str().unwrap().contains("\"initialize\""))
            .all(|r| r["session"] == true),
        "every request after initialize carries its session: {:?}",
        server.requests()
    );
    gateway.stop();
}

#[test]
fn a_gateway_in_front_of_an_http_server_with_json_answers_runs_a_write_once_across_sessions() {
    a_gateway_in_front_of_an_http_server_runs_a_write_once_across_sessions("json");
}

#[test]
fn a_gateway_in_front_of_an_http_server_with_sse_answers_runs_a_write_once_across_sessions() {
    a_gateway_in_front_of_an_http_server_runs_a_write_once_across_sessions("sse");
}

#[test]
fn the_clients_authorization_reaches_the_http_server_only_when_forwarded_and_never_a_gateway_token()
{
    let server = HttpServer::start("sse", &[("REQUIRE_TOKEN", UPSTREAM_TOKEN)]);
    let steps = json!([{"tool": "write", "args": {"item": "t"}}]);
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("toolonce.db").display());

    // Forwarded (asked for): the client's goes on.
    let mut open = gateway_on(&store, &server.url(), &["--forward-authorization"], &[]);
    let got = sdk_client(&open.url(), &steps, &[("TOKEN", UPSTREAM_TOKEN)]);
    assert!(got.get("error").is_none(), "{got}");
    assert_eq!(result_text(&got["results"][0]), "wrote t (execution 1)");
    let got = sdk_client(&open.url(), &steps, &[]);
    let error = got["error"].as_str().unwrap_or_else(|| panic!("{got}"));
    assert!(error.contains("401"), "{error}");
    // The server's refusal of the client's credentials is the gateway's answer too, so a
    // client that can authenticate learns it must; no session is left open.
    for headers in [
        String::new(),
        "Authorization: Bearer wrong-00000000\r\n".to_owned(),
    ] {
        let refused = raw(
            open.port,
            "POST",
            &format!("{JSON_ONLY}{headers}"),
            INITIALIZE,
        );
        assert_eq!(refused.status(), 401, "{}", refused.body);
        assert_eq!(
            refused.header("www-authenticate").as_deref(),
            Some("Bearer")
        );
        assert!(
            refused.header("mcp-session-id").is_none(),
            "{}",
            refused.head
        );
        assert!(!refused.body.contains(UPSTREAM_TOKEN), "{}", refused.body);
    }
    let log = open.stop();
    assert!(!log.contains(UPSTREAM_TOKEN), "the token was logged: {log}");

    // The gateway checks a token of its own: it stays at the gateway, even when it is the
    // very token the server would take; the server's comes from --header.
    let env = [("GATEWAY_TOKEN", UPSTREAM_TOKEN)];
    let mut guarded = gateway_on(
        &store,
        &server.url(),
        &["--require-token", "GATEWAY_TOKEN"],
        &env,
    );
    // The server refuses the gateway, which sent no credentials (the client gets a 502, not
    // the server's challenge: see `principals`).
    let got = sdk_client(&guarded.url(), &steps, &[("TOKEN", UPSTREAM_TOKEN)]);
    let error = got["error"].as_str().unwrap_or_else(|| panic!("{got}"));
    assert!(
        error.contains("refused this request with HTTP 401"),
        "the gateway's token went on: {error}"
    );
    let log = guarded.stop();
    assert!(!log.contains(UPSTREAM_TOKEN), "the token was logged: {log}");

    let header = format!("Authorization: Bearer {UPSTREAM_TOKEN}");
    let env = [("GATEWAY_TOKEN", GATEWAY_TOKEN)];
    let mut both = gateway_on(
        &store,
        &server.url(),
        &["--require-token", "GATEWAY_TOKEN", "--header", &header],
        &env,
    );
    // The holders of the gateway's token are a principal of their own: not the client that
    // sent the server's token itself, whose result they do not get.
    let got = sdk_client(&both.url(), &steps, &[("TOKEN", GATEWAY_TOKEN)]);
    assert!(got.get("error").is_none(), "{got}");
    assert_eq!(
        result_text(&got["results"][0]),
        "wrote t (execution 2)",
        "{got}"
    );
    let got = sdk_client(&both.url(), &steps, &[("TOKEN", GATEWAY_TOKEN)]);
    assert_eq!(outcome(&got["results"][0]), Some("replayed"), "{got}");
    let got = sdk_client(&both.url(), &steps, &[("TOKEN", UPSTREAM_TOKEN)]);
    let error = got["error"].as_str().unwrap_or_else(|| panic!("{got}"));
    assert!(
        error.contains("a valid bearer token is required"),
        "{error}"
    );
    let log = both.stop();
    assert!(
        !log.contains(UPSTREAM_TOKEN) && !log.contains(GATEWAY_TOKEN),
        "{log}"
    );
    assert_eq!(server.executions().len(), 2);
}

/// Requests without a session share proxies, but never across credentials: a request goes to
/// the HTTP server with the `Authorization` it came with, whatever came in between.
#[test]
fn sessionless_requests_through_the_gateway_reach_the_http_server_with_their_own_authorization() {
    let server = HttpServer::bridge(&mcp_peer::modern_server());
    let mut gateway = gateway_to(
        &server.url(),
        &["--server-id", "mail", "--forward-authorization"],
        &[],
    );
    let port = gateway.port;
    let tokens = ["alice-0a1b2c3d4e5f", "bob-9f8e7d6c5b4a"];
    std::thread::scope(|scope| {
        for token in tokens {
            scope.spawn(move || {
                for round in 0..5 {
                    let headers = format!("Authorization: Bearer {token}\r\n");
                    // The gateway gives each request an id of its own (requests without a
                    // session share server processes): a `_meta` member says whose it is.
                    let who = format!("{token}-{round}");
                    let params = json!({"_meta": {"com.example/who": who}});
                    let answer = read_raw(modern_send(
                        port,
                        &headers,
                        "tools/list",
                        Some(json!(round)),
                        params,
                    ));
                    let answer = answer.messages().pop().unwrap();
                    assert_eq!(answer["id"], json!(round), "{answer}");
                    assert!(answer["result"]["tools"].is_array(), "{answer}");
                }
            });
        }
    });
    let requests = server.requests();
    let mut checked = 0;
    for request in &requests {
        let Some(id) = request["who"].as_str() else {
            continue;
        };
        for token in tokens {
            if id.starts_with(token) {
                assert_eq!(
                    request["authorization"],
                    format!("Bearer {token}"),
                    "{requests:#?}"
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 10, "{requests:#?}");
    // The proxy's own listings went with the credentials of the proxy's clients too.
    assert!(
        requests.iter().all(|r| r["authorization"] != Value::Null),
        "{requests:#?}"
    );
    let log = gateway.stop();
    assert!(
        !log.contains(tokens[0]) && !log.contains(tokens[1]),
        "{log}"
    );
}

/// Two gateways in front of two different HTTP servers, on one store and one scope: the same
/// tool with the same arguments is a different operation on each server (the server id,
/// derived from the URL, is part of the key), and the same one again on either.
#[test]
fn gateways_in_front_of_different_http_servers_on_one_store_keep_their_keys_apart() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("toolonce.db").display());
    let (one, two) = (
        HttpServer::start("json", &[]),
        HttpServer::start("json", &[]),
    );
    let mut a = gateway_on(&store, &one.url(), &[], &[]);
    let mut b = gateway_on(&store, &two.url(), &[], &[]);
    let steps = json!([{"tool": "write", "args": {"item": "same"}}]);
    let got = sdk_client(&a.url(), &steps, &[]);
    assert_eq!(
        result_text(&got["results"][0]),
        "wrote same (execution 1)",
        "{got}"
    );
    let got = sdk_client(&b.url(), &steps, &[]);
    assert_eq!(
        result_text(&got["results"][0]),
        "wrote same (execution 1)",
        "{got}"
    );
    assert_eq!(outcome(&got["results"][0]), None, "{got}");
    // A third gateway in front of the first server, started later, replays its write.
    let mut c = gateway_on(&store, &one.url(), &[], &[]);
    let got = sdk_client(&c.url(), &steps, &[]);
    assert_eq!(outcome(&got["results"][0]), Some("replayed"), "{got}");
    assert_eq!((one.executions().len(), two.executions().len()), (1, 1));
    let keys = [&one.executions()[0]["key"], &two.executions()[0]["key"]];
    assert_ne!(keys[0], keys[1], "{keys:?}");
    a.stop();
    b.stop();
    c.stop();
}

/// The HTTP server behind the gateway goes down: a write is answered "not executed" (it never
/// left), a duplicate of one that ran still replays, and a read gets an error.
#[test]
fn an_http_server_that_is_down_behind_the_gateway_gets_writes_answered_not_executed() {
    let mut server = HttpServer::start("json", &[]);
    let mut gateway = gateway_to(&server.url(), &[], &[]);
    let session = open_session(gateway.port);
    let write = |id: &str, item: &str| {
        raw_call(gateway.port, &session, id, "write", &json!({"item": item}))
    };
    let first = write("w-1", "before");
    assert_eq!(text(&first), "wrote before (execution 1)", "{first}");
    server.stop();

    let down = write("w-2", "while down");
    assert_eq!(down["result"]["isError"], true, "{down}");
    assert_eq!(
        down["result"]["_meta"]["toolonce/outcome"], "not_executed",
        "{down}"
    );
    let again = write("w-3", "before");
    assert_eq!(
        again["result"]["_meta"]["toolonce/outcome"], "replayed",
        "{again}"
    );
    let read = raw_call(gateway.port, &session, "r-1", "read", &json!({}));
    let message = read["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("cannot be reached"), "{read}");
    assert_eq!(server.executions().len(), 1);
    gateway.stop();
}
