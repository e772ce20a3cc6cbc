//! Requests without a session (protocol 2026-07-28) from many clients share the gateway's
//! server processes: each client sees only its own requests' messages, answers and cancels, and
//! one client's request ids never get in another's way.

use super::*;

/// The lines the test server counted for `tool`.
fn counted(counter: &Path, tool: &str) -> usize {
    std::fs::read_to_string(counter)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with(&format!("{tool}\t")))
        .count()
}

/// A 2026-07-28 request without a session, waiting for the whole answer.
fn modern_raw(port: u16, method: &str, id: Option<Value>, params: Value) -> Raw {
    read_raw(modern_send(port, "", method, id, params))
}

#[test]
fn a_shared_servers_messages_reach_only_the_stream_of_the_request_they_belong_to() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let mut gateway = gateway_for_command_with(&counter, &[]);
    let port = gateway.port;
    // Alice's request learns its secret after a while, and asks for progress with token "t";
    // Bob's, sent meanwhile with the same progress token, is the newest in progress then.
    let alice = std::thread::spawn(move || {
        modern_raw(
            port,
            "tools/call",
            Some(json!(1)),
            json!({"name": "tell", "_meta": {"progressToken": "t"},
                   "arguments": {"text": "alice: card 4111-1111 charged", "ms": 1000}}),
        )
    });
    eventually("alice's call to start", || counted(&counter, "tell") == 1);
    let bob = std::thread::spawn(move || {
        modern_raw(
            port,
            "tools/call",
            Some(json!(2)),
            json!({"name": "slow", "_meta": {"progressToken": "t"}, "arguments": {"ms": 2000}}),
        )
    });
    let (alice, bob) = (alice.join().unwrap(), bob.join().unwrap());
    assert!(
        !bob.body.contains("alice"),
        "bob saw alice's data: {}",
        bob.body
    );
    let bobs = bob.messages();
    assert_eq!(bobs.len(), 1, "{bobs:?}");
    assert_eq!(bobs[0]["id"], json!(2), "{bobs:?}");
    assert!(
        result_text(&bobs[0]["result"]).contains("slow done"),
        "{bobs:?}"
    );
    let alices = alice.messages();
    let progress: Vec<&Value> = alices
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 1, "{alices:?}");
    assert_eq!(
        progress[0]["params"]["progressToken"],
        json!("t"),
        "{alices:?}"
    );
    assert_eq!(
        progress[0]["params"]["message"],
        json!("alice: card 4111-1111 charged")
    );
    let last = alices.last().unwrap();
    assert_eq!(last["id"], json!(1), "{alices:?}");
    assert!(
        result_text(&last["result"]).contains("tell done"),
        "{alices:?}"
    );
    gateway.stop();
}

#[test]
fn a_clients_cancel_without_a_session_never_cancels_another_clients_request() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let mut gateway = gateway_for_command_with(&counter, &[]);
    let port = gateway.port;
    let alice = std::thread::spawn(move || {
        modern_raw(
            port,
            "tools/call",
            Some(json!(1)),
            json!({"name": "slow", "arguments": {"ms": 1500}}),
        )
    });
    eventually("alice's call to start", || counted(&counter, "slow") == 1);
    // Bob cancels his own id 1, which Alice's request has too.
    let cancel = modern_raw(
        port,
        "notifications/cancelled",
        None,
        json!({"requestId": 1, "reason": "bob gave up"}),
    );
    assert_eq!(cancel.status(), 202, "{}", cancel.body);
    let alice = alice.join().unwrap();
    let answer = alice.messages().pop().expect("alice got an answer");
    assert_eq!(answer["id"], json!(1), "{answer}");
    assert!(
        result_text(&answer["result"]).contains("slow done"),
        "{answer}"
    );
    gateway.stop();
}

#[test]
fn a_client_hanging_up_mid_call_leaves_its_request_id_free_for_later_clients() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let mut gateway = gateway_for_command_with(&counter, &[]);
    let port = gateway.port;
    let hung = modern_send(
        port,
        "",
        "tools/call",
        Some(json!(1)),
        json!({"name": "hang", "arguments": {"who": "alice"}}),
    );
    eventually("the call to reach the server", || {
        counted(&counter, "hang") == 1
    });
    drop(hung);
    for n in 1..=3 {
        let answer = modern_raw(
            port,
            "tools/call",
            Some(json!(1)),
            json!({"name": "charge", "arguments": {"amount": n}}),
        );
        let answer = answer.messages().pop().unwrap();
        assert_eq!(answer["id"], json!(1), "{answer}");
        assert!(
            result_text(&answer["result"]).contains("charge done"),
            "client {n}: {answer}"
        );
    }
    assert_eq!(counted(&counter, "charge"), 3);
    gateway.stop();
}

#[test]
fn what_an_http_server_sends_on_a_requests_stream_reaches_only_that_clients_request() {
    let server = HttpServer::streaming();
    let mut gateway = gateway_to(&server.url(), &[], &[]);
    let port = gateway.port;
    let report = move |id: i64, text: &'static str, ms: u64| {
        std::thread::spawn(move || {
            modern_raw(
                port,
                "tools/call",
                Some(json!(id)),
                json!({"name": "report", "_meta": {"progressToken": "t"},
                       "arguments": {"text": text, "ms": ms}}),
            )
        })
    };
    // Alice's messages come while Bob's request, with the same id and progress token, is the
    // newest in progress; Bob's come after Alice's answer.
    let alice = report(1, "alice: card 4111-1111 charged", 800);
    std::thread::sleep(Duration::from_millis(200));
    let bob = report(1, "bob: nothing to see", 1500);
    let (alice, bob) = (alice.join().unwrap(), bob.join().unwrap());
    for (raw, text, other) in [
        (&alice, "alice: card 4111-1111 charged", "alice"),
        (&bob, "bob: nothing to see", "bob"),
    ] {
        let stranger = if other == "alice" { "bob" } else { "alice" };
        assert!(
            !raw.body.contains(stranger),
            "{other} saw {stranger}'s: {}",
            raw.body
        );
        let messages = raw.messages();
        let of = |method: &str| -> Vec<&Value> {
            messages.iter().filter(|m| m["method"] == method).collect()
        };
        let progress = of("notifications/progress");
        assert_eq!(progress.len(), 1, "{messages:?}");
        assert_eq!(
            progress[0]["params"]["progressToken"],
            json!("t"),
            "{messages:?}"
        );
        assert_eq!(
            progress[0]["params"]["message"],
            json!(text),
            "{messages:?}"
        );
        let logs = of("notifications/message");
        assert_eq!(logs.len(), 1, "{messages:?}");
        assert_eq!(logs[0]["params"]["data"], json!(text), "{messages:?}");
        let asks = of("elicitation/create");
        assert_eq!(asks.len(), 1, "{messages:?}");
        assert_eq!(asks[0]["params"]["message"], json!(text), "{messages:?}");
        let last = messages.last().unwrap();
        assert_eq!(last["id"], json!(1), "{messages:?}");
        assert_eq!(
            result_text(&last["result"]),
            format!("reported {text}"),
            "{messages:?}"
        );
    }
    gateway.stop();
}
