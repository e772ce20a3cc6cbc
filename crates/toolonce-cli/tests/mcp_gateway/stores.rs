//! Gateways sharing a store: two processes on one real Redis, and a store that is down.

use super::*;

/// Redis-backed gateways: a session on each, then the same write POSTed to both at the same
/// moment, round after round.
#[test]
fn two_gateways_on_one_redis_run_a_write_sent_to_both_at_once_or_in_turn_once() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let mut a = gateway_for_command(&redis.url(), &counter, &[]);
    let mut b = gateway_for_command(&redis.url(), &counter, &[]);
    let sessions = [
        (a.port, open_session(a.port)),
        (b.port, open_session(b.port)),
    ];
    let charges = || {
        std::fs::read_to_string(&counter)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("charge\t"))
            .count()
    };
    let rounds = 8;
    for round in 0..rounds {
        let barrier = Arc::new(Barrier::new(2));
        let answers: Vec<Value> = std::thread::scope(|scope| {
            let threads: Vec<_> = sessions
                .iter()
                .map(|(port, session)| {
                    let barrier = barrier.clone();
                    scope.spawn(move || {
                        let body = format!(
                            r#"{{"jsonrpc":"2.0","id":{round},"method":"tools/call","params":{{"name":"charge","arguments":{{"amount":{}}}}}}}"#,
                            100 + round
                        );
                        let headers = format!("{BOTH}{session}");
                        barrier.wait();
                        raw(*port, "POST", &headers, &body).messages().pop().unwrap()
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert_eq!(charges(), round as usize + 1, "round {round}: {answers:?}");
        // One ran it; the other replayed it or was told it is in flight.
        let ran = answers
            .iter()
            .filter(|a| a["result"]["_meta"].get("toolonce/outcome").is_none())
            .count();
        assert!(ran <= 1, "{answers:?}");
    }
    // In turn: every duplicate, on either gateway, is the replay.
    for (i, (port, session)) in sessions.iter().enumerate() {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":"again-{i}","method":"tools/call","params":{{"name":"charge","arguments":{{"amount":100}}}}}}"#
        );
        let answer = raw(*port, "POST", &format!("{BOTH}{session}"), &body)
            .messages()
            .pop()
            .unwrap();
        assert_eq!(
            answer["result"]["_meta"]["toolonce/outcome"], "replayed",
            "{answer}"
        );
    }
    let body = r#"{"jsonrpc":"2.0","id":"fresh","method":"tools/call","params":{"name":"charge","arguments":{"amount":999}}}"#;
    for (port, session) in &sessions {
        raw(*port, "POST", &format!("{BOTH}{session}"), body);
    }
    assert_eq!(charges(), rounds as usize + 1);
    a.stop();
    b.stop();
}

#[test]
fn a_store_that_is_down_gets_writes_through_the_gateway_answered_not_executed_and_reads_pass() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let store = format!("redis://127.0.0.1:{}", toolonce_testsupport::free_port());
    let mut gateway = gateway_for_command(&store, &counter, &[]);
    let session = open_session(gateway.port);
    let answer = raw_call(gateway.port, &session, "w", "charge", &json!({"amount": 5}));
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(text(&answer).contains("Not executed"), "{answer}");
    let read = raw_call(gateway.port, &session, "r", "lookup", &json!({}));
    assert_ne!(read["result"]["isError"], true, "{read}");
    let executed = std::fs::read_to_string(&counter).unwrap_or_default();
    assert!(!executed.contains("charge"), "{executed}");
    assert!(executed.contains("lookup"), "{executed}");
    gateway.stop();
}
