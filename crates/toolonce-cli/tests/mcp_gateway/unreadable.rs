//! Answers serde_json cannot read, through the gateway, in front of the stdio test server and
//! of an HTTP server (both answer modes): the write ran once, its answer is recorded as it
//! came, and every duplicate, in any session, gets the same bytes under its own id.

use super::*;

/// A `garbled` call (`how`: `surrogate` or `deep`) under `id` on a session of its own; returns
/// the answer's JSON-RPC message as the bytes that came, a JSON body or an event's data.
fn garbled_call(port: u16, id: &str, how: &str) -> String {
    let session = open_session(port);
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": "garbled", "arguments": {"how": how}}});
    let answer = raw(port, "POST", &format!("{BOTH}{session}"), &body.to_string());
    assert_eq!(answer.status(), 200, "{}", answer.body);
    let needle = format!(r#""id":"{id}""#);
    answer
        .body
        .lines()
        .map(|l| l.strip_prefix("data: ").unwrap_or(l))
        .find(|l| l.contains(&needle))
        .unwrap_or_else(|| panic!("no answer to {id} in {:?}", answer.body))
        .to_owned()
}

/// Three identical calls of each kind, each in a new session: one execution each, and the
/// same bytes for every caller.
fn each_runs_once_with_the_same_bytes_for_all(port: u16, executions: &dyn Fn(&str) -> usize) {
    for how in ["surrogate", "deep"] {
        let ids = [format!("{how}-1"), format!("{how}-2"), format!("{how}-3")];
        let answers: Vec<String> = ids.iter().map(|id| garbled_call(port, id, how)).collect();
        assert_eq!(
            executions(how),
            1,
            "{how}: the write ran again: {answers:?}"
        );
        let first = &answers[0];
        assert!(first.contains(r"\ud83d"), "{how}: {first}");
        for (answer, id) in answers.iter().zip(&ids) {
            assert_eq!(
                answer.replace(id.as_str(), &ids[0]),
                *first,
                "{how}: the duplicate {id} did not get the first answer's bytes"
            );
        }
    }
}

#[test]
fn an_unreadable_answer_of_a_server_command_behind_the_gateway_is_recorded_and_never_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let gateway = gateway_for_command("memory://", &counter, &[]);
    let port = gateway.port;
    each_runs_once_with_the_same_bytes_for_all(port, &|how| {
        std::fs::read_to_string(&counter)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("garbled\t") && l.contains(how))
            .count()
    });
}

#[test]
fn an_unreadable_answer_of_an_http_server_behind_the_gateway_is_recorded_and_never_run_again() {
    for mode in ["json", "sse"] {
        let server = HttpServer::start(mode, &[]);
        let gateway = gateway_to(&server.url(), &[], &[]);
        each_runs_once_with_the_same_bytes_for_all(gateway.port, &|how| {
            server
                .executions()
                .iter()
                .filter(|e| e["item"] == format!("garbled {how}"))
                .count()
        });
    }
}
